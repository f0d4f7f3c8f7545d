-- Usage retention (`relay usage purge`, app/usage/retention.py): the events an operator's cutoff passed are folded
-- into hourly sums here, then deleted. Summaries read the events and these rows as one (app/usage/store.py), so their
-- totals stay exact; the events list and export show the events still kept. A row's key is every column a summary
-- filters or groups by (the relay key hash: what a key's reader may see); rows only add up, so two rows with one key
-- (one hour purged in two parts) count as one would.
CREATE TABLE usage_rollups (
    hour timestamptz NOT NULL,
    source text NOT NULL,
    status integer NOT NULL,
    error_code text,
    model_requested text,
    host_id uuid,
    host_name text,
    credential_kind text,
    credential_id uuid,
    relay_key_hash bytea,
    principal_kind text,
    principal_id uuid,
    policy_id uuid,
    project_id uuid,
    team_id uuid,
    batch_id uuid,
    requests integer NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL,
    cost_nanos bigint,
    unpriced integer NOT NULL
);
CREATE INDEX usage_rollups_hour ON usage_rollups (hour);

-- The rollups as summaries read events (alias `e`, app/usage/store.py): an hour's rows at its start, each counting
-- N events, UNPRICED of them answered without a price.
CREATE VIEW usage_rollup_rows AS
SELECT hour AS created_at, source, status, error_code, model_requested, host_id, host_name, credential_kind,
       credential_id, relay_key_hash, principal_kind, principal_id, policy_id, project_id, team_id, batch_id,
       input_tokens, output_tokens, cached_tokens, cost_nanos, requests AS n, unpriced
FROM usage_rollups;
