-- Items a batch's expiry stopped (error_code batch_expired), counted by the group commit beside the counts per
-- state (each worker process in its own row), so the OpenAI and Anthropic views of a batch read its few progress
-- rows instead of counting its items on every poll.
ALTER TABLE batch_progress ADD COLUMN expired integer NOT NULL DEFAULT 0;
INSERT INTO batch_progress AS p (batch_id, counter, expired)
SELECT batch_id, '', count(*) FROM batch_items WHERE error_code = 'batch_expired' GROUP BY batch_id
ON CONFLICT (batch_id, counter) DO UPDATE SET expired = p.expired + excluded.expired;

-- Output and error files' lines now carry each response as stored (spliced, not decoded and encoded again): the
-- sizes measured from the older lines are measured again on first need.
UPDATE files SET bytes = NULL WHERE kind <> 'upload';
