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

-- Pages of events are read newest first by (created_at, id): the index on created_at alone (8 bytes a key where the
-- pair took 16) serves them, the cursor's created_at bounding the scan (app/usage/store.py, list_events) and the
-- ties sorted on id; time-range summaries read it as before.
DROP INDEX IF EXISTS usage_events_created;
CREATE INDEX usage_events_created ON usage_events (created_at);

-- A batch item's event that shares its attribution has no credential id of its own: it is found through its batch.
DROP INDEX IF EXISTS usage_events_credential;
CREATE INDEX usage_events_credential ON usage_events (credential_id, created_at) WHERE credential_id IS NOT NULL;

-- Every event as the readers know it (app/usage/store.py and the others read this, never the table): a batch item's
-- request id `<batch id>:<idx>` (0029) and its batch's shared parts filled in. A reader filtering on a caller's
-- attribution reaches the table's indexes through app/usage/store.py (_attributed).
CREATE VIEW usage_events_full AS
SELECT e.id, coalesce(e.request_id, e.batch_id::text || ':' || e.batch_idx) AS request_id, e.source, e.created_at,
       e.started_at, e.duration_ms,
       CASE WHEN e.shared = 3 THEN s.route ELSE e.route END AS route,
       e.upstream_status, e.status, e.error_code,
       CASE WHEN e.shared = 3 THEN s.model_requested ELSE e.model_requested END AS model_requested,
       CASE WHEN e.shared = 3 THEN s.model_resolved ELSE e.model_resolved END AS model_resolved,
       CASE WHEN e.shared = 3 THEN s.host_id ELSE e.host_id END AS host_id,
       CASE WHEN e.shared = 3 THEN s.host_name ELSE e.host_name END AS host_name,
       CASE WHEN e.shared = 3 THEN s.binding_id ELSE e.binding_id END AS binding_id,
       CASE WHEN e.shared = 3 THEN s.adapter ELSE e.adapter END AS adapter,
       e.host_key_name,
       CASE WHEN e.shared IS NULL THEN e.credential_kind ELSE s.credential_kind END AS credential_kind,
       CASE WHEN e.shared IS NULL THEN e.credential_id ELSE s.credential_id END AS credential_id,
       CASE WHEN e.shared IS NULL THEN e.relay_key_hash ELSE s.relay_key_hash END AS relay_key_hash,
       CASE WHEN e.shared IS NULL THEN e.principal_kind ELSE s.principal_kind END AS principal_kind,
       CASE WHEN e.shared IS NULL THEN e.principal_id ELSE s.principal_id END AS principal_id,
       CASE WHEN e.shared IS NULL THEN e.policy_id ELSE s.policy_id END AS policy_id,
       CASE WHEN e.shared IS NULL THEN e.project_id ELSE s.project_id END AS project_id,
       CASE WHEN e.shared IS NULL THEN e.team_id ELSE s.team_id END AS team_id,
       e.input_tokens, e.output_tokens, e.cached_tokens, e.cost_nanos, e.attempts, e.streamed, e.batch_id,
       e.batch_idx, e.custom_id
FROM usage_events e LEFT JOIN usage_batch_shared s ON s.batch_id = e.batch_id;

-- A batch item's response segment is named `responses-<process>-<n>.seg` in every payload backend
-- (app/payload_port.py, SEGMENT_NAME): its row keeps the middle part (16 bytes where the name took 31), so that
-- its final write grows it less (docs/benchmarks.md). The one rule both ways: names that do not match are kept
-- whole, and a stored value with a '.' (every whole name, every earlier row) is a name already.
CREATE FUNCTION response_segment_code(name text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT regexp_replace(name, '^responses-([0-9a-f]+-[0-9a-f]+-[0-9]+)\.seg$', '\1') $$;
CREATE FUNCTION response_segment_name(code text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN strpos(code, '.') > 0 THEN code ELSE 'responses-' || code || '.seg' END $$;
