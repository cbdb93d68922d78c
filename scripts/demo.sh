#!/usr/bin/env bash
# The Herald demo on embedded local services: starts PostgreSQL and the Tansu broker
# (scripts/services.sh), creates the topics, starts the mock APNs, FCM and push service (HTTP/2 +
# TLS) and Herald,
# registers sample devices, publishes sample events and prints a summary of the results.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PATH="/opt/swift/usr/bin:$PATH"
RUN="$ROOT/.local/demo"
mkdir -p "$RUN"

scripts/services.sh start
# shellcheck disable=SC1091
source .local/run/services.env

echo "demo: building (the first build takes several minutes)"
swift build --product herald >"$RUN/build.log" 2>&1 || { tail -40 "$RUN/build.log"; exit 1; }
swift build --product mock-apns >>"$RUN/build.log" 2>&1 || { tail -40 "$RUN/build.log"; exit 1; }
swift build --product mock-fcm >>"$RUN/build.log" 2>&1 || { tail -40 "$RUN/build.log"; exit 1; }
swift build --product mock-webpush >>"$RUN/build.log" 2>&1 || { tail -40 "$RUN/build.log"; exit 1; }
swift build --product herald-demo >>"$RUN/build.log" 2>&1 || { tail -40 "$RUN/build.log"; exit 1; }
BIN="$(swift build --show-bin-path)"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  scripts/services.sh stop >/dev/null
}
trap cleanup EXIT

for topic in push.requests push.requests.bulk push.tokens push.results push.unregistered push.dlq push.channels push.channel-results; do
  "$HERALD_TANSU_BIN" topic create "$topic" --broker "$HERALD_TANSU_URL" --partitions 3 >/dev/null
done

KEY_ID=DEMOKEY001
TEAM_ID=DEMOTEAM01
"$BIN/herald-demo" make-key "$RUN/AuthKey.p8"
UNREGISTERED_TOKEN=$(printf 'b0%.0s' {1..32})
NOW_MS=$(($(date +%s) * 1000))
rm -f "$RUN/mock.port"
"$BIN/mock-apns" --port 0 --port-file "$RUN/mock.port" --ca-out "$RUN/mock-ca.pem" \
  --provider-key "$KEY_ID=$RUN/AuthKey.p8" --team-id "$TEAM_ID" \
  --unregistered "$UNREGISTERED_TOKEN:$NOW_MS" >"$RUN/mock-apns.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$RUN/mock.port" ]] && break; sleep 0.1; done
MOCK_PORT=$(cat "$RUN/mock.port")
echo "demo: mock APNs on https://127.0.0.1:$MOCK_PORT"
# The mock FCM writes the service-account key file Herald signs its token requests with.
rm -f "$RUN/mock-fcm.port" "$RUN/fcm-service-account.json"
"$BIN/mock-fcm" --port 0 --port-file "$RUN/mock-fcm.port" --ca-out "$RUN/mock-fcm-ca.pem" \
  --write-service-account "demo-project=$RUN/fcm-service-account.json" >"$RUN/mock-fcm.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$RUN/mock-fcm.port" && -s "$RUN/fcm-service-account.json" ]] && break; sleep 0.1; done
FCM_PORT=$(cat "$RUN/mock-fcm.port")
echo "demo: mock FCM on https://127.0.0.1:$FCM_PORT"
# The mock push service: two origins (as Chrome's and Safari's are two), a VAPID key for the web app.
rm -f "$RUN/mock-webpush.origins"
"$BIN/herald-demo" make-key "$RUN/vapid.pem"
"$BIN/mock-webpush" --port 0 --port 0 --ca-out "$RUN/mock-webpush-ca.pem" --origins-file "$RUN/mock-webpush.origins" \
  >"$RUN/mock-webpush.out" 2>"$RUN/mock-webpush.log" &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$RUN/mock-webpush.origins" ]] && break; sleep 0.1; done
PUSH_SERVICE=$(head -1 "$RUN/mock-webpush.origins")
echo "demo: mock push service on $PUSH_SERVICE"

HERALD_POSTGRES_URL="$HERALD_POSTGRES_URL" \
HERALD_KAFKA_BROKERS="$HERALD_KAFKA_BROKERS" \
HERALD_KAFKA_SESSION_TIMEOUT_MS=6000 \
HERALD_APNS_KEY_PATH="$RUN/AuthKey.p8" HERALD_APNS_KEY_ID=$KEY_ID HERALD_APNS_TEAM_ID=$TEAM_ID \
HERALD_APNS_PRODUCTION_URL="https://127.0.0.1:$MOCK_PORT" \
HERALD_APNS_SANDBOX_URL="https://127.0.0.1:$MOCK_PORT" \
HERALD_APNS_CHANNELS_PRODUCTION_URL="https://127.0.0.1:$MOCK_PORT" \
HERALD_APNS_CHANNELS_SANDBOX_URL="https://127.0.0.1:$MOCK_PORT" \
HERALD_APNS_CA_PATH="$RUN/mock-ca.pem" \
HERALD_FCM_URL="https://127.0.0.1:$FCM_PORT" HERALD_FCM_CA_PATH="$RUN/mock-fcm-ca.pem" \
HERALD_FCM_SERVICE_ACCOUNT_PATH="$RUN/fcm-service-account.json" \
HERALD_WEBPUSH_VAPID_KEY_PATH="$RUN/vapid.pem" HERALD_WEBPUSH_SUBJECT="mailto:demo@example.com" \
HERALD_WEBPUSH_ALLOWED_HOSTS=127.0.0.1 HERALD_WEBPUSH_CA_PATH="$RUN/mock-webpush-ca.pem" \
HERALD_HTTP_PORT=0 HERALD_MIGRATE_ON_START=true HERALD_LOG_FORMAT=text \
  "$BIN/herald" run >"$RUN/herald.log" 2>&1 &
PIDS+=($!)
echo "demo: herald running (log: $RUN/herald.log)"

"$BIN/herald-demo" publish --brokers "$HERALD_KAFKA_BROKERS" --unregistered-token "$UNREGISTERED_TOKEN" --events 20 \
  --push-service "$PUSH_SERVICE" --push-service-ca "$RUN/mock-webpush-ca.pem"
