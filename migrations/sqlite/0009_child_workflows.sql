-- Child workflows; see the Postgres migration 0010_child_workflows.sql.
ALTER TABLE tasks_workflow_runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN cancel_with_parent INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tasks_workflow_runs ADD COLUMN awaiting_children INTEGER NOT NULL DEFAULT 0;

CREATE INDEX tasks_workflow_runs_parent_created
    ON tasks_workflow_runs (namespace, parent_run_id, created_at, id)
    WHERE parent_run_id IS NOT NULL;
