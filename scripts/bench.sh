#!/usr/bin/env bash
# Herald's benchmarks (see BENCHMARKS.md) on the local services scripts/test.sh uses: the APNs
# sender against h2load on the same mock APNs, the batched token lookup on PostgreSQL, and the
# whole pipeline (the real herald executable on the broker, PostgreSQL and mock APNs).
#   scripts/bench.sh [SENDER OPTIONS]     all three; the arguments go to `herald-bench sender`
#                                         (e.g. --requests 50000 --rounds 7), the pipeline's
#                                         options come from PIPELINE_ARGS
#                                         (e.g. PIPELINE_ARGS="--shape single --notifications 20000")
#   scripts/bench.sh pipeline [OPTIONS]   only `herald-bench pipeline OPTIONS`
#                                         (e.g. --shape mixed --herald-env HERALD_POLL_BATCH_SIZE=512);
#                                         `herald-bench pipeline --help` lists the options
set -euo pipefail
# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"
start_services

if [[ "${1:-}" == pipeline ]]; then
  shift
  "$BIN/herald-bench" pipeline "$@"
  exit
fi
"$BIN/herald-bench" sender "$@"
echo
"$BIN/herald-bench" lookup --users 1000
echo
# shellcheck disable=SC2086  # PIPELINE_ARGS is split into words on purpose
"$BIN/herald-bench" pipeline ${PIPELINE_ARGS:-}
