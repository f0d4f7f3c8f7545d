#!/usr/bin/env bash
# Run Relay locally: scripts/dev.sh up [--demo-catalog] | down [--keep-services] | status | logs
#   up    install what is missing, start Postgres + RabbitMQ + the fake upstream, migrate, apply the demo
#         catalog on a fresh install (an empty catalog; --demo-catalog applies it over any catalog), start the
#         API and the workers, and print the URL, a demo key and curl examples.
#   down  stop the API, workers, fake upstream and the local services.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN="$ROOT/.run"
API_PORT="${RELAY_API_PORT:-8080}"
FAKE_PORT="${RELAY_FAKE_UPSTREAM_PORT:-9100}"
mkdir -p "$RUN"

log() { printf '[relay] %s\n' "$*" >&2; }

running() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

start() {  # start NAME CMD...: run CMD in the background, logging to .run/NAME.log
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$RUN/$name.pid"))"; return; fi
  setsid "$@" >"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
  log "$name started (pid $!, log .run/$name.log)"
}

stop() {  # SIGTERM to the main process only (Dramatiq forwards it once), then the whole group
  local name=$1 pid
  if running "$name"; then
    pid=$(cat "$RUN/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    log "$name stopped"
  fi
  rm -f "$RUN/$name.pid"
}

wait_http() {  # wait_http URL SECONDS
  for _ in $(seq 1 "$(( $2 * 5 ))"); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.2; done
  log "timed out waiting for $1"; return 1
}

write_env() {
  if [ ! -f "$RUN/env" ]; then
    eval "$(bash scripts/services.sh env)"
    cat > "$RUN/env" <<ENV
export RELAY_DATABASE_URL=$RELAY_DATABASE_URL
export RELAY_BROKER_URL=$RELAY_BROKER_URL
export RELAY_ADMIN_TOKEN=admin-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export RELAY_SECRET_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export RELAY_BATCH_PAYLOAD_DIR=$ROOT/relay-batch-payloads
export RELAY_FAKE_UPSTREAM_URL=http://127.0.0.1:$FAKE_PORT
export RELAY_METRICS_TOKEN=metrics-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
ENV
  fi
}

apply_demo_catalog() {  # the demo catalog only over an empty one, unless asked: never over a catalog someone wrote
  if [ "$1" = "--demo-catalog" ]; then
    relay apply app/demo/catalog.yaml >/dev/null
    log "demo catalog applied (--demo-catalog): it replaced the catalog that was there"
  else
    local said; said=$(relay apply --if-empty app/demo/catalog.yaml)
    case "$said" in
      "the catalog is not empty"*) log "$said; scripts/dev.sh up --demo-catalog would replace it with the demo one" ;;
      *) log "demo catalog applied (a fresh install)" ;;
    esac
  fi
}

make_demo_key() {  # once; a catalog without the demo user (someone else's) gets none
  [ -s "$RUN/demo-key" ] && return
  local out
  if out=$(relay keys create --user demo --policy default --name demo 2>&1); then
    python -c 'import json, sys; print(json.load(sys.stdin)["key"])' <<< "$out" > "$RUN/demo-key"
  else
    log "no demo relay key: $out"
  fi
}

up() {  # [--demo-catalog]
  case "${1:-}" in ""|--demo-catalog) ;; *) echo "usage: $0 up [--demo-catalog]" >&2; exit 2 ;; esac
  command -v curl >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null; }
  bash scripts/prepare.sh  # .venv, Postgres + RabbitMQ
  write_env
  # shellcheck disable=SC1091
  source "$RUN/env"
  export RELAY_BROKER_UI_URL=${RELAY_BROKER_UI_URL:-http://127.0.0.1:${RELAY_MQ_UI_PORT:-15699}/}  # linked by the console
  # This local install's webhooks may go to receivers on this machine (callback_url hosts, loopback addresses).
  export RELAY_WEBHOOK_ALLOWED_HOSTS=${RELAY_WEBHOOK_ALLOWED_HOSTS:-127.0.0.1,localhost,::1}
  export RELAY_WEBHOOK_ALLOWED_NETWORKS=${RELAY_WEBHOOK_ALLOWED_NETWORKS:-127.0.0.0/8,::1/128}
  export PATH="$ROOT/.venv/bin:$PATH"
  relay migrate >/dev/null
  start fake-upstream python -m devtools.fake_upstream --host 127.0.0.1 --port "$FAKE_PORT"  # demo scaffolding
  wait_http "http://127.0.0.1:$FAKE_PORT/_control/stats" 30
  apply_demo_catalog "$1"
  make_demo_key
  start api relay api --bind "127.0.0.1:$API_PORT"
  start worker relay worker
  wait_http "http://127.0.0.1:$API_PORT/readyz" 60
  local key; key=$(cat "$RUN/demo-key" 2>/dev/null || true); key=${key:-'(none: see above)'}
  cat <<INFO

Relay is running.
  API:            http://127.0.0.1:$API_PORT   (OpenAPI: /openapi.json, docs: /docs)
  console:        http://127.0.0.1:$API_PORT/console/   (sign in with the demo key, or the admin token)
  RabbitMQ UI:    http://127.0.0.1:${RELAY_MQ_UI_PORT:-15699}        (guest / guest)
  fake upstream:  http://127.0.0.1:$FAKE_PORT
  demo relay key: $key
  admin token:    \$RELAY_ADMIN_TOKEN in .run/env (metrics: /metrics, and the workers' on
                  http://127.0.0.1:${RELAY_WORKER_METRICS_PORT:-9464}/metrics, with \$RELAY_METRICS_TOKEN)
  logs:           .run/*.log      stop: scripts/dev.sh down

A live request:
  curl -s http://127.0.0.1:$API_PORT/v1/chat/completions -H "Authorization: Bearer $key" \\
    -H 'content-type: application/json' \\
    -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hello"}]}'

A batch (the answer's "id" is the batch's ID):
  curl -s http://127.0.0.1:$API_PORT/v1/batches -H "Authorization: Bearer $key" \\
    -H 'content-type: application/json' \\
    -d '{"shape": "openai", "requests": [{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "one"}]},
                                         {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "two"}]}]}'
  curl -s http://127.0.0.1:$API_PORT/v1/batches/ID -H "Authorization: Bearer $key"
  curl -s http://127.0.0.1:$API_PORT/v1/batches/ID/results -H "Authorization: Bearer $key"

The relay batches CLI reads RELAY_URL and RELAY_KEY:
  export PATH="$ROOT/.venv/bin:\$PATH" RELAY_URL=http://127.0.0.1:$API_PORT RELAY_KEY=$key
  relay batches list
INFO
}

down() {  # --keep-services leaves Postgres and RabbitMQ running
  stop worker; stop api; stop fake-upstream
  [ "${1:-}" = "--keep-services" ] || bash scripts/services.sh down
}

status() {
  for n in api worker fake-upstream; do if running "$n"; then log "$n: up"; else log "$n: down"; fi; done
  bash scripts/services.sh status
}

case "${1:-up}" in
  up) up "${2:-}" ;;
  down) down "${2:-}" ;;
  status) status ;;
  logs) tail -n 50 "$RUN"/*.log ;;
  *) echo "usage: $0 up [--demo-catalog] | down [--keep-services] | status | logs" >&2; exit 2 ;;
esac
