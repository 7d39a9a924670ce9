-- Flow control: priorities and per-key concurrency limits.
--
-- `priority`: higher is claimed first among pending runs (then `available_at`, `created_at`).
-- `concurrency_key` / `concurrency_limit`: at most `concurrency_limit` runs of one key are
-- running at once in a namespace, across every worker. A run holds its key's slot only while
-- it is running: a sleeping, paused or pending run holds none.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN priority          INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN concurrency_key   TEXT,
    ADD COLUMN concurrency_limit INTEGER,
    ADD CONSTRAINT workflow_runs_concurrency_check CHECK (
        (concurrency_key IS NULL AND concurrency_limit IS NULL)
        OR (concurrency_key IS NOT NULL AND concurrency_limit >= 1));

-- Pending runs in claim order, split by whether they carry a key: a claim reads the keyless
-- ones in index order up to its batch size, and the keyed ones in index order past the keys
-- that are full. Replaces the pending index of 0003, which had no priority.
CREATE INDEX workflow_runs_claim_free
    ON tasks.workflow_runs (namespace, priority DESC, available_at, created_at)
    WHERE status = 'pending' AND concurrency_key IS NULL;
CREATE INDEX workflow_runs_claim_keyed
    ON tasks.workflow_runs (namespace, priority DESC, available_at, created_at)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;
-- Sleeping runs with a key, whose wake-up needs a free slot.
CREATE INDEX workflow_runs_claim_keyed_due
    ON tasks.workflow_runs (namespace, available_at, created_at)
    WHERE status = 'sleeping' AND concurrency_key IS NOT NULL;
DROP INDEX tasks.workflow_runs_claim_pending;

-- The slots a key holds: its running runs.
CREATE INDEX workflow_runs_key_running
    ON tasks.workflow_runs (namespace, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;

-- One row per key, created with the key's first run and written by every claim that takes
-- runs of the key (`claims` counts them). A claim locks the rows of the keys it takes runs of
-- (SKIP LOCKED) and takes them only if the row it locked is the row its snapshot saw: then no
-- other claim of the key committed since the snapshot, so the running runs it counted are all
-- there are (or more: runs that finished since). Finishing a run never writes this row.
CREATE TABLE tasks.concurrency_keys (
    namespace        TEXT   NOT NULL,
    concurrency_key  TEXT   NOT NULL,
    claims           BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, concurrency_key)
);
