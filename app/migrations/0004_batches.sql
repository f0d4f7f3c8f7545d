-- Batches: Postgres is the record; RabbitMQ only carries item ids.
CREATE TABLE batches (
    id uuid PRIMARY KEY,
    shape text NOT NULL CHECK (shape IN ('openai', 'anthropic', 'openai_responses')),
    status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'cancelled')),
    metadata jsonb,
    total integer NOT NULL,
    owner text NOT NULL,              -- 'key:<hex hash>' or 'user:<uuid>': who may read and cancel
    relay_key_hash bytea,
    policy_id uuid NOT NULL,
    project_id uuid,
    team_id uuid,
    principal_kind text,
    principal_id uuid,
    credential_kind text NOT NULL,
    credential_id uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    cancelled_at timestamptz,
    finished_at timestamptz,
    dispatched_at timestamptz        -- set once every item has been published
);
CREATE INDEX batches_owner ON batches (owner, created_at DESC, id DESC);
CREATE INDEX batches_undispatched ON batches (created_at) WHERE dispatched_at IS NULL;
CREATE INDEX batches_unfinished ON batches (created_at) WHERE finished_at IS NULL;

CREATE TABLE batch_items (
    batch_id uuid NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    idx integer NOT NULL,
    state text NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'completed', 'discarded', 'cancelled')),
    model text,
    error text,
    error_code text,
    published_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    worker_id text,
    PRIMARY KEY (batch_id, idx)
);
CREATE INDEX batch_items_state ON batch_items (batch_id, state);
CREATE INDEX batch_items_running ON batch_items (worker_id) WHERE state = 'running';
-- The dispatcher's outbox: committed items not yet published.
CREATE INDEX batch_items_unpublished ON batch_items (batch_id, idx) WHERE published_at IS NULL AND state = 'queued';
-- Published items not yet final: the dispatch window.
CREATE INDEX batch_items_in_flight ON batch_items (published_at)
    WHERE published_at IS NOT NULL AND state IN ('queued', 'running');

-- One row per live worker process; a stale heartbeat means its running items are lost.
CREATE TABLE workers (
    id text PRIMARY KEY,
    hostname text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen timestamptz NOT NULL DEFAULT now()
);
