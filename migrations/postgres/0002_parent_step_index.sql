-- Deleting a step attempt checks the child runs that point at it (workflow_runs_parent_step_fk).
-- Without an index on the referencing columns every such check scans workflow_runs, which
-- made cascading deletes of old runs take seconds per hundred steps.
CREATE INDEX workflow_runs_parent_step
    ON tasks.workflow_runs (parent_step_attempt_namespace, parent_step_attempt_id)
    WHERE parent_step_attempt_id IS NOT NULL;
