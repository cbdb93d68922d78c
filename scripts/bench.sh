#!/usr/bin/env bash
# Herald's benchmarks (see BENCHMARKS.md): the APNs sender against h2load on the same mock APNs,
# and the batched token lookup on PostgreSQL. Starts the local services like scripts/test.sh.
# Extra arguments go to `herald-bench sender` (e.g. --requests 50000 --rounds 7).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="/opt/swift/usr/bin:$PATH"

scripts/services.sh start
trap 'scripts/services.sh stop' EXIT
# shellcheck disable=SC1091
source .local/run/services.env

# The same flags as scripts/test.sh, so tests and benchmarks share one release build.
swift build -c release --build-tests -Xswiftc -enable-testing
BIN="$(swift build -c release --show-bin-path)"
"$BIN/herald-bench" sender "$@"
echo
"$BIN/herald-bench" lookup --users 1000
