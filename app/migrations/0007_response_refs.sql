-- Where an item's response lives in the payload store: a segment file under the batch's folder, and the byte range
-- in it. NULL for items without a stored response, and for batches stored in the older one-file-per-item layout.
-- None of these columns is indexed, so setting them with the final state keeps the update HOT.
ALTER TABLE batch_items
    ADD COLUMN response_segment text,
    ADD COLUMN response_offset bigint,
    ADD COLUMN response_length integer;
