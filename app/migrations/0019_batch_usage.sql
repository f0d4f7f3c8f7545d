-- A finished batch's usage, summed once from its usage events and kept: the batch views (Relay's `usage`,
-- OpenAI's `usage`, the console's cost per batch) read one row instead of summing every item's event on each
-- poll. Written on the first read after the batch finished: by then every item's event is committed (an item's
-- event commits with its final state), so the sums never change again.
CREATE TABLE batch_usage (
    batch_id uuid PRIMARY KEY REFERENCES batches(id) ON DELETE CASCADE,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL,
    cost_nanos bigint,          -- NULL when no event of the batch was priced
    unpriced integer NOT NULL   -- completed items without a price
);
