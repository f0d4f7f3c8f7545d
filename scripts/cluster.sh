#!/usr/bin/env bash
# A Relay cluster on one machine, to try it and to break it: three clustered RabbitMQ nodes (quorum queues), a
# Postgres primary with a synchronous streaming standby, two `relay api` and two `relay worker` replicas on one
# payload directory, and the fake upstream. Nothing of it touches the services of scripts/services.sh.
#
# Usage: scripts/cluster.sh up [--services-only] | down | status | env [K]   (K: the replica's first RabbitMQ node)
#        scripts/cluster.sh kill NAME | start NAME | stop NAME    NAME: rabbit1..3, pg-a, pg-b, api1, api2,
#                                                                       worker-a, worker-b, upstream
#        scripts/cluster.sh promote pg-X     make the standby pg-X the primary (after its primary died)
#        scripts/cluster.sh rejoin pg-X      rebuild pg-X as the synchronous standby of the current primary
#        scripts/cluster.sh leader [QUEUE]   the RabbitMQ node leading the item queue (or QUEUE)
# Everything lives under $RELAY_CLUSTER_DIR (default .cluster/, git-ignored); ports are free ones chosen at the
# first `up` and kept in .cluster/cluster.env. `down` keeps the data; `rm -rf .cluster` after it forgets it all.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
C="${RELAY_CLUSTER_DIR:-$ROOT/.cluster}"
PY="$ROOT/.venv/bin/python"
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
MQ_BIN=/usr/lib/rabbitmq/bin
QUEUE="${RELAY_QUEUE_NAME:-relay.batch_items}"
DB="${RELAY_CLUSTER_DB:-relay}"
RELAY_PROCS=(upstream api1 api2 worker-a worker-b)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# -- state: ports, node names and secrets, chosen once ---------------------------------------------------------
init_state() {
  [ -f "$C/cluster.env" ] && return 0
  mkdir -p "$C"
  local ports; read -r -a ports <<< "$("$PY" - <<'PY'
import socket
held = [socket.socket() for _ in range(16)]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
)"
  local id; id=$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
  cat > "$C/cluster.env" <<ENV
CLUSTER_ID=$id
MQ1_PORT=${ports[0]} MQ1_UI=${ports[1]} MQ1_DIST=${ports[2]}
MQ2_PORT=${ports[3]} MQ2_UI=${ports[4]} MQ2_DIST=${ports[5]}
MQ3_PORT=${ports[6]} MQ3_UI=${ports[7]} MQ3_DIST=${ports[8]}
PGA_PORT=${ports[9]} PGB_PORT=${ports[10]}
API1_PORT=${ports[11]} API2_PORT=${ports[12]} UPSTREAM_PORT=${ports[13]}
WORKER_A_METRICS=${ports[14]} WORKER_B_METRICS=${ports[15]}
ADMIN_TOKEN=admin-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
SECRET_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
METRICS_TOKEN=metrics-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
ENV
}
load_state() {
  [ -f "$C/cluster.env" ] || die "no cluster in $C (scripts/cluster.sh up)"
  # shellcheck disable=SC1091
  source "$C/cluster.env"
}
var() { local name=$1; printf '%s' "${!name}"; }  # var MQ2_PORT: the value of that state variable

# -- RabbitMQ: three nodes, one Erlang cookie, clustered with join_cluster ------------------------------------
mq_node() { printf 'relay-c%s-%s@localhost' "$CLUSTER_ID" "$1"; }
mq_env() {  # the environment of node N (server and CLI): the Debian wrappers would switch user and HOME
  local n=$1 d="$C/rabbit$1"
  export HOME="$C/rabbitmq-home" RABBITMQ_NODENAME; RABBITMQ_NODENAME=$(mq_node "$n")
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT; RABBITMQ_NODE_PORT=$(var "MQ${n}_PORT")
  export RABBITMQ_DIST_PORT; RABBITMQ_DIST_PORT=$(var "MQ${n}_DIST")
  export RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/rabbit.pid" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
    ERL_CRASH_DUMP="$d/erl_crash.dump" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}
ctl() { local n=$1; shift; (mq_env "$n"; "$MQ_BIN/rabbitmqctl" -n "$(mq_node "$n")" "$@"); }
mq_running() { ctl "$1" -q status >/dev/null 2>&1; }
mq_alive() { local pid; pid=$(cat "$C/rabbit$1/rabbit.pid" 2>/dev/null || true); [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

mq_configure() {
  local n=$1 d="$C/rabbit$1"
  mkdir -p "$d/log" "$d/mnesia" "$C/rabbitmq-home"; : > "$d/rabbitmq-env.conf"
  if [ ! -f "$C/rabbitmq-home/.erlang.cookie" ]; then  # one cookie for the three nodes and their CLI
    head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$C/rabbitmq-home/.erlang.cookie"
    chmod 400 "$C/rabbitmq-home/.erlang.cookie"
  fi
  cat > "$d/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$(var "MQ${n}_PORT")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(var "MQ${n}_UI")
loopback_users = none
cluster_partition_handling = pause_minority
CONF
  (mq_env "$n"; "$MQ_BIN/rabbitmq-plugins" enable --offline rabbitmq_management >/dev/null)
}

mq_start() {  # start node N in the background (wait with mq_wait)
  local n=$1
  mq_running "$n" && return 0
  mq_configure "$n"
  log "starting rabbit$n ($(mq_node "$n"), amqp 127.0.0.1:$(var "MQ${n}_PORT"))"
  (mq_env "$n"; setsid "$MQ_BIN/rabbitmq-server" > "$C/rabbit$n/stdout.log" 2>&1 < /dev/null &)
}
mq_wait() { ctl "$1" wait --timeout 180 "$C/rabbit$1/rabbit.pid" >/dev/null; }

mq_cluster() {  # nodes 2 and 3 join node 1 once (a restarted node finds its cluster by itself)
  local n
  for n in 2 3; do
    [ -f "$C/rabbit$n/joined" ] && continue
    { ctl "$n" stop_app && ctl "$n" join_cluster "$(mq_node 1)" && ctl "$n" start_app; } \
      >> "$C/rabbit$n/join.log" 2>&1 || die "rabbit$n could not join rabbit1 (see $C/rabbit$n/join.log)"
    touch "$C/rabbit$n/joined"
    log "rabbit$n joined the cluster of rabbit1"
  done
}

mq_stop() {  # also a node that paused itself (pause_minority: the last one standing) still answers `stop`
  mq_alive "$1" || return 0
  ctl "$1" stop >/dev/null 2>&1 || kill -TERM "$(cat "$C/rabbit$1/rabbit.pid")" 2>/dev/null || true
  for _ in $(seq 1 100); do mq_alive "$1" || break; sleep 0.2; done
  log "rabbit$1 stopped"
}
mq_kill() { local pid; pid=$(cat "$C/rabbit$1/rabbit.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null && log "rabbit$1 killed (pid $pid)" || true; }

mq_leader() {  # mq_leader [QUEUE]: the node (rabbitN) leading the item queue (or QUEUE)
  local n leader queue=${1:-$QUEUE}
  for n in 1 2 3; do
    mq_running "$n" || continue
    leader=$(ctl "$n" -q list_queues name leader --no-table-headers 2>/dev/null | awk -v q="$queue" '$1 == q {print $2}')
    [ -n "$leader" ] || die "no queue $queue yet (start a worker)"
    for m in 1 2 3; do [ "$leader" = "$(mq_node "$m")" ] && { echo "rabbit$m"; return 0; }; done
    die "queue $queue is led by unknown node $leader"
  done
  die "no RabbitMQ node is running"
}

# -- Postgres: a primary and a synchronous streaming standby ------------------------------------------------
pg_dir() { printf '%s/pg/%s' "$C" "$1"; }
pg() { runuser -u postgres -- "$PG_BIN/$1" "${@:2}"; }
pg_port() { [ "$1" = a ] && echo "$PGA_PORT" || echo "$PGB_PORT"; }
pg_running() { pg pg_ctl -D "$(pg_dir "$1")/data" status >/dev/null 2>&1; }
pg_primary() { cat "$C/pg/primary" 2>/dev/null || echo a; }
other() { [ "$1" = a ] && echo b || echo a; }

pg_node_conf() {  # pg_node_conf X primary|alone|standby: the settings that differ between the two nodes
  local x=$1 role=$2 f; f="$(pg_dir "$x")/data/node.conf"
  {
    echo "port = $(pg_port "$x")"
    echo "unix_socket_directories = '$(pg_dir "$x")'"
    echo "cluster_name = 'pg-$x'"
    if [ "$role" = primary ]; then
      echo "synchronous_standby_names = '*'  # a commit returns once the standby has it on disk"
    elif [ "$role" = alone ]; then
      echo "synchronous_standby_names = ''  # no standby yet: commits would wait for one forever"
    else
      echo "synchronous_standby_names = ''  # kept when promoted: alone, the new primary commits by itself"
      echo "primary_conninfo = 'host=127.0.0.1 port=$(pg_port "$(other "$x")") user=postgres application_name=pg-$x'"
    fi
  } > "$f"
  chown postgres:postgres "$f"
}

pg_init_primary() {
  local x=$1 d; d=$(pg_dir "$x")
  mkdir -p "$d"; chown postgres:postgres "$d"; chmod 700 "$d"
  [ -f "$d/data/PG_VERSION" ] && return 0
  log "initdb pg-$x"
  pg initdb -D "$d/data" -U postgres --auth=trust -E UTF8 >/dev/null
  cat >> "$d/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
max_connections = 300
shared_buffers = 128MB
wal_level = replica
max_wal_senders = 5
wal_keep_size = 512MB
hot_standby = on
synchronous_commit = on
fsync = on
# A client cut off inside a transaction would hold its row locks until TCP gives up on it (hours by default): the
# server ends such a session after 10 s (Relay's leader transactions, dispatcher and reaper, ask for 5 s themselves).
idle_in_transaction_session_timeout = '10s'
tcp_keepalives_idle = 5
tcp_keepalives_interval = 2
tcp_keepalives_count = 3
include = 'node.conf'
CONF
  pg_node_conf "$x" alone
  echo "$x" > "$C/pg/primary"
}

pg_start() {
  local x=$1 d; d=$(pg_dir "$x")
  pg_running "$x" && return 0
  log "starting pg-$x on 127.0.0.1:$(pg_port "$x")"
  pg pg_ctl -D "$d/data" -l "$d/postgres.log" -w -t 120 start >/dev/null
}
pg_stop() { pg_running "$1" && pg pg_ctl -D "$(pg_dir "$1")/data" -m fast -w stop >/dev/null && log "pg-$1 stopped" || true; }
pg_kill() {  # SIGKILL the postmaster and every backend at once, as a crash of the machine would
  local pid; pid=$(head -1 "$(pg_dir "$1")/data/postmaster.pid" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  # shellcheck disable=SC2046
  kill -KILL "$pid" $(ps -o pid= --ppid "$pid") 2>/dev/null || true
  log "pg-$1 killed (postmaster $pid and its children)"
}

pg_standby() {  # pg_standby X: rebuild X as a standby of the other node (the primary), wait until it is synchronous
  local x=$1 primary d; primary=$(other "$x"); d=$(pg_dir "$x")
  pg_running "$primary" || die "pg-$primary (the primary) is not running"
  pg_stop "$x"
  rm -rf "$d/data"; mkdir -p "$d"; chown postgres:postgres "$d"; chmod 700 "$d"
  log "pg-$x: base backup of pg-$primary"
  pg pg_basebackup -h 127.0.0.1 -p "$(pg_port "$primary")" -U postgres -D "$d/data" -X stream -c fast
  pg_node_conf "$x" standby
  runuser -u postgres -- touch "$d/data/standby.signal"
  pg_start "$x"
  pg_node_conf "$primary" primary
  psql_on "$primary" -c "SELECT pg_reload_conf()" >/dev/null
  pg_wait_sync "$primary"
}
psql_on() { "$PG_BIN/psql" -h 127.0.0.1 -p "$(pg_port "$1")" -U postgres -d postgres -tAX "${@:2}"; }
pg_wait_sync() {
  for _ in $(seq 1 300); do
    [ "$(psql_on "$1" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" = 1 ] && return 0
    sleep 0.2
  done
  die "no synchronous standby on pg-$1 after 60 s"
}

pg_promote() {
  local x=$1
  [ "$(pg_primary)" != "$x" ] || die "pg-$x is the primary already"
  pg pg_ctl -D "$(pg_dir "$x")/data" -w promote >/dev/null
  echo "$x" > "$C/pg/primary"
  log "pg-$x promoted: it is the primary, without a standby until 'rejoin pg-$(other "$x")'"
}

pg_up() {
  local primary; primary=$(pg_primary)
  mkdir -p "$C/pg"
  local p="$C"; while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
  pg_init_primary "$primary"
  pg_start "$primary"
  psql_on "$primary" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
    || psql_on "$primary" -c "CREATE DATABASE $DB" >/dev/null
  if [ -f "$(pg_dir "$(other "$primary")")/data/standby.signal" ]; then
    pg_start "$(other "$primary")"
    pg_wait_sync "$primary"
  else
    pg_standby "$(other "$primary")"
  fi
}

# -- Relay: configured as the README tells cluster users -----------------------------------------------------
amqp() { printf 'amqp://guest:guest@127.0.0.1:%s/%%2F' "$(var "MQ${1}_PORT")"; }
database_url() {
  printf 'postgresql://postgres@127.0.0.1:%s,127.0.0.1:%s/%s?target_session_attrs=read-write&connect_timeout=3' \
    "$PGA_PORT" "$PGB_PORT" "$DB"
}
relay_env() {  # relay_env K: the RELAY_* variables of a replica whose broker list starts at node K
  local k=$1 a b
  a=$(( k % 3 + 1 )); b=$(( (k + 1) % 3 + 1 ))
  echo "export RELAY_DATABASE_URL='$(database_url)'"
  echo "export RELAY_BROKER_URL='$(amqp "$k")' RELAY_BROKER_FAILOVER_URLS='$(amqp "$a"),$(amqp "$b")'"
  echo "export RELAY_QUEUE_TYPE=quorum RELAY_QUEUE_NAME=$QUEUE RELAY_BATCH_PAYLOAD_DIR='$C/payloads'"
  echo "export RELAY_ADMIN_TOKEN=$ADMIN_TOKEN RELAY_SECRET_KEY=$SECRET_KEY RELAY_METRICS_TOKEN=$METRICS_TOKEN"
  echo "export RELAY_FAKE_UPSTREAM_URL=http://127.0.0.1:$UPSTREAM_PORT RELAY_BROKER_UI_URL=http://127.0.0.1:$MQ1_UI/"
}

running() { [ -f "$C/run/$1.pid" ] && kill -0 "$(cat "$C/run/$1.pid")" 2>/dev/null; }
relay_start() {  # relay_start NAME: one of RELAY_PROCS, in its own session, logging to .cluster/run/NAME.log
  local name=$1 k=1 relay="$ROOT/.venv/bin/relay" args
  running "$name" && return 0
  case $name in
    upstream) args=("$ROOT/.venv/bin/python" -m devtools.fake_upstream --host 127.0.0.1 --port "$UPSTREAM_PORT") ;;
    api1) args=("$relay" api --bind "127.0.0.1:$API1_PORT") ;;
    api2) k=2; args=("$relay" api --bind "127.0.0.1:$API2_PORT") ;;
    worker-a) k=2; args=("$relay" worker -p 1 -t 16) ;;
    worker-b) k=3; args=("$relay" worker -p 1 -t 16) ;;
    *) die "unknown process $name" ;;
  esac
  mkdir -p "$C/run" "$C/payloads"
  (
    eval "$(relay_env "$k")"
    [ "$name" = worker-a ] && export RELAY_WORKER_METRICS_PORT=$WORKER_A_METRICS
    [ "$name" = worker-b ] && export RELAY_WORKER_METRICS_PORT=$WORKER_B_METRICS
    cd "$ROOT"; setsid "${args[@]}" > "$C/run/$name.log" 2>&1 < /dev/null &
    echo $! > "$C/run/$name.pid"
  )
  log "$name started (pid $(cat "$C/run/$name.pid"), log $C/run/$name.log)"
}
relay_stop() {  # SIGTERM to the main process only (Dramatiq forwards it once), then the whole group
  local name=$1 pid sig=${2:-TERM}
  running "$name" || { rm -f "$C/run/$name.pid"; return 0; }
  pid=$(cat "$C/run/$name.pid")
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$C/run/$name.pid"
  log "$name stopped"
}
wait_http() { for _ in $(seq 1 $(( $2 * 5 ))); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.2; done
  die "timed out waiting for $1"; }

relay_up() {
  eval "$(relay_env 1)"
  "$ROOT/.venv/bin/relay" migrate >/dev/null
  relay_start upstream
  wait_http "http://127.0.0.1:$UPSTREAM_PORT/_control/stats" 30
  (cd "$ROOT"; "$ROOT/.venv/bin/relay" apply app/demo/catalog.yaml >/dev/null)
  if [ ! -s "$C/demo-key" ]; then
    "$ROOT/.venv/bin/relay" keys create --user demo --policy default --name demo \
      | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["key"])' > "$C/demo-key"
  fi
  local name; for name in api1 api2 worker-a worker-b; do relay_start "$name"; done
  wait_http "http://127.0.0.1:$API1_PORT/readyz" 90
  wait_http "http://127.0.0.1:$API2_PORT/readyz" 90
}

# -- commands ------------------------------------------------------------------------------------------------
up() {
  [ -x "$PY" ] || die "no .venv (run scripts/bootstrap.sh)"
  [ -n "$PG_BIN" ] && [ -x "$MQ_BIN/rabbitmq-server" ] || die "PostgreSQL and rabbitmq-server are needed (scripts/services.sh up installs them)"
  init_state; load_state
  local n; for n in 1 2 3; do mq_start "$n"; done
  pg_up
  for n in 1 2 3; do mq_wait "$n"; done
  mq_cluster
  if [ "${1:-}" != "--services-only" ]; then relay_up; fi
  info "${1:-}"
}

info() {
  eval "$(relay_env 1)"
  cat <<INFO

The cluster is up ($C).
  RabbitMQ:  rabbit1 127.0.0.1:$MQ1_PORT (UI http://127.0.0.1:$MQ1_UI, guest/guest), rabbit2 :$MQ2_PORT (UI :$MQ2_UI), rabbit3 :$MQ3_PORT (UI :$MQ3_UI)
  Postgres:  pg-$(pg_primary) primary, pg-$(other "$(pg_primary)") synchronous standby: $RELAY_DATABASE_URL
INFO
  [ "$1" = "--services-only" ] && { echo "  Relay settings: scripts/cluster.sh env"; return 0; }
  cat <<INFO
  API:       http://127.0.0.1:$API1_PORT (api1) and http://127.0.0.1:$API2_PORT (api2); console at /console/
  workers:   worker-a, worker-b (metrics http://127.0.0.1:$WORKER_A_METRICS/metrics, :$WORKER_B_METRICS/metrics)
  demo key:  $(cat "$C/demo-key")      admin token: $ADMIN_TOKEN
  logs:      $C/run/*.log

  eval "\$(scripts/cluster.sh env)"; relay batches submit requests.jsonl --shape openai --wait
  scripts/cluster.sh kill \$(scripts/cluster.sh leader); scripts/cluster.sh start rabbitN   # a node dies and returns
  scripts/cluster.sh kill pg-$(pg_primary); scripts/cluster.sh promote pg-$(other "$(pg_primary)"); scripts/cluster.sh rejoin pg-$(pg_primary)
  scripts/cluster.sh down
INFO
}

down() {
  [ -f "$C/cluster.env" ] || { log "no cluster in $C"; return 0; }
  load_state
  local name n; for name in worker-a worker-b api1 api2 upstream; do relay_stop "$name"; done
  for n in 1 2 3; do mq_stop "$n" & done; wait
  pg_stop "$(other "$(pg_primary)")"; pg_stop "$(pg_primary)"
}

status() {
  load_state
  local n x name
  for n in 1 2 3; do
    if mq_running "$n"; then log "rabbit$n: up"; elif mq_alive "$n"; then log "rabbit$n: paused or booting";
    else log "rabbit$n: down"; fi
  done
  for x in a b; do
    if ! pg_running "$x"; then log "pg-$x: down"; continue; fi
    if [ "$(psql_on "$x" -c 'SELECT pg_is_in_recovery()')" = f ]; then
      log "pg-$x: primary, standbys: $(psql_on "$x" -c "SELECT coalesce(string_agg(application_name || ' ' || sync_state, ', '), 'none') FROM pg_stat_replication")"
    else log "pg-$x: standby"; fi
  done
  for name in "${RELAY_PROCS[@]}"; do if running "$name"; then log "$name: up"; else log "$name: down"; fi; done
}

node_cmd() {  # node_cmd kill|start|stop NAME
  local verb=$1 name=${2:-}
  load_state
  case $name in
    rabbit[123]) n=${name#rabbit}
      case $verb in kill) mq_kill "$n" ;; stop) mq_stop "$n" ;; start) mq_start "$n"; mq_wait "$n" ;; esac ;;
    pg-a|pg-b) x=${name#pg-}
      case $verb in kill) pg_kill "$x" ;; stop) pg_stop "$x" ;; start) pg_start "$x" ;; esac ;;
    upstream|api1|api2|worker-a|worker-b)
      case $verb in kill) relay_stop "$name" KILL ;; stop) relay_stop "$name" ;; start) relay_start "$name" ;; esac ;;
    *) die "unknown NAME '$name' (rabbit1..3, pg-a, pg-b, api1, api2, worker-a, worker-b, upstream)" ;;
  esac
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) down ;;
  status) status ;;
  env) load_state; relay_env "${2:-1}"; echo "export RELAY_URL=http://127.0.0.1:$API1_PORT RELAY_KEY=$(cat "$C/demo-key" 2>/dev/null)"
       echo "export PATH=\"$ROOT/.venv/bin:\$PATH\"" ;;
  kill|start|stop) node_cmd "$1" "${2:-}" ;;
  promote) load_state; pg_promote "${2#pg-}" ;;
  rejoin) load_state; pg_standby "${2#pg-}" ;;
  leader) load_state; mq_leader "${2:-}" ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
