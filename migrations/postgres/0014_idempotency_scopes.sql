-- Idempotency scopes: how long a run holds its idempotency key.
-- NULL scope: for ever (every run before this migration). 'while_active': until the run has
-- finished. 'ttl': until idempotency_expires_at. A start whose key is held by a run whose
-- scope has lapsed moves the key to released_idempotency_key on that run, then inserts.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN idempotency_scope TEXT
        CHECK (idempotency_scope IN ('while_active', 'ttl')),
    ADD COLUMN idempotency_expires_at TIMESTAMPTZ,
    ADD COLUMN released_idempotency_key TEXT,
    ADD CONSTRAINT workflow_runs_idempotency_ttl
        CHECK ((idempotency_scope = 'ttl') = (idempotency_expires_at IS NOT NULL));
