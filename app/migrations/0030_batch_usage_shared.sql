-- Fewer bytes per batch item's usage event (issue #38; the split and the command are in docs/benchmarks.md). What
-- is the same for every item of a batch is stored once, in usage_batch_shared, and left NULL on the items' events:
-- the caller's attribution (~140 bytes a row) and the route's names (~85). The row has no key to batches: usage
-- events are kept when their batch is purged, and so is what they share.
CREATE TABLE usage_batch_shared (
    batch_id uuid PRIMARY KEY,
    credential_kind text NOT NULL,
    credential_id uuid,
    relay_key_hash bytea,
    principal_kind text,
    principal_id uuid,
    policy_id uuid,
    project_id uuid,
    team_id uuid,
    route text,
    model_requested text,
    model_resolved text,
    host_id uuid,
    host_name text,
    binding_id uuid,
    adapter text
);

-- Which parts of an event are its batch's (NULL: none, as in every earlier row): 1 the attribution (credential kind
-- and id, relay key hash, principal kind and id, policy, project, team), 3 the names too (route, model requested and
-- resolved, host id and name, binding, adapter). An event's own NULL and "its batch's" never mix up.
ALTER TABLE usage_events ADD COLUMN shared smallint;
ALTER TABLE usage_events ALTER COLUMN credential_kind DROP NOT NULL;
ALTER TABLE usage_events ADD CONSTRAINT usage_events_shared_parts
    CHECK (shared IS NULL OR (shared IN (1, 3) AND batch_id IS NOT NULL)) NOT VALID;
ALTER TABLE usage_events ADD CONSTRAINT usage_events_credential_named
    CHECK (credential_kind IS NOT NULL OR shared IS NOT NULL) NOT VALID;

-- A batch item's event that shares its attribution has no credential id of its own: it is found through its batch.
DROP INDEX IF EXISTS usage_events_credential;
CREATE INDEX usage_events_credential ON usage_events (credential_id, created_at) WHERE credential_id IS NOT NULL;

-- Every event as the readers know it (app/usage/store.py and the others read this, never the table): a batch item's
-- request id `<batch id>:<idx>` (0029) and its batch's shared parts filled in. Two branches, so that a filter on a
-- column of the attribution reaches the table's own indexes for the events that carry theirs (the first branch),
-- and the shared rows, then their events by batch, for the others.
CREATE VIEW usage_events_full AS
SELECT e.id, coalesce(e.request_id, e.batch_id::text || ':' || e.batch_idx) AS request_id, e.source, e.created_at,
       e.started_at, e.duration_ms, e.route, e.upstream_status, e.status, e.error_code, e.model_requested,
       e.model_resolved, e.host_id, e.host_name, e.binding_id, e.adapter, e.host_key_name, e.credential_kind,
       e.credential_id, e.relay_key_hash, e.principal_kind, e.principal_id, e.policy_id, e.project_id, e.team_id,
       e.input_tokens, e.output_tokens, e.cached_tokens, e.cost_nanos, e.attempts, e.streamed, e.batch_id,
       e.batch_idx, e.custom_id
FROM usage_events e WHERE e.shared IS NULL
UNION ALL
SELECT e.id, e.batch_id::text || ':' || e.batch_idx, e.source, e.created_at, e.started_at, e.duration_ms,
       CASE WHEN e.shared = 3 THEN s.route ELSE e.route END,
       e.upstream_status, e.status, e.error_code,
       CASE WHEN e.shared = 3 THEN s.model_requested ELSE e.model_requested END,
       CASE WHEN e.shared = 3 THEN s.model_resolved ELSE e.model_resolved END,
       CASE WHEN e.shared = 3 THEN s.host_id ELSE e.host_id END,
       CASE WHEN e.shared = 3 THEN s.host_name ELSE e.host_name END,
       CASE WHEN e.shared = 3 THEN s.binding_id ELSE e.binding_id END,
       CASE WHEN e.shared = 3 THEN s.adapter ELSE e.adapter END,
       e.host_key_name, s.credential_kind, s.credential_id, s.relay_key_hash, s.principal_kind, s.principal_id,
       s.policy_id, s.project_id, s.team_id, e.input_tokens, e.output_tokens, e.cached_tokens, e.cost_nanos,
       e.attempts, e.streamed, e.batch_id, e.batch_idx, e.custom_id
FROM usage_events e LEFT JOIN usage_batch_shared s ON s.batch_id = e.batch_id WHERE e.shared IS NOT NULL;
