-- Fair share between owners of batches: a policy's batches get BATCH_WEIGHT times an equal share of the workers.
ALTER TABLE policies ADD COLUMN batch_weight double precision NOT NULL DEFAULT 1 CHECK (batch_weight > 0);
