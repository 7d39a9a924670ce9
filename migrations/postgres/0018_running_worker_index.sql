-- The index of the running runs by worker, (namespace, worker_id) WHERE status = 'running',
-- could also serve the count of a key's running runs (namespace only, every running run of
-- the namespace filtered by key), the trap 0017 closed for the index by queue: when the
-- statistics had seen no running run (a backlog enqueued and analyzed before its workers
-- started), the planner chose it over `workflow_runs_key_running`, and each claim of keyed
-- runs read every running run of the namespace once per candidate run (a key-per-run drain
-- of 1,000 runs spent most of its claims' time there). With `worker_id IS NOT NULL` in its
-- predicate (always true of a running run), only a query that names the worker can use it:
-- the orphan search of the claim and the release of a stopping worker's runs.
DROP INDEX tasks.workflow_runs_running_worker;
CREATE INDEX workflow_runs_running_worker
    ON tasks.workflow_runs (namespace, worker_id)
    WHERE status = 'running' AND worker_id IS NOT NULL;
