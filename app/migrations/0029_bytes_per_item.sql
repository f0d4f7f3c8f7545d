-- Fewer bytes per batch item (issue #38: a soak measured ~1,040 bytes of Postgres per retained item; the split and
-- the command are in docs/benchmarks.md). Touches only columns and indexes made before 0021, so it applies after
-- any migration that adds columns to batches or batch_items.

-- Indexes built in descending order took new entries at their left edge, where a full page splits in two halves
-- that never fill again (a B-tree packs pages only at its right edge): each was twice its size. The same columns in
-- ascending order serve the same reads (a B-tree scans both ways), newest first included.
DROP INDEX IF EXISTS usage_events_created;
CREATE INDEX usage_events_created ON usage_events (created_at, id);
DROP INDEX IF EXISTS usage_events_credential;
CREATE INDEX usage_events_credential ON usage_events (credential_id, created_at);
-- It was made for inference-token readers (app/usage/store.py, _visibility: a user's own events); an admin's
-- `principal` filter on a service account now reads by time range instead.
DROP INDEX IF EXISTS usage_events_principal;
CREATE INDEX usage_events_principal ON usage_events (principal_id, created_at, id) WHERE principal_kind = 'user';
-- Time-range summaries read usage_events_created, which leads with the same column.
DROP INDEX IF EXISTS usage_events_model_time;

-- A batch item's event is named by its batch and index: its request id `<batch id>:<idx>` is no longer stored
-- (42 bytes a row) but made by the readers (app/usage/store.py). Live requests keep theirs.
ALTER TABLE usage_events ALTER COLUMN request_id DROP NOT NULL;
ALTER TABLE usage_events ADD CONSTRAINT usage_events_request_named
    CHECK (request_id IS NOT NULL OR batch_id IS NOT NULL) NOT VALID;
