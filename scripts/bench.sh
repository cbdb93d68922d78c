#!/usr/bin/env bash
# Herald's benchmarks (see BENCHMARKS.md): the APNs sender against h2load on the same mock APNs,
# and the batched token lookup on PostgreSQL, on the local services scripts/test.sh uses.
# Extra arguments go to `herald-bench sender` (e.g. --requests 50000 --rounds 7).
set -euo pipefail
# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"

"$BIN/herald-bench" sender "$@"
echo
"$BIN/herald-bench" lookup --users 1000
