-- An operator's search by idempotency key, of any workflow: the unique index of keys leads
-- with the workflow name, so a search that names no workflow could not use it and would
-- read every run of the namespace.
CREATE INDEX workflow_runs_idempotency_search
    ON tasks.workflow_runs (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
