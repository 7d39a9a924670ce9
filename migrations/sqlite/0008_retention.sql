-- Retention: purging terminal runs in bounded batches, and the lease that makes
-- a worker fleet purge once per period. Encodings as in 0001_initial.sql.
--
-- Every foreign key that points at a run or a step attempt has its ON DELETE action and now
-- an index on its referencing columns: the events mailbox and deduplication indexes are
-- partial, so deleting a run's events had none.
CREATE INDEX tasks_events_run
    ON tasks_events (namespace, workflow_run_id);

-- The purge's candidates: terminal runs of a namespace by status and finishing time.
CREATE INDEX tasks_workflow_runs_purge
    ON tasks_workflow_runs (namespace, status, finished_at)
    WHERE status IN ('completed', 'failed', 'canceled');

-- Links that are not foreign keys, cleared by a purge of the run they name.
CREATE INDEX tasks_workflow_runs_forked_from
    ON tasks_workflow_runs (namespace, forked_from_run_id)
    WHERE forked_from_run_id IS NOT NULL;
CREATE INDEX tasks_step_attempts_child_run
    ON tasks_step_attempts (child_workflow_run_namespace, child_workflow_run_id)
    WHERE child_workflow_run_id IS NOT NULL;

-- One row per namespace: who took the periodic purge last and when the next one is due.
CREATE TABLE tasks_retention_leases (
    namespace   TEXT    NOT NULL PRIMARY KEY,
    worker_id   TEXT    NOT NULL,
    taken_at    TEXT    NOT NULL,
    next_at     TEXT    NOT NULL,
    turns       INTEGER NOT NULL DEFAULT 0
);
