-- Child workflows: a run started by a step of another run.
--
-- `parent_run_id`: the run whose step started this one (its step is
-- `parent_step_attempt_id`, already there since 0001). Listings filter on it.
-- `cancel_with_parent`: canceling the parent cancels this run too (the default policy,
-- "cascade"); false is "detach".
-- `awaiting_children`: on a parent parked until its awaited children finish, how many of
-- them were still live when it parked. Every child that finishes takes one off, and the one
-- that brings it to zero makes the parked parent available.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN parent_run_id      UUID,
    ADD COLUMN cancel_with_parent BOOLEAN NOT NULL DEFAULT true,
    ADD COLUMN awaiting_children  INTEGER NOT NULL DEFAULT 0;

-- The children of a run, in listing order (the parent filter of listings, the cascade of a
-- cancel).
CREATE INDEX workflow_runs_parent_created
    ON tasks.workflow_runs (namespace, parent_run_id, created_at, id)
    WHERE parent_run_id IS NOT NULL;
