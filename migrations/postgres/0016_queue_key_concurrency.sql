-- A queue's concurrency limit per key: at most `key_concurrency` runs of one
-- concurrency key running at once, for the keyed runs of the queue. A keyed run of the queue
-- is claimed only while its key's running runs (counted across the namespace, through
-- `workflow_runs_key_running`, as for the run's own `concurrency_limit`) are fewer than the
-- smaller of its own limit and the queue's. NULL: no such limit.
ALTER TABLE tasks.queues
    ADD COLUMN key_concurrency INTEGER CHECK (key_concurrency >= 1);
