# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/bench.sh (not run on its own): starts the local
# services (stopped again on exit), exports their environment and builds every product and test
# in release mode. Release, because the integration tests and benchmarks push tens of thousands
# of notifications through SwiftNIO, HTTP/2 and TLS, which run about 50 times slower in a debug
# build; -enable-testing keeps @testable imports working, so tests and benchmarks share one build.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
export PATH="/opt/swift/usr/bin:$PATH"

scripts/services.sh start
trap 'scripts/services.sh stop' EXIT
# shellcheck disable=SC1091
source .local/run/services.env

swift build -c release --build-tests -Xswiftc -enable-testing
# shellcheck disable=SC2034 # read by the scripts that source this file
BIN="$(swift build -c release --show-bin-path)"
