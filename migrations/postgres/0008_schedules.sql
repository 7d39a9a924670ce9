-- Schedules: a workflow started on a cron expression in a timezone. Every
-- worker's scheduler tick fires the due slots with a compare-and-set on `next_slot`, so
-- each slot fires once however many workers run (see `tasks_runtime::schedule`).
CREATE TABLE tasks.schedules (
    namespace      TEXT        NOT NULL,
    name           TEXT        NOT NULL,
    workflow_name  TEXT        NOT NULL,
    version        TEXT,
    cron           TEXT        NOT NULL,
    timezone       TEXT        NOT NULL,
    input          JSONB       NOT NULL,
    catch_up       TEXT        NOT NULL,
    catch_up_max   INTEGER,
    paused         BOOLEAN     NOT NULL DEFAULT FALSE,
    -- NULL: the cron expression has no slot left.
    next_slot      TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name),
    CONSTRAINT schedules_catch_up_check CHECK (
        (catch_up IN ('skip', 'latest') AND catch_up_max IS NULL)
        OR (catch_up = 'all' AND catch_up_max >= 1))
);

-- The due schedules of a namespace, earliest first.
CREATE INDEX schedules_due
    ON tasks.schedules (namespace, next_slot)
    WHERE NOT paused AND next_slot IS NOT NULL;
