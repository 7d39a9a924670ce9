-- Deleting a step attempt checks the child runs that point at it; index the referencing
-- columns so that check does not scan tasks_workflow_runs.
CREATE INDEX tasks_workflow_runs_parent_step
    ON tasks_workflow_runs (parent_step_attempt_namespace, parent_step_attempt_id)
    WHERE parent_step_attempt_id IS NOT NULL;
