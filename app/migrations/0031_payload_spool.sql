-- The S3 payload backend's response spool (app/payload_s3_spool.py): the responses a worker process kept for a
-- batch between two group commits, one row per batch per commit, made durable here before the items' final states
-- commit (one Postgres transaction, where an S3 PUT per commit cost ~3 ms of CPU between boto3 and the server).
-- The process packs its rows into one object of the bucket later (app/payload_s3_packs.py) and deletes them; rows a
-- process left (it died before packing them) are packed by another process once they are ORPHAN_AGE_S old. Readers
-- look here for a segment not packed yet. No key to batches: a batch's rows go with its payloads (remove_batch).
CREATE TABLE payload_spool (
    batch_id uuid NOT NULL,
    name text NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (batch_id, name)
);

-- Orphans are found by age.
CREATE INDEX payload_spool_created ON payload_spool (created_at);
