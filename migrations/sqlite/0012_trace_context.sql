-- Traces; see the Postgres migration 0013_trace_context.sql.
ALTER TABLE tasks_workflow_runs ADD COLUMN traceparent TEXT;
ALTER TABLE tasks_workflow_runs ADD COLUMN tracestate TEXT;
