-- Credentials: relay keys (hash only) and inference tokens (signed, revocable by id).
CREATE TABLE relay_keys (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text,
    prefix text NOT NULL,
    principal_kind text NOT NULL CHECK (principal_kind IN ('user', 'service_account')),
    principal_id uuid NOT NULL,
    policy_id uuid NOT NULL REFERENCES policies(id),
    project_id uuid REFERENCES projects(id),
    team_id uuid REFERENCES teams(id),
    state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled', 'revoked')),
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every value a relay key has had. The current value has retired_at NULL; a rotated value keeps
-- working until valid_until, then it is "rotated out".
CREATE TABLE relay_key_values (
    key_hash bytea PRIMARY KEY,
    relay_key_id uuid NOT NULL REFERENCES relay_keys(id) ON DELETE CASCADE,
    prefix text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz,
    valid_until timestamptz
);
CREATE INDEX relay_key_values_key ON relay_key_values (relay_key_id);

CREATE TABLE inference_tokens (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
