-- The index of a queue's running runs, (namespace, queue) WHERE status = 'running', could
-- also serve the count of a key's running runs (namespace only, every running run of the
-- namespace filtered by key), and the planner chose it over `workflow_runs_key_running`
-- when the statistics had seen no running run (a fresh table): each claim then counted a
-- key's slots by reading every running run of the namespace, once per candidate run. With
-- `queue IS NOT NULL` in its predicate (always true: the column is NOT NULL), only a query
-- that names the queue can use it.
DROP INDEX tasks.workflow_runs_queue_running;
CREATE INDEX workflow_runs_queue_running
    ON tasks.workflow_runs (namespace, queue)
    WHERE status = 'running' AND queue IS NOT NULL;
