import Foundation

/// A hand-written SVG of one pipeline run: notifications/s per second, and the p50 and p99
/// produce-to-result latency of the results of each second (nil: no result that second).
enum PipelinePlot {
    static func svg(title: String, throughput: [Double], p50: [Double?], p99: [Double?]) -> String {
        var svg = """
            <svg xmlns="http://www.w3.org/2000/svg" width="900" height="560" font-family="sans-serif" font-size="12">
            <rect width="900" height="560" fill="white"/>
            <text x="450" y="22" text-anchor="middle" font-size="14">\(title)</text>

            """
        svg += panel(top: 45, unit: "notifications/s", series: [(throughput, "#1f77b4", "results per second")])
        svg += panel(top: 315, unit: "latency ms", series: [(p50, "#2ca02c", "p50"), (p99, "#d62728", "p99")])
        return svg + "</svg>\n"
    }

    /// One 800 x 200 chart with its frame, axis labels (seconds of the run) and a legend.
    private static func panel(top: Double, unit: String, series: [(values: [Double?], color: String, name: String)]) -> String {
        let left = 70.0
        let width = 800.0
        let height = 200.0
        let maxY = max(1, series.flatMap { $0.values.compactMap { $0 } }.max() ?? 1)
        let seconds = max(2, series.map(\.values.count).max() ?? 2)
        var out = """
            <rect x="\(left)" y="\(top)" width="\(width)" height="\(height)" fill="none" stroke="#999"/>
            <text x="\(left - 6)" y="\(top + 4)" text-anchor="end">\(Int(maxY))</text>
            <text x="\(left - 6)" y="\(top + height)" text-anchor="end">0</text>
            <text x="\(left)" y="\(top + height + 16)">0 s</text>
            <text x="\(left + width)" y="\(top + height + 16)" text-anchor="end">\(seconds - 1) s</text>
            <text x="\(left + width / 2)" y="\(top + height + 16)" text-anchor="middle">\(unit)</text>

            """
        for (index, line) in series.enumerated() {
            let points = line.values.enumerated().compactMap { second, value in
                value.map { value in String(format: "%.1f,%.1f", left + width * Double(second) / Double(seconds - 1), top + height * (1 - value / maxY)) }
            }
            out += """
                <polyline fill="none" stroke="\(line.color)" stroke-width="1.5" points="\(points.joined(separator: " "))"/>
                <text x="\(left + 10 + 150 * Double(index))" y="\(top - 6)" fill="\(line.color)">\(line.name)</text>

                """
        }
        return out
    }
}
