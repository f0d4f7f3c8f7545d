-- Catalog: hosts, keys, models, bindings, policies, attribution groups and principals.
CREATE TABLE teams (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    team_id uuid REFERENCES teams(id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hosts (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    base_url text NOT NULL,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A provider API key. The secret is stored encrypted (Fernet, key derived from RELAY_SECRET_KEY)
-- or, with value_env, read from that environment variable when it is used.
CREATE TABLE host_keys (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    host_id uuid NOT NULL REFERENCES hosts(id) ON DELETE CASCADE,
    name text NOT NULL UNIQUE,
    secret_enc bytea,
    value_env text,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE models (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bindings (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    model_id uuid NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    position integer NOT NULL,
    host_id uuid NOT NULL REFERENCES hosts(id) ON DELETE CASCADE,
    adapter text NOT NULL CHECK (adapter IN ('openai', 'anthropic', 'openai_responses')),
    upstream_model text NOT NULL,
    input_per_mtok numeric,
    output_per_mtok numeric,
    cached_input_per_mtok numeric,
    enabled boolean NOT NULL DEFAULT true,
    UNIQUE (model_id, position)
);

-- Policies are soft-deleted (deleted_at) so batches and usage events keep their reference.
CREATE TABLE policies (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL,
    enabled boolean NOT NULL DEFAULT true,
    deleted_at timestamptz,
    models text[] NOT NULL DEFAULT '{}',
    key_selection text NOT NULL DEFAULT 'prioritized'
        CHECK (key_selection IN ('prioritized', 'round_robin', 'least_recently_used')),
    breaker_failures integer NOT NULL DEFAULT 5,
    breaker_cooldown_s double precision NOT NULL DEFAULT 30,
    payload_logging boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX policies_live_name ON policies (name) WHERE deleted_at IS NULL;

CREATE TABLE policy_rate_limits (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    policy_id uuid NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
    position integer NOT NULL,
    requests bigint,
    tokens bigint,
    window_s integer NOT NULL CHECK (window_s > 0),
    UNIQUE (policy_id, position)
);

CREATE TABLE policy_keys (
    policy_id uuid NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
    host_key_id uuid NOT NULL REFERENCES host_keys(id) ON DELETE CASCADE,
    position integer NOT NULL,
    PRIMARY KEY (policy_id, host_key_id)
);

CREATE TABLE users (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    policy_id uuid REFERENCES policies(id),
    project_id uuid REFERENCES projects(id),
    team_id uuid REFERENCES teams(id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE service_accounts (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    policy_id uuid REFERENCES policies(id),
    project_id uuid REFERENCES projects(id),
    team_id uuid REFERENCES teams(id),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Bumped by every catalog or credential change; caches compare it (and LISTEN on relay_catalog).
CREATE TABLE catalog_version (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    version bigint NOT NULL DEFAULT 1
);
INSERT INTO catalog_version DEFAULT VALUES;
