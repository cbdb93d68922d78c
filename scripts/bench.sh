#!/usr/bin/env bash
# Herald's benchmarks (see BENCHMARKS.md) on the local services scripts/test.sh uses: the APNs
# sender against h2load on the same mock APNs, the FCM sender against h2load on the same mock FCM,
# the batched token lookup on PostgreSQL, and the whole pipeline (the real herald executable on
# the broker, PostgreSQL and mock APNs), APNs only and then with half the devices on Android.
#   scripts/bench.sh [SENDER OPTIONS]     all of them; the arguments go to `herald-bench sender`
#                                         (e.g. --requests 50000 --rounds 7), the FCM sender's
#                                         options come from FCM_SENDER_ARGS (e.g. "--rounds 7"),
#                                         the pipeline's from PIPELINE_ARGS
#                                         (e.g. PIPELINE_ARGS="--shape single --notifications 20000")
#   scripts/bench.sh fcm-sender [OPTIONS] only `herald-bench fcm-sender OPTIONS`
#   scripts/bench.sh pipeline [OPTIONS]   only `herald-bench pipeline OPTIONS`
#                                         (e.g. --shape mixed --herald-env HERALD_POLL_BATCH_SIZE=512);
#                                         `herald-bench pipeline --help` lists the options
#   scripts/bench.sh steady-cost [OPTIONS] the cost of a notification at a steady load against the
#                                         burst's, in one run: a burst of 100,000, then 1,000/s for
#                                         25 s with small fetches (HERALD_KAFKA_FETCH_WAIT_MAX_MS=10,
#                                         as Apache Kafka answers a fetch once data arrives); OPTIONS
#                                         go to both (e.g. --herald <binary>)
set -euo pipefail
# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"
start_services

if [[ "${1:-}" == steady-cost ]]; then
  shift
  burst="$("$BIN/herald-bench" pipeline --shape single --notifications 100000 "$@" | tee /dev/stderr)"
  steady="$("$BIN/herald-bench" pipeline --shape single --notifications 25000 --rate 1000 \
    --herald-env HERALD_KAFKA_FETCH_WAIT_MAX_MS=10 "$@" | tee /dev/stderr)"
  burst_cpu="$(sed -n 's/^  herald  *\([0-9.]*\) µs\/notification.*/\1/p' <<<"$burst")"
  steady_cpu="$(sed -n 's/^after the first .*herald CPU \([0-9.]*\) µs\/notification/\1/p' <<<"$steady")"
  echo
  echo "steady cost against the burst, one run: burst $(grep -m1 "^throughput" <<<"$burst" | cut -d"(" -f1)"
  echo "  burst: herald CPU $burst_cpu µs/notification; $(grep -m1 '^per poll batch' <<<"$burst")"
  echo "  steady 1,000/s, small fetches: herald CPU $steady_cpu µs/notification after the first 5 s; $(grep -m1 '^per poll batch' <<<"$steady")"
  echo "  burst (the whole run: a backlog drains) $(grep -m1 'poll to publish started' <<<"$burst" | sed 's/^ *//')"
  echo "  steady (after the first 5 s) $(grep 'poll to publish started' <<<"$steady" | tail -1 | sed 's/^ *//')"
  echo "  steady / burst CPU per notification: $(awk -v s="$steady_cpu" -v b="$burst_cpu" 'BEGIN { printf "%.1f", s / b }')"
  exit
fi
if [[ "${1:-}" == pipeline || "${1:-}" == fcm-sender ]]; then
  "$BIN/herald-bench" "$@"
  exit
fi
"$BIN/herald-bench" sender "$@"
echo
# shellcheck disable=SC2086  # FCM_SENDER_ARGS is split into words on purpose
"$BIN/herald-bench" fcm-sender ${FCM_SENDER_ARGS:-}
echo
"$BIN/herald-bench" lookup --users 1000
echo
# shellcheck disable=SC2086  # PIPELINE_ARGS is split into words on purpose
"$BIN/herald-bench" pipeline ${PIPELINE_ARGS:-}
echo
# shellcheck disable=SC2086  # PIPELINE_ARGS is split into words on purpose
"$BIN/herald-bench" pipeline ${PIPELINE_ARGS:-} --android-share 0.5
