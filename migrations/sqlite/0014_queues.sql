-- Named queues and queue limits; see the Postgres migration 0015_queues.sql.
-- SQLite has one writer, so a claim counts a queue's running runs under the write lock and
-- needs no `claims` counter. Timestamps as text, as in 0001_initial.sql.
ALTER TABLE tasks_workflow_runs ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';

CREATE INDEX tasks_workflow_runs_claim_queue
    ON tasks_workflow_runs (namespace, queue, priority DESC, available_at, created_at)
    WHERE status = 'pending';
CREATE INDEX tasks_workflow_runs_queue_running
    ON tasks_workflow_runs (namespace, queue)
    WHERE status = 'running';

CREATE TABLE tasks_queues (
    namespace       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    concurrency     INTEGER CHECK (concurrency >= 1),
    rate_limit      INTEGER CHECK (rate_limit >= 1),
    rate_period_ms  INTEGER CHECK (rate_period_ms >= 1),
    key_rate_limit      INTEGER CHECK (key_rate_limit >= 1),
    key_rate_period_ms  INTEGER CHECK (key_rate_period_ms >= 1),
    window_start    TEXT,
    window_starts   INTEGER NOT NULL DEFAULT 0,
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL,
    PRIMARY KEY (namespace, name),
    CONSTRAINT queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL)),
    CONSTRAINT queues_key_rate_check
        CHECK ((key_rate_limit IS NULL) = (key_rate_period_ms IS NULL))
);

-- The rate window of each concurrency key under a queue's per-key rate limit.
CREATE TABLE tasks_key_windows (
    namespace        TEXT    NOT NULL,
    concurrency_key  TEXT    NOT NULL,
    window_start     TEXT    NOT NULL,
    window_starts    INTEGER NOT NULL,
    PRIMARY KEY (namespace, concurrency_key)
);
