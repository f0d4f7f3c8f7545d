-- A batch's items are inserted with it, in its transaction, and deleted with it by the statements that delete
-- batches (app/batches/store.py): the foreign key's per-row check was half the cost of storing a batch's items.
ALTER TABLE batch_items DROP CONSTRAINT IF EXISTS batch_items_batch_id_fkey;
