#!/usr/bin/env bash
# A Relay cluster on one machine, to try it and to break it: three clustered RabbitMQ nodes (quorum queues),
# Postgres under pg_auto_failover (a monitor and three data nodes: a primary and two synchronous secondaries), two
# `relay api` and two `relay worker` replicas on one payload directory, and the fake upstream. Nothing of it touches the services of scripts/services.sh.
#
# Usage: scripts/cluster.sh up [--services-only] | down [--kill] | status | env [K]   (K: the replica's first RabbitMQ
#        node; down --kill: every process killed at once, for a cluster about to be removed)
#        scripts/cluster.sh kill NAME | start NAME | stop NAME    NAME: rabbit1..3, pg-a, pg-b, pg-c, pg-monitor,
#                                                                       api1, api2, worker-a, worker-b, upstream
#        scripts/cluster.sh crash pg-X       SIGKILL Postgres of pg-X alone (its keeper lives and restarts it)
#        scripts/cluster.sh primary          the Postgres node taking writes (pg-a, pg-b or pg-c)
#        scripts/cluster.sh leader [QUEUE]   the RabbitMQ node leading the item queue (or QUEUE)
# Everything lives under $RELAY_CLUSTER_DIR (default .cluster/, git-ignored); ports are claimed at the first `up`
# below the ephemeral range (devtools/cluster/ports.py) and kept in .cluster/cluster.env. `down` keeps the data; `rm -rf .cluster` after it forgets it all.
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
  local ports; read -r -a ports <<< "$(cd "$ROOT" && "$PY" -m devtools.cluster.ports 18 "$C")"
  local id; id=$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
  cat > "$C/cluster.env" <<ENV
CLUSTER_ID=$id
MQ1_PORT=${ports[0]} MQ1_UI=${ports[1]} MQ1_DIST=${ports[2]}
MQ2_PORT=${ports[3]} MQ2_UI=${ports[4]} MQ2_DIST=${ports[5]}
MQ3_PORT=${ports[6]} MQ3_UI=${ports[7]} MQ3_DIST=${ports[8]}
PGA_PORT=${ports[9]} PGB_PORT=${ports[10]} PGC_PORT=${ports[16]} PGMONITOR_PORT=${ports[17]}
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
mq_alive() { live "$(cat "$C/rabbit$1/rabbit.pid" 2>/dev/null || true)"; }  # live: scripts/cluster-postgres.sh

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
  # What `rabbitmq-plugins enable --offline rabbitmq_management` writes, without its Erlang VM (about 12 s a node
  # on a loaded machine, one node after the other)
  printf '[rabbitmq_management].\n' > "$d/enabled_plugins"
}

mq_start() {  # start node N in the background (wait with mq_wait)
  local n=$1
  mq_alive "$n" && return 0  # its process lives (up, booting or paused): not `mq_running`, an Erlang VM of its own
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

# -- Postgres under pg_auto_failover: scripts/cluster-postgres.sh -------------------------------------------
# shellcheck source=scripts/cluster-postgres.sh
source "$ROOT/scripts/cluster-postgres.sh"

# -- Relay: configured as the README tells cluster users -----------------------------------------------------
amqp() { printf 'amqp://guest:guest@127.0.0.1:%s/%%2F' "$(var "MQ${1}_PORT")"; }
database_url() {
  printf 'postgresql://postgres@127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s/%s?target_session_attrs=read-write&connect_timeout=3' \
    "$PGA_PORT" "$PGB_PORT" "$PGC_PORT" "$DB"
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
  Postgres:  pg-a, pg-b, pg-c under pg_auto_failover (monitor 127.0.0.1:$PGMONITOR_PORT), primary pg-$(pg_primary): $RELAY_DATABASE_URL
INFO
  [ "$1" = "--services-only" ] && { echo "  Relay settings: scripts/cluster.sh env"; return 0; }
  cat <<INFO
  API:       http://127.0.0.1:$API1_PORT (api1) and http://127.0.0.1:$API2_PORT (api2); console at /console/
  workers:   worker-a, worker-b (metrics http://127.0.0.1:$WORKER_A_METRICS/metrics, :$WORKER_B_METRICS/metrics)
  demo key:  $(cat "$C/demo-key")      admin token: $ADMIN_TOKEN
  logs:      $C/run/*.log

  eval "\$(scripts/cluster.sh env)"; relay batches submit requests.jsonl --shape openai --wait
  scripts/cluster.sh kill \$(scripts/cluster.sh leader); scripts/cluster.sh start rabbitN   # a node dies and returns
  scripts/cluster.sh kill pg-$(pg_primary); scripts/cluster.sh start pg-$(pg_primary)   # the monitor fails over, then the old primary rejoins as a secondary
  scripts/cluster.sh down
INFO
}

down() {  # down [--kill]
  [ -f "$C/cluster.env" ] || { log "no cluster in $C"; return 0; }
  load_state
  local name n x
  if [ "${1:-}" = --kill ]; then  # nothing to keep: no graceful stop to wait for (25 s on a loaded machine)
    for name in worker-a worker-b api1 api2 upstream; do relay_stop "$name" KILL; done
    for n in 1 2 3; do mq_kill "$n"; done
    for x in "${PG_NODES[@]}" monitor; do pg_halt "$x"; done
    return 0
  fi
  for name in worker-a worker-b api1 api2 upstream; do relay_stop "$name"; done
  for n in 1 2 3; do mq_stop "$n" & done; wait
  pg_down
}

status() {
  load_state
  local n name
  for n in 1 2 3; do
    if mq_running "$n"; then log "rabbit$n: up"; elif mq_alive "$n"; then log "rabbit$n: paused or booting";
    else log "rabbit$n: down"; fi
  done
  pg_status
  for name in "${RELAY_PROCS[@]}"; do if running "$name"; then log "$name: up"; else log "$name: down"; fi; done
}

node_cmd() {  # node_cmd kill|start|stop NAME
  local verb=$1 name=${2:-}
  load_state
  case $name in
    rabbit[123]) n=${name#rabbit}
      case $verb in kill) mq_kill "$n" ;; stop) mq_stop "$n" ;; start) mq_start "$n"; mq_wait "$n" ;; esac ;;
    pg-a|pg-b|pg-c|pg-monitor) x=${name#pg-}
      case $verb in kill) pg_kill "$x" ;; stop) pg_stop "$x" ;; start) pg_start "$x" ;; esac ;;
    upstream|api1|api2|worker-a|worker-b)
      case $verb in kill) relay_stop "$name" KILL ;; stop) relay_stop "$name" ;; start) relay_start "$name" ;; esac ;;
    *) die "unknown NAME '$name' (rabbit1..3, pg-a, pg-b, pg-c, pg-monitor, api1, api2, worker-a, worker-b, upstream)" ;;
  esac
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) down "${2:-}" ;;
  status) status ;;
  env) load_state; relay_env "${2:-1}"; echo "export RELAY_URL=http://127.0.0.1:$API1_PORT RELAY_KEY=$(cat "$C/demo-key" 2>/dev/null)"
       echo "export PATH=\"$ROOT/.venv/bin:\$PATH\"" ;;
  kill|start|stop) node_cmd "$1" "${2:-}" ;;
  crash) load_state; pg_crash "${2#pg-}" ;;
  primary) load_state; p=$(pg_primary); [ -n "$p" ] || die "no primary"; echo "pg-$p" ;;
  leader) load_state; mq_leader "${2:-}" ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
