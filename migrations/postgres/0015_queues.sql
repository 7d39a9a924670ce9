-- Named queues and queue limits.
--
-- `queue`: the queue a run belongs to ('default' when the start named none, and for every
-- run before this migration). A worker may serve chosen queues only; its claim reads the
-- pending runs of each served queue through `workflow_runs_claim_queue`.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';

-- Pending runs without a concurrency key, per queue, in claim order: the claim of a worker
-- that serves chosen queues, and the claim of a queue with a limit, read them in index
-- order up to what they may take.
CREATE INDEX workflow_runs_claim_queue
    ON tasks.workflow_runs (namespace, queue, priority DESC, available_at, created_at)
    WHERE status = 'pending' AND concurrency_key IS NULL;
-- The slots a queue holds: its running runs.
CREATE INDEX workflow_runs_queue_running
    ON tasks.workflow_runs (namespace, queue)
    WHERE status = 'running';

-- The queues configured in a namespace, which every worker's claim reads. A queue without a
-- row has no limit.
--
-- `concurrency`: at most this many runs of the queue running at once, across every worker
-- (a sleeping, paused or pending run holds no slot). `rate_limit` / `rate_period_ms`: at
-- most `rate_limit` runs of the queue start (are claimed for their first execution) per
-- window of `rate_period_ms`; `window_start` / `window_starts` count the starts of the
-- current fixed window. `key_rate_limit` / `key_rate_period_ms`: the same for each
-- concurrency key of the queue's runs, counted on the key's row in `concurrency_keys`. `claims` is changed by every claim that takes runs of a queue with a
-- limit, like `concurrency_keys.claims`: a claim takes runs of such a queue only when the
-- row it locked is the row its snapshot saw.
CREATE TABLE tasks.queues (
    namespace       TEXT        NOT NULL,
    name            TEXT        NOT NULL,
    concurrency     INTEGER     CHECK (concurrency >= 1),
    rate_limit      INTEGER     CHECK (rate_limit >= 1),
    rate_period_ms  BIGINT      CHECK (rate_period_ms >= 1),
    key_rate_limit      INTEGER CHECK (key_rate_limit >= 1),
    key_rate_period_ms  BIGINT  CHECK (key_rate_period_ms >= 1),
    window_start    TIMESTAMPTZ,
    window_starts   INTEGER     NOT NULL DEFAULT 0,
    claims          BIGINT      NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name),
    CONSTRAINT queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL)),
    CONSTRAINT queues_key_rate_check
        CHECK ((key_rate_limit IS NULL) = (key_rate_period_ms IS NULL))
);

-- The rate window of each key (see `queues.key_rate_limit`): written by the claims that
-- start runs of the key in a queue with a per-key rate limit.
ALTER TABLE tasks.concurrency_keys
    ADD COLUMN window_start  TIMESTAMPTZ,
    ADD COLUMN window_starts INTEGER NOT NULL DEFAULT 0;
