-- OpenAI's `expires_after` (an upload) and `output_expires_after` (a batch's output and error files): the file
-- expires this many seconds after its anchor (an upload's created_at, an output or error file's batch finished_at),
-- then it is no longer visible; NULL = kept until deleted.
ALTER TABLE files ADD COLUMN expires_after_s integer CHECK (expires_after_s > 0);
