# Sourced by scripts/cluster.sh: Postgres under pg_auto_failover, a monitor and three data nodes (pg-a, pg-b, pg-c),
# everything on 127.0.0.1 and run as the postgres user. A commit waits for either secondary
# (synchronous_standby_names 'ANY 1 (...)' with the formation's number_sync_standbys at 0), so one secondary's
# loss stalls no write, and with both gone the monitor makes the primary wait_primary (synchronous replication off:
# degrade, never freeze; number_sync_standbys 1 would block every commit until one returns). The monitor promotes the
# most advanced secondary when the primary dies and makes a returning former primary a secondary (rewound), so no
# human step and never two primaries. Each `pg_autoctl run` (the keeper and its Postgres) is a process group of its
# own, whose leader's pid is kept in $C/pg/NAME.pid.
# Needs: load_state (cluster.env), log, die, var, $C, $ROOT, $PG_BIN, $DB.

PG_NODES=(a b c)
# The monitor's timeouts (ms): a dead node is found by one refused health check a second and is unhealthy once it
# has not reported for 2 s (its keeper reports every second); the promoted secondary takes writes once
# primary_demote_timeout has run, which must outlast the keepers' network_partition_timeout (a primary cut off from
# the monitor and its secondaries stops its own Postgres after that long). Measured in docs/cluster.md.
PGAF_MONITOR_SETTINGS=(health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1
  health_check_retry_delay=500 node_considered_unhealthy_timeout=2000 primary_demote_timeout=5000)
PGAF_NETWORK_PARTITION_S=3

ha_install() {  # Debian's pg_auto_failover for the installed PostgreSQL (pg_autoctl and the monitor's extension)
  local package; package="postgresql-$(basename "$(dirname "$PG_BIN")")-auto-failover"
  command -v pg_autoctl >/dev/null && [ -f "$(dirname "$PG_BIN")/lib/pgautofailover.so" ] && return 0
  log "installing $package (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "$package" >/dev/null
}

live() {  # live PID: the process runs (a killed one nobody has reaped yet is a zombie, not alive)
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

pg_dir() { printf '%s/pg/%s' "$C" "$1"; }  # a node's PGDATA: monitor, a, b or c
pg_port() { var "PG$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')_PORT"; }
pg_pid() { cat "$C/pg/$1.pid" 2>/dev/null || true; }
pg_alive() { live "$(pg_pid "$1")"; }
as_postgres() {  # as_postgres CMD...: as the postgres user, with pg_autoctl's files under $C/pg/xdg
  local x="$C/pg/xdg"
  (cd "$C/pg" && setpriv --reuid=postgres --regid=postgres --init-groups -- env XDG_CONFIG_HOME="$x/config" \
    XDG_DATA_HOME="$x/share" XDG_RUNTIME_DIR="$x/run" "$@")
}
autoctl() { as_postgres pg_autoctl "$@"; }
monitor_url() { printf 'postgres://autoctl_node@127.0.0.1:%s/pg_auto_failover?sslmode=disable' "$PGMONITOR_PORT"; }
label() { if [ "$1" = monitor ]; then echo pg-monitor; else echo "pg-$1"; fi; }
psql_on() { "$PG_BIN/psql" -h 127.0.0.1 -p "$(pg_port "$1")" -U postgres -d "${PSQL_DB:-postgres}" -tAX "${@:2}"; }
monitor_sql() { PSQL_DB=pg_auto_failover psql_on monitor -c "$1"; }

node_args() {  # what `pg_autoctl create` needs of node NAME: loopback only, trust, no TLS, Debian's pg_ctl
  printf '%s\n' --pgdata "$(pg_dir "$1")" --pgport "$(pg_port "$1")" --hostname 127.0.0.1 --listen 127.0.0.1 \
    --auth trust --no-ssl --pgctl "$PG_BIN/pg_ctl"
}

pg_settings() {  # appended to a data node's postgresql.conf at its creation, after pg_autoctl's own include (a
  # secondary copies the primary's, block included)
  cat <<CONF
# relay: scripts/cluster-postgres.sh
max_connections = 300
wal_sender_timeout = 5s          # a secondary that stops answering is dropped in 5 s, not 60
wal_receiver_timeout = 5s
# A client cut off inside a transaction would hold its row locks until TCP gives up (hours by default).
idle_in_transaction_session_timeout = 10s
tcp_keepalives_idle = 5
tcp_keepalives_interval = 2
tcp_keepalives_count = 3
CONF
}

log_tail() { log "the end of $C/pg/$1.log:"; tail -n 25 "$C/pg/$1.log" | sed 's/^/    /' >&2; }

create_tries() {  # create_tries NAME CMD...: run `pg_autoctl create` for NAME up to 3 times. What it prints goes to
  # NAME's log; after a failure the log's end goes to stderr too, since a test removes the cluster's folder. A create
  # can stop partway (it gives up after 5 failed calls in a row to the monitor or the primary) and then says to run
  # the same create again: it goes on from where it stopped (tried killed at registration, base backup and start).
  local name=$1 try; shift
  for try in 1 2 3; do
    "$@" >> "$C/pg/$name.log" 2>&1 && return 0
    log "$(label "$name")'s create failed (try $try of 3)"; log_tail "$name"
    sleep 2
  done
  die "$(label "$name")'s create failed 3 times (see $C/pg/$name.log)"
}

pg_create() {  # pg_create NAME: initialise node NAME once (the monitor, or a data node registered with it)
  local name=$1 args
  [ -f "$(pg_dir "$name")/PG_VERSION" ] && return 0
  mapfile -t args < <(node_args "$name")
  if [ "$name" = monitor ]; then
    create_tries monitor autoctl create monitor "${args[@]}"
    return 0
  fi
  [ "$name" = a ] || psql_on "$(pg_primary)" -c CHECKPOINT >/dev/null  # a base backup waits for a checkpoint
  create_tries "$name" autoctl create postgres "${args[@]}" --name "pg-$name" --dbname "$DB" --monitor "$(monitor_url)"
  autoctl config set --pgdata "$(pg_dir "$name")" timeout.network_partition_timeout "$PGAF_NETWORK_PARTITION_S" >/dev/null
  grep -q '^# relay:' "$(pg_dir "$name")/postgresql.conf" || pg_settings >> "$(pg_dir "$name")/postgresql.conf"
}

pg_start() {  # pg_start NAME: `pg_autoctl run` for NAME in a session of its own; it starts Postgres as the monitor says
  local name=$1
  pg_alive "$name" && return 0
  log "starting $(label "$name") under pg_autoctl (postgres 127.0.0.1:$(pg_port "$name"))"
  ( cd "$C/pg"; setsid setpriv --reuid=postgres --regid=postgres --init-groups -- env \
      XDG_CONFIG_HOME="$C/pg/xdg/config" XDG_DATA_HOME="$C/pg/xdg/share" XDG_RUNTIME_DIR="$C/pg/xdg/run" \
      pg_autoctl run --pgdata "$(pg_dir "$name")" >> "$C/pg/$name.log" 2>&1 < /dev/null &
    echo $! > "$C/pg/$name.pid" )
}
pg_postmaster() { head -1 "$(pg_dir "$1")/postmaster.pid" 2>/dev/null || true; }
# The postmaster's children, listed before anything is killed: each is a session of its own, and once the
# postmaster is gone they belong to init. A backend then ends by itself; the monitor's health-check worker and the
# logger it keeps open did not (found alive after `down --kill`, their cluster's folder removed).
pg_children() { local pm; pm=$(pg_postmaster "$1"); [ -z "$pm" ] || ps -o pid= --ppid "$pm" 2>/dev/null || true; }
pg_crash() {  # SIGKILL Postgres (the postmaster and every backend) of NAME; its keeper lives and reacts
  local pid; pid=$(pg_postmaster "$1")
  [ -n "$pid" ] || return 0
  # shellcheck disable=SC2046
  kill -KILL "$pid" $(pg_children "$1") 2>/dev/null || true
  log "pg-$1: postgres killed (postmaster $pid and its children)"
}
pg_kill() {  # SIGKILL the keeper and Postgres of NAME at once (its process group, and the postmaster and its children)
  local pid pm kids; pid=$(pg_pid "$1"); pm=$(pg_postmaster "$1"); kids=$(pg_children "$1")
  [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
  # shellcheck disable=SC2086
  [ -z "$pm$kids" ] || kill -KILL $pm $kids 2>/dev/null || true
  log "pg-$1: node killed (process group $pid, postmaster ${pm:-none} and its children)"
}
pg_halt() {  # SIGKILL the keeper of NAME, then stop its Postgres at once (immediate: it still frees its shared memory)
  local pid kids; pid=$(pg_pid "$1"); kids=$(pg_children "$1")
  [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
  if [ -n "$(pg_postmaster "$1")" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$(pg_dir "$1")" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    log "$(label "$1") halted"
  fi
  # shellcheck disable=SC2086
  [ -z "$kids" ] || kill -KILL $kids 2>/dev/null || true  # what the postmaster killed with the keeper left behind
}
pg_stop() {  # a graceful stop: SIGTERM to the keeper, which stops Postgres (fast) and exits
  local pid; pid=$(pg_pid "$1")
  pg_alive "$1" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do live "$pid" || break; sleep 0.2; done
  log "$(label "$1") stopped"
}

pg_states() {  # "NAME reported-state assigned-state" per data node, as the monitor has them
  monitor_sql "SELECT substr(nodename, 4), reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid" 2>/dev/null \
    | tr '|' ' '
}
pg_role() {  # the state the monitor last heard from NAME (primary, secondary, ...), or down
  local state; state=$(pg_states | awk -v n="$1" '$1 == n {print $2}')
  if pg_alive "$1" && [ -n "$state" ]; then echo "$state"; else echo down; fi
}
pg_primary() {  # the data node out of recovery that takes writes (libpq's read-write test); empty if none
  local x
  for x in "${PG_NODES[@]}"; do
    [ "$(psql_on "$x" -c "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'" 2>/dev/null)" = t ] \
      && { echo "$x"; return 0; }
  done
}
pg_settled() {  # pg_settled NAME: the node answers, in the state the monitor assigned it (single, primary, secondary)
  psql_on "$1" -c 'SELECT 1' >/dev/null 2>&1 \
    && [ -n "$(pg_states | awk -v n="$1" '$1 == n && $2 == $3 && ($2 == "single" || $2 == "primary" || $2 == "secondary")')" ]
}
pg_wait_sync() {  # a primary with both secondaries streaming, one of them enough for a commit
  local p
  for _ in $(seq 1 600); do
    p=$(pg_primary)
    [ -n "$p" ] && [ "$(psql_on "$p" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')" 2>/dev/null)" = 2 ] \
      && [ "$(pg_states | awk '$2 == $3 && ($2 == "primary" || $2 == "secondary")' | wc -l)" = 3 ] && return 0
    sleep 0.2
  done
  die "no primary with two synchronous secondaries after 120 s (see $C/pg/*.log)"
}

pg_up() {
  ha_install
  local p="$C"; while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
  mkdir -p "$C/pg/xdg"; chown -R postgres:postgres "$C/pg"; chmod 700 "$C/pg/xdg"
  pg_create monitor; pg_start monitor
  for _ in $(seq 1 300); do monitor_sql "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
  local s; for s in "${PGAF_MONITOR_SETTINGS[@]}"; do monitor_sql "ALTER SYSTEM SET pgautofailover.${s%%=*} = ${s#*=}" >/dev/null; done
  monitor_sql "SELECT pg_reload_conf()" >/dev/null
  local x
  for x in "${PG_NODES[@]}"; do  # one at a time: each secondary is a base backup of the primary
    pg_create "$x"; pg_start "$x"
    for _ in $(seq 1 600); do pg_settled "$x" && break; sleep 0.2; done
    pg_settled "$x" || { log_tail "$x"; die "pg-$x did not join after 120 s (see $C/pg/$x.log)"; }
  done
  # The monitor raised number_sync_standbys to 1 when the second secondary joined: back to 0 (see the top)
  monitor_sql "SELECT pgautofailover.set_formation_number_sync_standbys('default', 0)" >/dev/null
  pg_wait_sync
}

pg_down() { local x; for x in "${PG_NODES[@]}" monitor; do pg_stop "$x" & done; wait; }

pg_status() {
  local x
  log "pg-monitor: $(pg_alive monitor && echo up || echo down) (127.0.0.1:$PGMONITOR_PORT)"
  for x in "${PG_NODES[@]}"; do
    log "pg-$x: $(pg_role "$x")$( [ "$(pg_primary)" = "$x" ] && printf ', standbys: %s' \
      "$(psql_on "$x" -c "SELECT coalesce(string_agg(application_name || ' ' || sync_state, ', '), 'none') FROM pg_stat_replication" 2>/dev/null)")"
  done
}
