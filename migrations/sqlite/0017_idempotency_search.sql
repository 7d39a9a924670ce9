-- An operator's search by idempotency key, of any workflow; see the Postgres migration
-- 0020_idempotency_search.sql.
CREATE INDEX tasks_workflow_runs_idempotency_search
    ON tasks_workflow_runs (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
