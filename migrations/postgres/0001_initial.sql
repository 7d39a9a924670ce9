-- tasks: workflow runs and step attempts.
-- Everything lives in the `tasks` schema so that applications that add us to an existing
-- database keep their `public` schema and their own migration table untouched.

CREATE TABLE tasks.workflow_runs (
    namespace                       TEXT        NOT NULL,
    id                              UUID        NOT NULL,
    workflow_name                   TEXT        NOT NULL,
    version                         TEXT,
    status                          TEXT        NOT NULL,
    idempotency_key                 TEXT,
    config                          JSONB       NOT NULL DEFAULT '{}'::jsonb,
    context                         JSONB,
    input                           JSONB,
    output                          JSONB,
    error                           JSONB,
    attempts                        INTEGER     NOT NULL DEFAULT 0,
    parent_step_attempt_namespace   TEXT,
    parent_step_attempt_id          UUID,
    worker_id                       TEXT,
    available_at                    TIMESTAMPTZ,
    deadline_at                     TIMESTAMPTZ,
    started_at                      TIMESTAMPTZ,
    finished_at                     TIMESTAMPTZ,
    created_at                      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, id),
    CONSTRAINT workflow_runs_status_check CHECK (status IN
        ('pending', 'running', 'sleeping', 'paused', 'completed', 'failed', 'canceled')),
    CONSTRAINT workflow_runs_attempts_check CHECK (attempts >= 0)
);

-- Idempotent creates: one run per (namespace, workflow, key).
CREATE UNIQUE INDEX workflow_runs_idempotency_key
    ON tasks.workflow_runs (namespace, workflow_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The claim path: live runs by availability.
CREATE INDEX workflow_runs_claim
    ON tasks.workflow_runs (namespace, available_at)
    WHERE status IN ('pending', 'running', 'sleeping');

-- Deadline expiry, checked on every claim.
CREATE INDEX workflow_runs_deadline
    ON tasks.workflow_runs (namespace, deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('pending', 'running', 'sleeping');

-- Listings: unfiltered, by status, by workflow name; (created_at, id) is the cursor.
CREATE INDEX workflow_runs_created
    ON tasks.workflow_runs (namespace, created_at, id);
CREATE INDEX workflow_runs_status_created
    ON tasks.workflow_runs (namespace, status, created_at, id);
CREATE INDEX workflow_runs_name_created
    ON tasks.workflow_runs (namespace, workflow_name, created_at, id);

CREATE TABLE tasks.step_attempts (
    namespace                       TEXT        NOT NULL,
    id                              UUID        NOT NULL,
    workflow_run_id                 UUID        NOT NULL,
    step_name                       TEXT        NOT NULL,
    kind                            TEXT        NOT NULL,
    status                          TEXT        NOT NULL,
    config                          JSONB       NOT NULL DEFAULT '{}'::jsonb,
    context                         JSONB,
    output                          JSONB,
    error                           JSONB,
    child_workflow_run_namespace    TEXT,
    child_workflow_run_id           UUID,
    started_at                      TIMESTAMPTZ,
    finished_at                     TIMESTAMPTZ,
    created_at                      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at                      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, id),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks.workflow_runs (namespace, id) ON DELETE CASCADE,
    CONSTRAINT step_attempts_status_check CHECK (status IN
        ('running', 'completed', 'failed', 'paused', 'canceled')),
    CONSTRAINT step_attempts_kind_check CHECK (kind IN ('function', 'sleep'))
);

-- A run's step history, in order; also the cursor of step listings.
CREATE INDEX step_attempts_run_created
    ON tasks.step_attempts (namespace, workflow_run_id, created_at, id);

-- Child runs point back at the step that started them.
ALTER TABLE tasks.workflow_runs
    ADD CONSTRAINT workflow_runs_parent_step_fk
    FOREIGN KEY (parent_step_attempt_namespace, parent_step_attempt_id)
    REFERENCES tasks.step_attempts (namespace, id) ON DELETE SET NULL;
