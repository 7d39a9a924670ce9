-- Idempotency scopes; see the Postgres migration 0014_idempotency_scopes.sql.
ALTER TABLE tasks_workflow_runs ADD COLUMN idempotency_scope TEXT
    CHECK (idempotency_scope IN ('while_active', 'ttl'));
ALTER TABLE tasks_workflow_runs ADD COLUMN idempotency_expires_at TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN released_idempotency_key TEXT;
