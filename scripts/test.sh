#!/usr/bin/env bash
# The whole test suite on real parts: installs what is missing, starts a throw-away PostgreSQL
# and the Tansu broker (scripts/services.sh), builds, runs unit and integration tests, stops
# the services again. Extra arguments go to `swift test` (e.g. --filter WalkingSkeleton).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="/opt/swift/usr/bin:$PATH"

scripts/services.sh start
trap 'scripts/services.sh stop' EXIT
# shellcheck disable=SC1091
source .local/run/services.env

# Release mode: the integration tests push tens of thousands of notifications through
# SwiftNIO, HTTP/2 and TLS, which run about 50 times slower in a debug build
# (-enable-testing keeps @testable imports of internal types working).
swift build -c release --build-tests -Xswiftc -enable-testing
# The crash tests run the real `herald` executable as a child process.
HERALD_BIN="$(swift build -c release --show-bin-path)/herald"
export HERALD_BIN
# Serially: the integration suites share one broker and two cores; in parallel they starve each other.
swift test -c release -Xswiftc -enable-testing --skip-build --no-parallel "$@"
