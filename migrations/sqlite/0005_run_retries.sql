-- When an operator last retried the run (client.retry): replay ignores the step failures
-- recorded before this instant, so retried steps run again with a fresh attempt budget.
ALTER TABLE tasks_workflow_runs ADD COLUMN retried_at TEXT;
-- A forked run (client.fork) records the run and the step it was forked from.
ALTER TABLE tasks_workflow_runs ADD COLUMN forked_from_run_id TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN forked_from_step TEXT;
