-- A queue's concurrency limit per key; see the Postgres migration
-- 0016_queue_key_concurrency.sql.
ALTER TABLE tasks_queues
    ADD COLUMN key_concurrency INTEGER CHECK (key_concurrency >= 1);
