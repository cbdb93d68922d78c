#!/usr/bin/env bash
# Makes what deploy/compose.yaml reads from deploy/keys/ (ignored by git, left out of the build
# context), keeping whatever is already there:
#   AuthKey.p8               a throw-away APNs provider key for the mock (key ID DEMOKEY001)
#   postgres.env             POSTGRES_PASSWORD, random, for the postgres service
#   herald.env               HERALD_POSTGRES_URL with that password, for herald and herald-migrate
#   grafana-admin-password   Grafana's admin password, random (user admin)
# The containers run as other users (Herald and the mock as uid 10001, Grafana as 472), so the
# files are readable by all: this is a laptop's demo setup, never production's secrets.
set -euo pipefail
KEYS="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/deploy/keys"
mkdir -p "$KEYS"
if [[ ! -s "$KEYS/AuthKey.p8" ]]; then
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$KEYS/AuthKey.p8"
fi
if [[ ! -s "$KEYS/postgres.env" || ! -s "$KEYS/herald.env" ]]; then
  password="$(openssl rand -hex 16)"
  printf 'POSTGRES_PASSWORD=%s\n' "$password" >"$KEYS/postgres.env"
  printf 'HERALD_POSTGRES_URL=postgres://herald:%s@postgres:5432/herald?sslmode=disable\n' "$password" >"$KEYS/herald.env"
fi
if [[ ! -s "$KEYS/grafana-admin-password" ]]; then
  openssl rand -hex 16 >"$KEYS/grafana-admin-password"
fi
chmod 644 "$KEYS/AuthKey.p8" "$KEYS/postgres.env" "$KEYS/herald.env" "$KEYS/grafana-admin-password"
