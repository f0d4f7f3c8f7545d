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

-- Which parts of an event are its batch's (NULL: none, every earlier row): 1 the attribution (credential kind and
-- id, relay key hash, principal kind and id, policy, project, team), 2 the names (route, model requested and
-- resolved, host id and name, binding, adapter). An event's own NULL and "its batch's" never mix up.
ALTER TABLE usage_events ADD COLUMN shared smallint;
ALTER TABLE usage_events ALTER COLUMN credential_kind DROP NOT NULL;
ALTER TABLE usage_events ADD CONSTRAINT usage_events_credential_named
    CHECK (credential_kind IS NOT NULL OR (batch_id IS NOT NULL AND shared & 1 = 1)) NOT VALID;
ALTER TABLE usage_events ADD CONSTRAINT usage_events_shared_batch
    CHECK (shared IS NULL OR batch_id IS NOT NULL) NOT VALID;

-- Every event as the readers know it (app/usage/store.py and the others read this, never the table): a batch
-- item's request id `<batch id>:<idx>` (0029) and its batch's shared parts filled in.
CREATE VIEW usage_events_full AS
SELECT e.id, coalesce(e.request_id, e.batch_id::text || ':' || e.batch_idx) AS request_id, e.source, e.created_at,
       e.started_at, e.duration_ms,
       CASE WHEN e.shared & 2 = 2 THEN s.route ELSE e.route END AS route,
       e.upstream_status, e.status, e.error_code,
       CASE WHEN e.shared & 2 = 2 THEN s.model_requested ELSE e.model_requested END AS model_requested,
       CASE WHEN e.shared & 2 = 2 THEN s.model_resolved ELSE e.model_resolved END AS model_resolved,
       CASE WHEN e.shared & 2 = 2 THEN s.host_id ELSE e.host_id END AS host_id,
       CASE WHEN e.shared & 2 = 2 THEN s.host_name ELSE e.host_name END AS host_name,
       CASE WHEN e.shared & 2 = 2 THEN s.binding_id ELSE e.binding_id END AS binding_id,
       CASE WHEN e.shared & 2 = 2 THEN s.adapter ELSE e.adapter END AS adapter,
       e.host_key_name,
       CASE WHEN e.shared & 1 = 1 THEN s.credential_kind ELSE e.credential_kind END AS credential_kind,
       CASE WHEN e.shared & 1 = 1 THEN s.credential_id ELSE e.credential_id END AS credential_id,
       CASE WHEN e.shared & 1 = 1 THEN s.relay_key_hash ELSE e.relay_key_hash END AS relay_key_hash,
       CASE WHEN e.shared & 1 = 1 THEN s.principal_kind ELSE e.principal_kind END AS principal_kind,
       CASE WHEN e.shared & 1 = 1 THEN s.principal_id ELSE e.principal_id END AS principal_id,
       CASE WHEN e.shared & 1 = 1 THEN s.policy_id ELSE e.policy_id END AS policy_id,
       CASE WHEN e.shared & 1 = 1 THEN s.project_id ELSE e.project_id END AS project_id,
       CASE WHEN e.shared & 1 = 1 THEN s.team_id ELSE e.team_id END AS team_id,
       e.input_tokens, e.output_tokens, e.cached_tokens, e.cost_nanos, e.attempts, e.streamed, e.batch_id,
       e.batch_idx, e.custom_id
FROM usage_events e LEFT JOIN usage_batch_shared s ON s.batch_id = e.batch_id;
