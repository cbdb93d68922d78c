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
#   scripts/bench.sh webpush-sender [OPTIONS] only `herald-bench webpush-sender OPTIONS`
#   scripts/bench.sh pipeline [OPTIONS]   only `herald-bench pipeline OPTIONS`
#                                         (e.g. --shape mixed --herald-env HERALD_POLL_BATCH_SIZE=512);
#                                         `herald-bench pipeline --help` lists the options
#   scripts/bench.sh steady-cost [OPTIONS] the cost of a notification at a steady load against the
#                                         burst's, in one run: a burst of 100,000, then 1,000/s for
#                                         25 s with small fetches (HERALD_KAFKA_FETCH_WAIT_MAX_MS=10,
#                                         as Apache Kafka answers a fetch once data arrives); OPTIONS
#                                         go to both (e.g. --herald <binary>)
#   scripts/bench.sh webpush [OPTIONS]    browsers through Web Push, in one invocation: Web Push
#                                         encryption against its floor (`herald-bench
#                                         webpush-encrypt`), the Web Push sender against h2load
#                                         (`herald-bench webpush-sender`), then the pipeline
#                                         alternating APNs only and a third of the devices
#                                         browsers (--browser-share 0.33), WEBPUSH_ROUNDS times
#                                         each (default 3), and a table of their throughput and
#                                         herald CPU per notification with the medians; OPTIONS go
#                                         to every pipeline run (default: --shape single
#                                         --notifications 100000), the Web Push sender's options
#                                         come from WEBPUSH_SENDER_ARGS (e.g. "--rounds 7")
set -euo pipefail
# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"
# The mocks the benchmarks start as child processes: release-build.sh's build makes every
# product; a missing one is built here, before the services start (see start_services).
for mock in mock-apns mock-fcm mock-webpush; do
  [[ -x "$BIN/$mock" ]] || swift build -c release --product "$mock" -Xswiftc -enable-testing
done
start_services

if [[ "${1:-}" == webpush ]]; then
  shift
  (($# > 0)) || set -- --shape single --notifications 100000
  "$BIN/herald-bench" webpush-encrypt
  echo
  # shellcheck disable=SC2086  # WEBPUSH_SENDER_ARGS is split into words on purpose
  "$BIN/herald-bench" webpush-sender ${WEBPUSH_SENDER_ARGS:-}
  runs=()
  for round in $(seq "${WEBPUSH_ROUNDS:-3}"); do
    for mix in apns-only browsers; do
      extra=()
      [[ $mix == browsers ]] && extra=(--browser-share 0.33)
      echo
      echo "== webpush comparison, round $round: $mix"
      out="$("$BIN/herald-bench" pipeline "$@" "${extra[@]}" | tee /dev/stderr)"
      throughput="$(sed -n 's/^throughput: \([0-9.]*\) notifications\/s.*/\1/p' <<<"$out" | head -1)"
      cpu="$(sed -n 's/^  herald  *\([0-9.]*\) µs\/notification.*/\1/p' <<<"$out" | head -1)"
      runs+=("$round $mix $throughput $cpu")
    done
  done
  echo
  echo "APNs only against a third of the devices browsers, alternating, one invocation:"
  printf '%s\n' "${runs[@]}" | awk '
    { printf "  round %s  %-9s %10s notifications/s  herald %8s CPU µs/notification\n", $1, $2, $3, $4
      n[$2]++; t[$2, n[$2]] = $3; c[$2, n[$2]] = $4 }
    function median(a, m, k,   i, j, v, x) {
      for (i = 1; i <= m; i++) v[i] = a[k, i]
      for (i = 2; i <= m; i++) { x = v[i]; for (j = i - 1; j > 0 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
      return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    END {
      for (k in n) { mt[k] = median(t, n[k], k); mc[k] = median(c, n[k], k) }
      printf "  median apns-only: %.0f notifications/s, herald %.1f CPU µs/notification\n", mt["apns-only"], mc["apns-only"]
      printf "  median browsers:  %.0f notifications/s, herald %.1f CPU µs/notification\n", mt["browsers"], mc["browsers"]
      if (mt["apns-only"] > 0) printf "  browsers / apns-only throughput: %.2f\n", mt["browsers"] / mt["apns-only"]
    }'
  exit
fi

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
if [[ "${1:-}" == pipeline || "${1:-}" == fcm-sender || "${1:-}" == webpush-sender ]]; then
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
