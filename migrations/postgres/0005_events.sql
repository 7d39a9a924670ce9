-- Events sent to a run: a FIFO mailbox per (run, topic), consumed by the run's
-- event waits, which are step attempts of their own kind.

-- Event waits (and, later, child starts) are step attempts of their own kinds.
ALTER TABLE tasks.step_attempts DROP CONSTRAINT step_attempts_kind_check;
ALTER TABLE tasks.step_attempts ADD CONSTRAINT step_attempts_kind_check
    CHECK (kind IN ('function', 'sleep', 'event', 'child'));

-- The topic a sleeping run waits on: a send on this topic makes the run available at once.
ALTER TABLE tasks.workflow_runs ADD COLUMN wait_topic TEXT;

CREATE TABLE tasks.events (
    namespace        TEXT        NOT NULL,
    id               UUID        NOT NULL,
    workflow_run_id  UUID        NOT NULL,
    topic            TEXT        NOT NULL,
    payload          JSONB       NOT NULL,
    dedup_key        TEXT,
    consumed_by      TEXT,
    consumed_at      TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, id),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks.workflow_runs (namespace, id) ON DELETE CASCADE
);

-- A second send with the same deduplication key stores nothing.
CREATE UNIQUE INDEX events_dedup
    ON tasks.events (namespace, workflow_run_id, topic, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- The mailbox: the oldest unconsumed event of (run, topic).
CREATE INDEX events_mailbox
    ON tasks.events (namespace, workflow_run_id, topic, created_at, id)
    WHERE consumed_at IS NULL;

-- A wait (one step name of a run) consumes at most one event.
CREATE UNIQUE INDEX events_consumed_by
    ON tasks.events (namespace, workflow_run_id, consumed_by)
    WHERE consumed_by IS NOT NULL;
