-- A spend cap that holds (issue #35). A capped batch's `max_cost_mode`: 'hard' (the default of a new cap) reserves
-- each item's cost bound against the cap before the item starts and releases what its answer did not use, so the
-- recorded cost never passes the cap; 'soft' is the earlier rule (no item starts once the recorded cost reached the
-- cap; items in flight may pass it). NULL: no cap, or a batch capped before this migration (counted as 'soft').
ALTER TABLE batches ADD COLUMN max_cost_mode text CHECK (max_cost_mode IN ('hard', 'soft'));

-- The bound reserved when a hard-capped batch's item was claimed (nano-dollars); released by its final state.
ALTER TABLE batch_items ADD COLUMN reserved_nanos bigint;

-- What the running items of a batch hold reserved, summed beside the recorded cost (each claimer and group writer
-- in its own row, like the counts): recorded cost + reserved never passes a hard cap.
ALTER TABLE batch_progress ADD COLUMN reserved_nanos bigint NOT NULL DEFAULT 0;
