-- Published state: the latest value a run published under each key, with a
-- version that grows by one with every publication. A publication is also a step attempt of
-- its own kind, so a replay finds it and publishes nothing. Patch markers (`ctx.patched`)
-- are step attempts of their own kind too.
ALTER TABLE tasks.step_attempts DROP CONSTRAINT step_attempts_kind_check;
ALTER TABLE tasks.step_attempts ADD CONSTRAINT step_attempts_kind_check
    CHECK (kind IN ('function', 'sleep', 'event', 'child', 'state', 'patch'));

-- Deleted with its run (a purge), like the run's step attempts and events.
CREATE TABLE tasks.run_state (
    namespace        TEXT        NOT NULL,
    workflow_run_id  UUID        NOT NULL,
    key              TEXT        NOT NULL,
    value            JSONB       NOT NULL,
    version          BIGINT      NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, workflow_run_id, key),
    FOREIGN KEY (namespace, workflow_run_id)
        REFERENCES tasks.workflow_runs (namespace, id) ON DELETE CASCADE,
    CONSTRAINT run_state_version_check CHECK (version > 0)
);
