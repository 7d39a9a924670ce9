-- Worker liveness: one row per live worker and namespace, rewritten by the worker's heartbeat
-- (about once a second) instead of a lease extension per run. A worker whose row went stale
-- (`stale_at` passed, by the database clock) is presumed dead, and the runs it holds are
-- claimable at once instead of when their leases expire. A worker without a row (a store
-- used directly, an older worker) keeps the lease-only behaviour.
CREATE TABLE tasks.workers (
    namespace   TEXT        NOT NULL,
    worker_id   TEXT        NOT NULL,
    beat_at     TIMESTAMPTZ NOT NULL,
    stale_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, worker_id)
);

-- Claims look for the stale workers of their namespace; heartbeats forget the stale ones
-- whose runs were all claimed.
CREATE INDEX workers_stale ON tasks.workers (namespace, stale_at);

-- The runs a stale worker holds, found by worker instead of by lease expiry.
CREATE INDEX workflow_runs_running_worker
    ON tasks.workflow_runs (namespace, worker_id)
    WHERE status = 'running';
