#!/usr/bin/env bash
# Project-local Postgres and RabbitMQ for development and tests, without Docker or systemd.
# Usage: scripts/services.sh up|down|status|env
# Data lives under .services/ (git-ignored); ports never collide with system services.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S="${RELAY_SERVICES_DIR:-$ROOT/.services}"
PG_PORT="${RELAY_PG_PORT:-54329}"
MQ_PORT="${RELAY_MQ_PORT:-5699}"
MQ_UI_PORT="${RELAY_MQ_UI_PORT:-15699}"
MQ_DIST_PORT="${RELAY_MQ_DIST_PORT:-25699}"
MQ_NODE="relay-${MQ_PORT}@localhost"
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
MQ_BIN=/usr/lib/rabbitmq/bin

log() { printf '[services] %s\n' "$*" >&2; }

install_missing() {
  local need=()
  [ -x "$MQ_BIN/rabbitmq-server" ] || need+=(rabbitmq-server)
  [ -n "$PG_BIN" ] && [ -x "$PG_BIN/initdb" ] || need+=(postgresql)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
}

mq_env() {
  export HOME="$S/rabbitmq" RABBITMQ_NODENAME="$MQ_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$MQ_PORT" RABBITMQ_DIST_PORT="$MQ_DIST_PORT" \
    RABBITMQ_MNESIA_BASE="$S/rabbitmq/mnesia" RABBITMQ_LOG_BASE="$S/rabbitmq/log" \
    RABBITMQ_PID_FILE="$S/rabbitmq/rabbit.pid" RABBITMQ_ENABLED_PLUGINS_FILE="$S/rabbitmq/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$S/rabbitmq/rabbitmq" RABBITMQ_CONF_ENV_FILE="$S/rabbitmq/rabbitmq-env.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$S/rabbitmq/advanced.config" ERL_CRASH_DUMP="$S/rabbitmq/erl_crash.dump" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

pg_up() {
  local d="$S/postgres"
  if runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$d/data" status >/dev/null 2>&1; then return 0; fi
  mkdir -p "$d"; chown postgres:postgres "$d"; chmod 700 "$d"
  # postgres must be able to reach its data dir through every parent.
  local p="$d"; while [ "$p" != "/" ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
  if [ ! -f "$d/data/PG_VERSION" ]; then
    log "initdb $d/data"
    runuser -u postgres -- "$PG_BIN/initdb" -D "$d/data" -U postgres --auth=trust -E UTF8 >/dev/null
    # 1000 connections: two full test runs at once (each xdist worker's processes have pools) took more than 400
    cat >> "$d/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$d'
max_connections = 1000
shared_buffers = 256MB
fsync = on
synchronous_commit = on
CONF
  fi
  log "starting postgres on 127.0.0.1:$PG_PORT"
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$d/data" -l "$d/postgres.log" -w -t 60 start >/dev/null
  "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "select 1 from pg_database where datname='relay'" | grep -q 1 \
    || "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres relay
}

mq_running() { mq_env; "$MQ_BIN/rabbitmqctl" -n "$MQ_NODE" -q status >/dev/null 2>&1; }

mq_up() {
  if mq_running; then return 0; fi
  local d="$S/rabbitmq"; mkdir -p "$d/log" "$d/mnesia"; : > "$d/rabbitmq-env.conf"
  cat > "$d/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$MQ_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MQ_UI_PORT
loopback_users = none
CONF
  mq_env
  # What `rabbitmq-plugins enable --offline rabbitmq_management` writes, without starting its Erlang VM (about 12 s
  # on a loaded machine, paid again by every restart of the fault tests' private node)
  printf '[rabbitmq_management].\n' > "$S/rabbitmq/enabled_plugins"
  log "starting rabbitmq on 127.0.0.1:$MQ_PORT (management UI http://127.0.0.1:$MQ_UI_PORT)"
  setsid "$MQ_BIN/rabbitmq-server" > "$d/stdout.log" 2>&1 < /dev/null &
  "$MQ_BIN/rabbitmqctl" -n "$MQ_NODE" wait --timeout 120 "$d/rabbit.pid" >/dev/null
}

pg_down() {
  [ -n "$PG_BIN" ] || return 0
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$S/postgres/data" -m fast -w stop >/dev/null 2>&1 && log "postgres stopped" || true
}
mq_down() {
  if mq_running; then "$MQ_BIN/rabbitmqctl" -n "$MQ_NODE" stop >/dev/null 2>&1 && log "rabbitmq stopped"; fi
}

print_env() {
  echo "export RELAY_DATABASE_URL=postgresql://postgres@127.0.0.1:$PG_PORT/relay"
  echo "export RELAY_BROKER_URL=amqp://guest:guest@127.0.0.1:$MQ_PORT/%2F"
  echo "export RELAY_PG_CTL='runuser -u postgres -- $PG_BIN/pg_ctl -D $S/postgres/data'"
  echo "export RELAY_MQ_NODE=$MQ_NODE"
}

case "${1:-up}" in
  up) install_missing; pg_up; mq_up; log "postgres and rabbitmq are up"; print_env ;;
  down) mq_down; pg_down ;;
  status) if mq_running; then log "rabbitmq: up"; else log "rabbitmq: down"; fi
          if runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$S/postgres/data" status >/dev/null 2>&1; then log "postgres: up"; else log "postgres: down"; fi ;;
  env) print_env ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
