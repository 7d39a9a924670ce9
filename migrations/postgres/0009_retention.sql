-- Retention: purging terminal runs in bounded batches, and the lease that makes
-- a worker fleet purge once per period.
--
-- Every foreign key that points at a run or a step attempt has its ON DELETE action
-- (step_attempts and events cascade from their run; a child run's parent step is set to NULL)
-- and now an index on its referencing columns, so that the cascade of a deleted run is an
-- index lookup per table instead of a scan. The events mailbox and deduplication indexes are
-- partial, so the cascade from a run to its events had none.
CREATE INDEX events_run
    ON tasks.events (namespace, workflow_run_id);

-- The purge's candidates: terminal runs of a namespace by status and finishing time.
CREATE INDEX workflow_runs_purge
    ON tasks.workflow_runs (namespace, status, finished_at)
    WHERE status IN ('completed', 'failed', 'canceled');

-- Links that are not foreign keys: a fork names the run it was forked from, and a step that
-- started a child run names the child. A purge clears both when it deletes the run they
-- name; these indexes find them.
CREATE INDEX workflow_runs_forked_from
    ON tasks.workflow_runs (namespace, forked_from_run_id)
    WHERE forked_from_run_id IS NOT NULL;
CREATE INDEX step_attempts_child_run
    ON tasks.step_attempts (child_workflow_run_namespace, child_workflow_run_id)
    WHERE child_workflow_run_id IS NOT NULL;

-- One row per namespace: the worker that last took the periodic purge, and when the next
-- one is due. A worker purges only when it moves `next_at` forward itself, so N workers
-- purge once per period between them; `turns` counts the purges taken.
CREATE TABLE tasks.retention_leases (
    namespace   TEXT        NOT NULL PRIMARY KEY,
    worker_id   TEXT        NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL,
    next_at     TIMESTAMPTZ NOT NULL,
    turns       BIGINT      NOT NULL DEFAULT 0
);
