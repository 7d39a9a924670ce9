-- Events sent to a run: a FIFO mailbox per (run, topic), consumed by the run's
-- event waits, which are step attempts of their own kind. Encodings as in 0001_initial.sql.

-- Event waits (and, later, child starts) are step attempts of their own kinds. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt (the documented procedure:
-- create, copy, drop, rename, index). Dropping the old table clears the parent links of
-- child runs (ON DELETE SET NULL); no run has one before child workflows exist.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE tasks_step_attempts_new (
    namespace                       TEXT    NOT NULL,
    id                              TEXT    NOT NULL,
    workflow_run_id                 TEXT    NOT NULL,
    step_name                       TEXT    NOT NULL,
    kind                            TEXT    NOT NULL,
    status                          TEXT    NOT NULL,
    config                          TEXT    NOT NULL DEFAULT '{}',
    context                         TEXT,
    output                          TEXT,
    error                           TEXT,
    child_workflow_run_namespace    TEXT,
    child_workflow_run_id           TEXT,
    started_at                      TEXT,
    finished_at                     TEXT,
    created_at                      TEXT    NOT NULL,
    updated_at                      TEXT    NOT NULL,
    PRIMARY KEY (namespace, id),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks_workflow_runs (namespace, id) ON DELETE CASCADE,
    CONSTRAINT step_attempts_status_check CHECK (status IN
        ('running', 'completed', 'failed', 'paused', 'canceled')),
    CONSTRAINT step_attempts_kind_check CHECK (kind IN ('function', 'sleep', 'event', 'child'))
);

INSERT INTO tasks_step_attempts_new SELECT * FROM tasks_step_attempts;
DROP TABLE tasks_step_attempts;
ALTER TABLE tasks_step_attempts_new RENAME TO tasks_step_attempts;

CREATE INDEX tasks_step_attempts_run_created
    ON tasks_step_attempts (namespace, workflow_run_id, created_at, id);

-- The topic a sleeping run waits on: a send on this topic makes the run available at once.
ALTER TABLE tasks_workflow_runs ADD COLUMN wait_topic TEXT;

CREATE TABLE tasks_events (
    namespace        TEXT NOT NULL,
    id               TEXT NOT NULL,
    workflow_run_id  TEXT NOT NULL,
    topic            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    dedup_key        TEXT,
    consumed_by      TEXT,
    consumed_at      TEXT,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (namespace, id),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks_workflow_runs (namespace, id) ON DELETE CASCADE
);

-- A second send with the same deduplication key stores nothing.
CREATE UNIQUE INDEX tasks_events_dedup
    ON tasks_events (namespace, workflow_run_id, topic, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- The mailbox: the oldest unconsumed event of (run, topic).
CREATE INDEX tasks_events_mailbox
    ON tasks_events (namespace, workflow_run_id, topic, created_at, id)
    WHERE consumed_at IS NULL;

-- A wait (one step name of a run) consumes at most one event.
CREATE UNIQUE INDEX tasks_events_consumed_by
    ON tasks_events (namespace, workflow_run_id, consumed_by)
    WHERE consumed_by IS NOT NULL;
