# Sourced by scripts/cluster.sh: Postgres under Patroni (two members, pg-a and pg-b) on an etcd cluster of three
# members (etcd1..3), everything on 127.0.0.1. Patroni promotes the synchronous standby when the primary dies, drops
# synchronous replication while the standby is gone (synchronous_mode, not strict) and starts a returning former
# primary as a standby (pg_rewind), so no human step and never two primaries.
# Needs: load_state (cluster.env), log, die, var, $C, $ROOT, $PG_BIN, $DB.

PATRONI_VENV="${RELAY_PATRONI_VENV:-$ROOT/.venv-patroni}"
PATRONI="$PATRONI_VENV/bin/patroni"
ETCD=/usr/bin/etcd

ha_install() {  # Debian's etcd-server, and Patroni (requirements-cluster.txt) in a venv of the system's python3:
  # Patroni runs as the postgres user and starts Postgres through its own interpreter, which that user must reach
  if [ ! -x "$ETCD" ]; then
    log "installing etcd-server (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq etcd-server >/dev/null
  fi
  [ -x "$PATRONI" ] && return 0
  log "installing Patroni into $PATRONI_VENV"
  /usr/bin/python3 -m venv "$PATRONI_VENV"
  "$PATRONI_VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements-cluster.txt"
}

live() {  # live PID: the process runs (a killed one nobody has reaped yet is a zombie, not alive)
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# -- etcd: three members, the store Patroni keeps its leader lock in --------------------------------------------
etcd_alive() { live "$(cat "$C/etcd$1/etcd.pid" 2>/dev/null || true)"; }
etcd_peers() { printf 'etcd1=http://127.0.0.1:%s,etcd2=http://127.0.0.1:%s,etcd3=http://127.0.0.1:%s' \
  "$ETCD1_PEER" "$ETCD2_PEER" "$ETCD3_PEER"; }
etcd_hosts() { printf '127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s' "$ETCD1_CLIENT" "$ETCD2_CLIENT" "$ETCD3_CLIENT"; }
etcd_start() {
  local n=$1 d="$C/etcd$1" state=new
  etcd_alive "$n" && return 0
  mkdir -p "$d"; [ -d "$d/data/member" ] && state=existing
  log "starting etcd$n (client 127.0.0.1:$(var "ETCD${n}_CLIENT"))"
  ( setsid "$ETCD" --name "etcd$n" --data-dir "$d/data" \
      --listen-client-urls "http://127.0.0.1:$(var "ETCD${n}_CLIENT")" \
      --advertise-client-urls "http://127.0.0.1:$(var "ETCD${n}_CLIENT")" \
      --listen-peer-urls "http://127.0.0.1:$(var "ETCD${n}_PEER")" \
      --initial-advertise-peer-urls "http://127.0.0.1:$(var "ETCD${n}_PEER")" \
      --initial-cluster "$(etcd_peers)" --initial-cluster-token "relay-$CLUSTER_ID" \
      --initial-cluster-state "$state" --heartbeat-interval 200 --election-timeout 2000 \
      > "$d/etcd.log" 2>&1 < /dev/null &
    echo $! > "$d/etcd.pid" )
}
etcd_stop() { local sig=${2:-TERM} pid; pid=$(cat "$C/etcd$1/etcd.pid" 2>/dev/null || true)
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do live "$pid" || break; sleep 0.2; done
  log "etcd$1 stopped ($sig)"; }
etcd_wait() {
  local n
  for _ in $(seq 1 300); do
    for n in 1 2 3; do
      curl -fsS "http://127.0.0.1:$(var "ETCD${n}_CLIENT")/health" 2>/dev/null | grep -q '"health":"true"' && return 0
    done
    sleep 0.2
  done
  die "etcd has no healthy member after 60 s (see $C/etcd*/etcd.log)"
}

# -- Patroni: one per Postgres member ---------------------------------------------------------------------------
pg_dir() { printf '%s/pg/%s' "$C" "$1"; }
pg_port() { [ "$1" = a ] && echo "$PGA_PORT" || echo "$PGB_PORT"; }
pg_api() { [ "$1" = a ] && echo "$PGA_API" || echo "$PGB_API"; }
patroni_alive() { live "$(cat "$(pg_dir "$1")/patroni.pid" 2>/dev/null || true)"; }

pg_config() {  # pg_config X: the Patroni configuration of member pg-X
  local x=$1 d; d=$(pg_dir "$x")
  cat > "$d/patroni.yml" <<YAML
scope: relay-$CLUSTER_ID
namespace: /relay/
name: pg-$x
restapi: {listen: "127.0.0.1:$(pg_api "$x")", connect_address: "127.0.0.1:$(pg_api "$x")"}
etcd3: {hosts: "$(etcd_hosts)"}
bootstrap:
  dcs:
    # The leader lock lives 20 s (Patroni's least) without its holder; every member acts each second.
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    primary_start_timeout: 0      # a crashed primary is failed over at once, not restarted in place
    maximum_lag_on_failover: 1048576
    synchronous_mode: true        # a commit waits for the standby while it streams ...
    synchronous_mode_strict: false  # ... and not while it is gone: degrade, never freeze
    postgresql:
      use_pg_rewind: true         # a former primary rejoins as a standby, rewound
      use_slots: true
      parameters:
        max_connections: 300
        shared_buffers: 128MB
        wal_level: replica
        wal_log_hints: "on"
        hot_standby: "on"
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 512MB
        synchronous_commit: "on"
        wal_sender_timeout: 5s    # a standby that stops answering is dropped in 5 s, not 60
        wal_receiver_timeout: 5s
        # A client cut off inside a transaction would hold its row locks until TCP gives up (hours by default).
        idle_in_transaction_session_timeout: 10s
        tcp_keepalives_idle: 5
        tcp_keepalives_interval: 2
        tcp_keepalives_count: 3
  initdb: [{encoding: UTF8}, {auth: trust}]
postgresql:
  listen: "127.0.0.1:$(pg_port "$x")"
  connect_address: "127.0.0.1:$(pg_port "$x")"
  data_dir: $d/data
  bin_dir: $PG_BIN
  pgpass: $d/pgpass
  # A standby is copied with pg_basebackup: a fast checkpoint on the primary, not a spread one (which paces the
  # writes of a fresh cluster's dirty buffers over minutes: about 100 s on a loaded 2-core machine).
  basebackup: [{checkpoint: fast}]
  parameters: {unix_socket_directories: "$d", cluster_name: "pg-$x", logging_collector: "on", log_directory: "$d/log"}
  authentication:
    superuser: {username: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
log: {dir: "$d", file_num: 2, file_size: 10000000}
YAML
  chown -R postgres:postgres "$d"
}

pg_start() {  # start Patroni for pg-X: it starts Postgres, as the primary or as a standby as the lock says
  local x=$1 d; d=$(pg_dir "$x")
  patroni_alive "$x" && return 0
  mkdir -p "$d"; chmod 700 "$d"; pg_config "$x"
  log "starting pg-$x under Patroni (postgres 127.0.0.1:$(pg_port "$x"), REST 127.0.0.1:$(pg_api "$x"))"
  ( cd "$d"; setsid setpriv --reuid=postgres --regid=postgres --init-groups -- "$PATRONI" "$d/patroni.yml" \
      > "$d/patroni.out" 2>&1 < /dev/null &
    echo $! > "$d/patroni.pid" )
}
pg_postmaster() { head -1 "$(pg_dir "$1")/data/postmaster.pid" 2>/dev/null || true; }
pg_crash() {  # SIGKILL Postgres (the postmaster and every backend) of pg-X; its Patroni lives and reacts
  local pid; pid=$(pg_postmaster "$1")
  [ -n "$pid" ] || return 0
  # shellcheck disable=SC2046
  kill -KILL "$pid" $(ps -o pid= --ppid "$pid") 2>/dev/null || true
  log "pg-$1: postgres killed (postmaster $pid and its children)"
}
pg_kill() {  # SIGKILL Patroni and Postgres of pg-X at once, as the death of its machine
  local pid; pid=$(cat "$(pg_dir "$1")/patroni.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  pg_crash "$1"
  log "pg-$1: patroni killed (pid $pid)"
}
pg_halt() {  # SIGKILL Patroni of pg-X, then stop its Postgres at once (immediate: it still frees its shared memory)
  local pid; pid=$(cat "$(pg_dir "$1")/patroni.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  [ -n "$(pg_postmaster "$1")" ] || return 0
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$(pg_dir "$1")/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  log "pg-$1 halted"
}
pg_stop() {  # a graceful stop: Patroni stops Postgres (a leader hands its lock over first)
  local pid; pid=$(cat "$(pg_dir "$1")/patroni.pid" 2>/dev/null || true)
  patroni_alive "$1" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 300); do live "$pid" || break; sleep 0.2; done
  log "pg-$1 stopped"
}

pg_role() { curl -fsS --max-time 2 "http://127.0.0.1:$(pg_api "$1")/patroni" 2>/dev/null \
  | "$PY" -c 'import json, sys; print(json.load(sys.stdin).get("role", "?"))' 2>/dev/null || echo down; }
pg_primary() {  # the member Patroni's REST API calls the primary (its /primary answers 200); empty if none
  local x
  for x in a b; do curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$(pg_api "$x")/primary" 2>/dev/null && { echo "$x"; return 0; }; done
}
psql_on() { "$PG_BIN/psql" -h 127.0.0.1 -p "$(pg_port "$1")" -U postgres -d postgres -tAX "${@:2}"; }
pg_wait_sync() {  # a primary with a synchronous standby streaming
  local p
  for _ in $(seq 1 600); do
    p=$(pg_primary)
    [ -n "$p" ] && [ "$(psql_on "$p" -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')" 2>/dev/null)" = 1 ] \
      && return 0
    sleep 0.2
  done
  die "no primary with a synchronous standby after 120 s (see $C/pg/*/patroni.out)"
}

pg_up() {
  ha_install
  local p="$C"; while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
  mkdir -p "$C/pg"
  local n; for n in 1 2 3; do etcd_start "$n"; done
  etcd_wait
  pg_start a
  for _ in $(seq 1 600); do [ -n "$(pg_primary)" ] && break; sleep 0.2; done  # the first member bootstraps
  [ -n "$(pg_primary)" ] || die "no Postgres primary after 120 s (see $C/pg/a/patroni.out)"
  pg_start b
  psql_on "$(pg_primary)" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
    || psql_on "$(pg_primary)" -c "CREATE DATABASE $DB" >/dev/null
  pg_wait_sync
}

pg_down() {
  local x n; for x in a b; do pg_stop "$x" & done; wait
  for n in 1 2 3; do etcd_stop "$n" & done; wait
}

pg_status() {
  local x n
  for n in 1 2 3; do if etcd_alive "$n"; then log "etcd$n: up"; else log "etcd$n: down"; fi; done
  for x in a b; do
    log "pg-$x: $(pg_role "$x")$( [ "$(pg_primary)" = "$x" ] && printf ', standbys: %s' \
      "$(psql_on "$x" -c "SELECT coalesce(string_agg(application_name || ' ' || sync_state, ', '), 'none') FROM pg_stat_replication" 2>/dev/null)")"
  done
}
