-- Continue-as-new: the links of a lineage; see the Postgres migration
-- 0021_continue_as_new.sql.
ALTER TABLE tasks_workflow_runs ADD COLUMN lineage_root_id TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN continued_from_run_id TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN continued_as_run_id TEXT;

CREATE INDEX tasks_workflow_runs_lineage
    ON tasks_workflow_runs (namespace, lineage_root_id)
    WHERE lineage_root_id IS NOT NULL;
