-- Schedules; see the Postgres migration 0008_schedules.sql. Encodings as in
-- 0001_initial.sql (timestamps and JSON as text, booleans as 0/1).
CREATE TABLE tasks_schedules (
    namespace      TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    workflow_name  TEXT    NOT NULL,
    version        TEXT,
    cron           TEXT    NOT NULL,
    timezone       TEXT    NOT NULL,
    input          TEXT    NOT NULL,
    catch_up       TEXT    NOT NULL,
    catch_up_max   INTEGER,
    paused         INTEGER NOT NULL DEFAULT 0,
    next_slot      TEXT,
    created_at     TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL,
    PRIMARY KEY (namespace, name),
    CONSTRAINT schedules_catch_up_check CHECK (
        (catch_up IN ('skip', 'latest') AND catch_up_max IS NULL)
        OR (catch_up = 'all' AND catch_up_max >= 1))
);

CREATE INDEX tasks_schedules_due
    ON tasks_schedules (namespace, next_slot)
    WHERE paused = 0 AND next_slot IS NOT NULL;
