"""Per-second p99 of a herald-bench plot (the red polyline of the latency panel)."""
import re, sys
svg = open(sys.argv[1]).read()
top_label = re.findall(r'<text x="64.0" y="319.0" text-anchor="end">([0-9.]+)</text>', svg)
scale = float(top_label[0])
line = re.search(r'stroke="#d62728"[^>]*points="([^"]+)"', svg).group(1)
values = [(float(x), (515.0 - float(y)) / 200.0 * scale) for x, y in (p.split(",") for p in line.split())]
width = 800.0 / max(1, len(re.search(r'stroke="#1f77b4"[^>]*points="([^"]+)"', svg).group(1).split()) - 1)
seconds = [(round((x - 70.0) / width), v) for x, v in values]
print(" ".join(f"{s}:{v:.0f}" for s, v in seconds))
