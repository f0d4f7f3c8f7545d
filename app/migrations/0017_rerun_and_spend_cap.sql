-- Re-run and spend cap (issue #26).
-- A re-run is a new batch made from some items of a finished one: `rerun_of` is the batch it was made from,
-- `original_id` the first batch of the chain (itself a re-run's `rerun_of` when it is not a re-run), and each of its
-- items keeps `source_idx`, its idx in that original batch. Merged results read the original's items and every
-- re-run's by `source_idx`, the newest attempt winning. No foreign keys: a deleted original leaves its re-runs (and
-- their merged view of what is left) as they are.
ALTER TABLE batches
    ADD COLUMN rerun_of uuid,
    ADD COLUMN original_id uuid,
    ADD COLUMN max_cost_nanos bigint CHECK (max_cost_nanos > 0);   -- the spend cap, in nano-dollars
CREATE INDEX batches_original ON batches (original_id, created_at) WHERE original_id IS NOT NULL;

-- Never updated once copied, so item updates stay HOT; only re-runs' items are in the index.
ALTER TABLE batch_items ADD COLUMN source_idx integer;
CREATE INDEX batch_items_source ON batch_items (batch_id, source_idx) WHERE source_idx IS NOT NULL;

-- The recorded cost of a batch's items, summed by the group commit beside the counts (each worker process in its
-- own row), so the cap's check reads a few rows instead of every item.
ALTER TABLE batch_progress ADD COLUMN cost_nanos bigint NOT NULL DEFAULT 0;

-- The most output tokens a call of the model answers when its request sets no limit (its provider's default
-- maximum): the batch estimate's output bound for such items. NULL: not known (their cost has no upper bound).
ALTER TABLE models ADD COLUMN max_output_tokens integer CHECK (max_output_tokens > 0);
