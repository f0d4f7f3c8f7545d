-- Live pipeline state shared by all replicas: rate-limit windows, breakers, key rotation, usage, payload logs.
CREATE TABLE rate_limit_windows (
    limit_id uuid NOT NULL REFERENCES policy_rate_limits(id) ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    requests bigint NOT NULL DEFAULT 0,
    tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (limit_id, window_start)
);

CREATE TABLE key_health (
    host_key_id uuid PRIMARY KEY REFERENCES host_keys(id) ON DELETE CASCADE,
    consecutive_failures integer NOT NULL DEFAULT 0,
    opened_until timestamptz,
    last_used_at timestamptz,
    uses bigint NOT NULL DEFAULT 0
);

CREATE TABLE usage_events (
    id bigserial PRIMARY KEY,
    request_id text NOT NULL,
    source text NOT NULL CHECK (source IN ('live', 'batch')),
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL DEFAULT 0,
    route text,
    upstream_status integer,
    status integer NOT NULL,
    error_code text,
    model_requested text,
    model_resolved text,
    host_id uuid,
    host_name text,
    binding_id uuid,
    adapter text,
    host_key_name text,
    credential_kind text NOT NULL,
    credential_id uuid,
    relay_key_hash bytea,
    principal_kind text,
    principal_id uuid,
    policy_id uuid,
    project_id uuid,
    team_id uuid,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cached_tokens bigint NOT NULL DEFAULT 0,
    cost_nanos bigint,
    attempts integer NOT NULL DEFAULT 0,
    streamed boolean NOT NULL DEFAULT false,
    batch_id uuid,
    batch_idx integer
);
CREATE UNIQUE INDEX usage_events_batch_item ON usage_events (batch_id, batch_idx) WHERE batch_id IS NOT NULL;
CREATE INDEX usage_events_created ON usage_events (created_at DESC, id DESC);
CREATE INDEX usage_events_credential ON usage_events (credential_id, created_at DESC);
CREATE INDEX usage_events_model_time ON usage_events (created_at, model_requested);

CREATE TABLE payload_logs (
    request_id text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    request_body text,
    request_truncated boolean NOT NULL DEFAULT false,
    response_body text,
    response_truncated boolean NOT NULL DEFAULT false
);
