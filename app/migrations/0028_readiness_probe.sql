-- One row /readyz updates to prove that a write commits now: a commit that writes WAL waits for the synchronous
-- standby (a transaction id alone does not), so a probe here sees replication that stopped acknowledging.
CREATE TABLE readiness_probe (
    id integer PRIMARY KEY CHECK (id = 1),
    probed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO readiness_probe (id) VALUES (1);
