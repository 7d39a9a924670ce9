-- Published state; see the Postgres migration 0011_published_state.sql.
-- Encodings as in 0001_initial.sql.

-- Publications, and patch markers (`ctx.patched`), are step attempts of their own
-- kinds. SQLite cannot change a CHECK
-- constraint in place, so the table is rebuilt (create, copy, drop, rename, index), as in
-- 0004_events.sql. Dropping the old table runs its ON DELETE SET NULL actions, which would
-- clear the parent step of every child run: the links are saved first and restored after
-- the rename.
PRAGMA defer_foreign_keys = ON;

CREATE TEMP TABLE tasks_saved_parent_steps AS
    SELECT namespace, id, parent_step_attempt_namespace, parent_step_attempt_id
      FROM tasks_workflow_runs
     WHERE parent_step_attempt_id IS NOT NULL;

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
    CONSTRAINT step_attempts_kind_check CHECK (kind IN
        ('function', 'sleep', 'event', 'child', 'state', 'patch'))
);

INSERT INTO tasks_step_attempts_new SELECT * FROM tasks_step_attempts;
DROP TABLE tasks_step_attempts;
ALTER TABLE tasks_step_attempts_new RENAME TO tasks_step_attempts;

CREATE INDEX tasks_step_attempts_run_created
    ON tasks_step_attempts (namespace, workflow_run_id, created_at, id);
CREATE INDEX tasks_step_attempts_child_run
    ON tasks_step_attempts (child_workflow_run_namespace, child_workflow_run_id)
    WHERE child_workflow_run_id IS NOT NULL;

UPDATE tasks_workflow_runs
   SET parent_step_attempt_namespace = (
           SELECT s.parent_step_attempt_namespace FROM tasks_saved_parent_steps s
            WHERE s.namespace = tasks_workflow_runs.namespace AND s.id = tasks_workflow_runs.id),
       parent_step_attempt_id = (
           SELECT s.parent_step_attempt_id FROM tasks_saved_parent_steps s
            WHERE s.namespace = tasks_workflow_runs.namespace AND s.id = tasks_workflow_runs.id)
 WHERE EXISTS (
           SELECT 1 FROM tasks_saved_parent_steps s
            WHERE s.namespace = tasks_workflow_runs.namespace AND s.id = tasks_workflow_runs.id);

DROP TABLE tasks_saved_parent_steps;

-- Deleted with its run (a purge), like the run's step attempts and events.
CREATE TABLE tasks_run_state (
    namespace        TEXT    NOT NULL,
    workflow_run_id  TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    value            TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    updated_at       TEXT    NOT NULL,
    PRIMARY KEY (namespace, workflow_run_id, key),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks_workflow_runs (namespace, id) ON DELETE CASCADE,
    CONSTRAINT run_state_version_check CHECK (version > 0)
);
