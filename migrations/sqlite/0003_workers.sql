-- Worker liveness: one row per live worker and namespace, rewritten by the worker's heartbeat
-- (about once a second) instead of a lease extension per run. A worker whose row went stale
-- (`stale_at` passed) is presumed dead, and the runs it holds are claimable at once instead of
-- when their leases expire. A worker without a row keeps the lease-only behaviour. Timestamps
-- use the fixed-width text format of 0001_initial.sql.
CREATE TABLE tasks_workers (
    namespace   TEXT NOT NULL,
    worker_id   TEXT NOT NULL,
    beat_at     TEXT NOT NULL,
    stale_at    TEXT NOT NULL,
    PRIMARY KEY (namespace, worker_id)
);

CREATE INDEX tasks_workers_stale ON tasks_workers (namespace, stale_at);

CREATE INDEX tasks_workflow_runs_running_worker
    ON tasks_workflow_runs (namespace, worker_id)
    WHERE status = 'running';
