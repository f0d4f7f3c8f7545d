-- Idempotency keys (issue #35): the first answer of a create sent with an `Idempotency-Key` header, kept 24 h per
-- caller, so a retry of the same request answers it again instead of creating a second batch or file. A row is
-- inserted in the transaction that runs the create and committed with its answer: a concurrent retry with the same
-- key waits on the unique index until then, and a create that failed leaves no row (the key may be used again).
CREATE TABLE idempotency_keys (
    owner text NOT NULL,               -- the caller's owner (a batch's `owner`): keys of others never meet
    key text NOT NULL,
    fingerprint bytea NOT NULL,        -- sha256 of the method, path and body: a reuse with another request is a 409
    status smallint NOT NULL,
    content_type text NOT NULL,
    body bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
