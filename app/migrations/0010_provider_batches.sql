-- The OpenAI- and Anthropic-compatible batch APIs: views over the same batches.
-- Which API created a batch decides the format it is read and listed in by default; Relay's own view stays
-- reachable for every batch. `endpoint` and `input_file_id` are the OpenAI create's fields.
ALTER TABLE batches
    ADD COLUMN api text NOT NULL DEFAULT 'relay' CHECK (api IN ('relay', 'openai', 'anthropic')),
    ADD COLUMN endpoint text,
    ADD COLUMN input_file_id uuid,
    ADD COLUMN completion_window text,
    ADD COLUMN expires_at timestamptz;     -- only when RELAY_PROVIDER_BATCH_EXPIRY_S is set
CREATE INDEX batches_owner_api ON batches (owner, api, created_at DESC, id DESC);
CREATE INDEX batches_expiring ON batches (expires_at) WHERE expires_at IS NOT NULL AND finished_at IS NULL;

-- The caller's id of each request (OpenAI's and Anthropic's `custom_id`); NULL for Relay's own batches.
-- Not indexed, so the item updates stay HOT.
ALTER TABLE batch_items ADD COLUMN custom_id text;
ALTER TABLE usage_events ADD COLUMN custom_id text;

-- Files of the OpenAI Files API. An upload's bytes live under RELAY_BATCH_PAYLOAD_DIR/files/<id>; a batch's
-- output and error files have no bytes of their own (generated from its results when read): they are listed once
-- the batch has finished and holds at least one line of that kind. `bytes` of those is measured on first need.
CREATE TABLE files (
    id uuid PRIMARY KEY,
    owner text NOT NULL,             -- the same access key as batches.owner
    purpose text NOT NULL CHECK (purpose IN ('batch', 'batch_output')),
    kind text NOT NULL CHECK (kind IN ('upload', 'output', 'error')),
    filename text NOT NULL,
    bytes bigint,
    batch_id uuid REFERENCES batches(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'upload') = (batch_id IS NULL))
);
CREATE INDEX files_owner ON files (owner, created_at DESC, id DESC);
CREATE UNIQUE INDEX files_batch_kind ON files (batch_id, kind) WHERE batch_id IS NOT NULL;
