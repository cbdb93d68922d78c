#!/usr/bin/env bash
# The PostgreSQL stand-in's process (postgres.Dockerfile): a cluster made on first start with
# the official image's variables (password logins over TCP, trust on the container's own socket),
# then the server in the foreground, listening on every address.
set -euo pipefail
BIN=/usr/lib/postgresql/15/bin
DATA=/var/lib/postgresql/data
if [[ ! -s "$DATA/PG_VERSION" ]]; then
  install -d -o postgres -g postgres "$DATA"
  printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
  chown postgres /tmp/pwfile
  su postgres -c "$BIN/initdb -D $DATA -U $POSTGRES_USER --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8" >/dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >>"$DATA/pg_hba.conf"
  su postgres -c "$BIN/postgres -D $DATA -c listen_addresses='' -k /tmp" &
  until su postgres -c "$BIN/pg_isready -q -h /tmp -U $POSTGRES_USER -d postgres"; do sleep 0.2; done
  su postgres -c "psql -h /tmp -U $POSTGRES_USER -d postgres -q -c 'CREATE DATABASE $POSTGRES_DB'"
  su postgres -c "$BIN/pg_ctl -D $DATA stop -m fast" >/dev/null
fi
exec su postgres -c "exec $BIN/postgres -D $DATA -c listen_addresses='*' -k /tmp"
