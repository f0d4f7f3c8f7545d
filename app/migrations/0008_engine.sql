-- The batch engine without per-item index churn.
-- Item updates (claim, final state) must stay HOT: no index may cover a column that changes per item, so the
-- indexes on state, worker_id and published_at go. What they served moves to small tables and per-batch columns:
--   * counts per state: batch_progress, one row per (batch, counter) where each worker process counts in its own
--     row (no lock contention between processes); queued = total - everything counted;
--   * the outbox: batches.published_upto, items [0, published_upto) have been published, in idx order;
--   * the dispatch window: published_upto - final items, per unfinished batch.
DROP INDEX IF EXISTS batch_items_state;
DROP INDEX IF EXISTS batch_items_running;
DROP INDEX IF EXISTS batch_items_unpublished;
DROP INDEX IF EXISTS batch_items_in_flight;
ALTER TABLE batch_items SET (fillfactor = 80);  -- room on each page for the HOT versions of its items

CREATE TABLE batch_progress (
    batch_id uuid NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    counter text NOT NULL,           -- who counts here: a worker process, or '' for the API (cancel, old rows)
    running integer NOT NULL DEFAULT 0,
    completed integer NOT NULL DEFAULT 0,
    discarded integer NOT NULL DEFAULT 0,
    cancelled integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, counter)
);
INSERT INTO batch_progress (batch_id, counter, running, completed, discarded, cancelled)
SELECT batch_id, '', count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'discarded'), count(*) FILTER (WHERE state = 'cancelled')
FROM batch_items GROUP BY batch_id;

ALTER TABLE batches ADD COLUMN published_upto integer NOT NULL DEFAULT 0;
UPDATE batches b SET published_upto = coalesce(
    (SELECT min(idx) FROM batch_items i WHERE i.batch_id = b.id AND i.published_at IS NULL AND i.state = 'queued'),
    b.total);
-- Batches whose running items the reaper looks at: those not finished yet.
ALTER TABLE workers ADD COLUMN threads integer NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN last_published_at timestamptz;  -- the dispatcher's last publish for this batch
