#!/usr/bin/env bash
# The ledger at size (BENCHMARKS.md "The ledger at a billion a day"), against the local services
# (scripts/services.sh start; release build of herald and herald-bench):
#   scripts/ledger-at-size.sh fill    10,000,000 outcomes over the 8 days up to today in the
#                                     database of HERALD_POSTGRES_URL (herald migrate first)
#   scripts/ledger-at-size.sh ab      three interleaved bursts on an empty ledger (database
#                                     herald_empty, made here) and on the filled one
#   scripts/ledger-at-size.sh drop DAY
#                                     an open load of 2,400/s for 40 s; DROP TABLE
#                                     push.delivery_ledger_DAY (YYYYMMDD) once 40,000 results are in
#   scripts/ledger-at-size.sh load    the same open load without a drop
# Output goes to .local/bench/ledger-*.txt (and .svg); p99-per-second.py reads a plot's
# per-second p99.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=/dev/null
source .local/run/services.env
OUT=.local/bench
mkdir -p "$OUT"
BENCH=.build/release/herald-bench

open_load() {
  "$BENCH" pipeline --shape single --notifications 96000 --rate 2400 --plot "${1%.txt}.svg" >"$1" 2>&1
}

case "${1:-}" in
  fill)
    psql "$HERALD_POSTGRES_URL" -f scripts/ledger-at-size/fill.sql
    ;;
  ab)
    empty="${HERALD_POSTGRES_URL%/*}/herald_empty"
    psql "$HERALD_POSTGRES_URL" -qc "DROP DATABASE IF EXISTS herald_empty" -c "CREATE DATABASE herald_empty"
    HERALD_POSTGRES_URL=$empty .build/release/herald migrate >/dev/null
    for round in 1 2 3; do
      for ledger in empty full; do
        url=$HERALD_POSTGRES_URL
        if [[ $ledger == empty ]]; then
          url=$empty
          psql "$empty" -qc "TRUNCATE push.delivery_ledger"
        fi
        HERALD_POSTGRES_URL=$url "$BENCH" pipeline --shape single --notifications 100000 >"$OUT/ledger-$ledger-$round.txt" 2>&1
        echo "$ledger $round: $(grep -E '^throughput' "$OUT/ledger-$ledger-$round.txt")"
      done
    done
    ;;
  drop)
    day=${2:?"drop needs the day, YYYYMMDD"}
    out="$OUT/ledger-open-drop-$day.txt"
    open_load "$out" &
    bench=$!
    until grep -qE '^ +[4-9][0-9]{4}/' "$out" 2>/dev/null; do sleep 0.2; done
    psql "$HERALD_POSTGRES_URL" -c '\timing on' -c "DROP TABLE push.delivery_ledger_$day"
    echo "dropped at: $(grep -E '^ +[0-9]+/' "$out" | tail -1)"
    wait "$bench"
    ;;
  load)
    open_load "$OUT/ledger-open-none.txt"
    ;;
  *)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac
