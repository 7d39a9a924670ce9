-- tasks on SQLite: workflow runs and step attempts.
--
-- The same tables and columns as the Postgres schema (migrations/0001_initial.sql), adapted
-- to SQLite. SQLite has no schemas, so every table of ours carries the `tasks_` prefix
-- instead, which keeps an application's own tables in the same file untouched.
--
-- Types:
-- * ids (UUIDs) are TEXT in the canonical lowercase hyphenated form, whose text order is the
--   byte order Postgres sorts UUIDs in;
-- * timestamps are TEXT in the fixed-width UTC format `YYYY-MM-DDTHH:MM:SS.ffffffZ`
--   (microseconds), so that text comparison is time order and cursors are exact;
-- * JSON documents are TEXT.

CREATE TABLE tasks_workflow_runs (
    namespace                       TEXT    NOT NULL,
    id                              TEXT    NOT NULL,
    workflow_name                   TEXT    NOT NULL,
    version                         TEXT,
    status                          TEXT    NOT NULL,
    idempotency_key                 TEXT,
    config                          TEXT    NOT NULL DEFAULT '{}',
    context                         TEXT,
    input                           TEXT,
    output                          TEXT,
    error                           TEXT,
    attempts                        INTEGER NOT NULL DEFAULT 0,
    parent_step_attempt_namespace   TEXT,
    parent_step_attempt_id          TEXT,
    worker_id                       TEXT,
    available_at                    TEXT,
    deadline_at                     TEXT,
    started_at                      TEXT,
    finished_at                     TEXT,
    created_at                      TEXT    NOT NULL,
    updated_at                      TEXT    NOT NULL,
    PRIMARY KEY (namespace, id),
    -- Child runs point back at the step that started them.
    FOREIGN KEY (parent_step_attempt_namespace, parent_step_attempt_id)
        REFERENCES tasks_step_attempts (namespace, id) ON DELETE SET NULL,
    CONSTRAINT workflow_runs_status_check CHECK (status IN
        ('pending', 'running', 'sleeping', 'paused', 'completed', 'failed', 'canceled')),
    CONSTRAINT workflow_runs_attempts_check CHECK (attempts >= 0)
);

-- Idempotent creates: one run per (namespace, workflow, key).
CREATE UNIQUE INDEX tasks_workflow_runs_idempotency_key
    ON tasks_workflow_runs (namespace, workflow_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The claim path: live runs by availability.
CREATE INDEX tasks_workflow_runs_claim
    ON tasks_workflow_runs (namespace, available_at)
    WHERE status IN ('pending', 'running', 'sleeping');

-- Deadline expiry, checked on every claim.
CREATE INDEX tasks_workflow_runs_deadline
    ON tasks_workflow_runs (namespace, deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running', 'sleeping');

-- Listings: unfiltered, by status, by workflow name; (created_at, id) is the cursor.
CREATE INDEX tasks_workflow_runs_created
    ON tasks_workflow_runs (namespace, created_at, id);
CREATE INDEX tasks_workflow_runs_status_created
    ON tasks_workflow_runs (namespace, status, created_at, id);
CREATE INDEX tasks_workflow_runs_name_created
    ON tasks_workflow_runs (namespace, workflow_name, created_at, id);

CREATE TABLE tasks_step_attempts (
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
    CONSTRAINT step_attempts_kind_check CHECK (kind IN ('function', 'sleep'))
);

-- A run's step history, in order; also the cursor of step listings.
CREATE INDEX tasks_step_attempts_run_created
    ON tasks_step_attempts (namespace, workflow_run_id, created_at, id);
