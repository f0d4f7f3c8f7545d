-- Webhooks: one event when a batch ends (finished or cancelled), delivered to the webhook endpoints of the
-- batch's project and team and to its own callback_url. The event and its deliveries are inserted in the
-- transaction that sets the batch's finished_at (app/batches/store.py, app/webhooks/events.py); workers deliver
-- them (app/webhooks/delivery.py), retrying with backoff. Postgres is the record: RabbitMQ carries only ids.

-- The catalog's endpoints, on a project or on a team (applied with the catalog, matched by position). The secrets
-- are Fernet tokens (key derived from RELAY_SECRET_KEY), like host keys; the previous one also signs while a
-- rotation overlaps.
CREATE TABLE webhook_endpoints (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id uuid REFERENCES projects(id) ON DELETE CASCADE,
    team_id uuid REFERENCES teams(id) ON DELETE CASCADE,
    position integer NOT NULL,
    url text NOT NULL,
    events text[] NOT NULL DEFAULT '{}',     -- event types it receives; empty: all
    secret_enc bytea NOT NULL,
    secret_env text,
    previous_secret_enc bytea,
    previous_secret_env text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((project_id IS NULL) <> (team_id IS NULL))
);
CREATE UNIQUE INDEX webhook_endpoints_project ON webhook_endpoints (project_id, position) WHERE project_id IS NOT NULL;
CREATE UNIQUE INDEX webhook_endpoints_team ON webhook_endpoints (team_id, position) WHERE team_id IS NOT NULL;

-- A batch's own destination, given at submit (only for hosts RELAY_WEBHOOK_ALLOWED_HOSTS allows).
ALTER TABLE batches ADD COLUMN callback_url text, ADD COLUMN callback_secret_enc bytea;

-- One event per batch; its body is rendered once, so every attempt signs the same bytes. No foreign key: the
-- event (and its deliveries) outlive a deleted batch.
CREATE TABLE webhook_events (
    id uuid PRIMARY KEY,                     -- the event id evt_<hex> and the webhook-id header
    batch_id uuid NOT NULL,
    type text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX webhook_events_batch ON webhook_events (batch_id);

-- One delivery per destination of an event. `token` names the one message allowed to make the next attempt (a
-- message with another token is stale and dropped); `lease_until` guards an attempt in progress; `since` starts
-- the give-up window (reset by "send again").
CREATE TABLE webhook_deliveries (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id uuid NOT NULL REFERENCES webhook_events(id) ON DELETE CASCADE,
    endpoint_id uuid REFERENCES webhook_endpoints(id) ON DELETE SET NULL,
    destination text NOT NULL,               -- project:<name>, team:<name> or callback
    url text NOT NULL,
    secret_enc bytea,                        -- a callback's own secret (endpoints: read from the endpoint each attempt)
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    since timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    token uuid,
    sent_at timestamptz,
    lease_until timestamptz,
    last_status integer,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at DESC, id DESC);

CREATE TABLE webhook_attempts (
    delivery_id uuid NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    n integer NOT NULL,
    started_at timestamptz NOT NULL,
    status integer,                          -- the receiver's HTTP status; NULL when none came back
    latency_ms double precision,
    error text,
    PRIMARY KEY (delivery_id, n)
);
