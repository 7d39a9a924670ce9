-- Flow control: priorities and per-key concurrency limits; see the Postgres
-- migration 0007_flow_control.sql. SQLite has one writer, so a claim counts a key's running
-- runs under the write lock and needs no per-key row.
ALTER TABLE tasks_workflow_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks_workflow_runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN concurrency_limit INTEGER
    CHECK (concurrency_limit IS NULL OR concurrency_limit >= 1);

CREATE INDEX tasks_workflow_runs_claim_priority
    ON tasks_workflow_runs (namespace, priority DESC, available_at, created_at)
    WHERE status = 'pending';

CREATE INDEX tasks_workflow_runs_key_running
    ON tasks_workflow_runs (namespace, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
