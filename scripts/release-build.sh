# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/bench.sh (not run on its own): installs what the build
# needs and builds every product and test in release mode; `start_services` then starts the local
# services (stopped again on exit) and exports their environment. Release, because the
# integration tests and benchmarks push tens of thousands of notifications through SwiftNIO,
# HTTP/2 and TLS, which run about 50 times slower in a debug build; -enable-testing keeps
# @testable imports working, so tests and benchmarks share one build.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/opt/swift/usr/bin:$PATH"

scripts/install-deps.sh
swift build -c release --build-tests -Xswiftc -enable-testing
# shellcheck disable=SC2034 # read by the scripts that source this file
BIN="$(swift build -c release --show-bin-path)"

# Starts the services and exports their variables. Call it after the last `swift build`: SwiftPM
# plans a build again when its environment changed, and the services take new ports at every
# start, so a build after it never found its plan of the run before (a warm build that does
# nothing took 47 s that way instead of 1 s).
start_services() {
  scripts/services.sh start
  trap 'scripts/services.sh stop' EXIT
  # shellcheck disable=SC1091
  source .local/run/services.env
}

# Starts a second, independent set of services in .local/run-2 (stopped on exit with the
# first); its variables are in .local/run-2/services.env, for a second shard of tests.
start_second_services() {
  HERALD_SERVICES_RUN="$ROOT/.local/run-2" scripts/services.sh start
  trap 'HERALD_SERVICES_RUN="$ROOT/.local/run-2" scripts/services.sh stop; scripts/services.sh stop' EXIT
}
