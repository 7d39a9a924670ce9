-- Traces: the W3C trace context of the caller of a run's start, which every
-- execution of the run joins (see `tasks_runtime::trace`).
--
-- `traceparent`: the `traceparent` header value (`00-<trace id>-<parent id>-<flags>`),
-- NULL when the start had no trace context. `tracestate`: the `tracestate` header value,
-- only with a `traceparent`. Both are checked before they are written; a stored value that
-- no longer parses is ignored when read, never failing the run.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN traceparent TEXT,
    ADD COLUMN tracestate  TEXT,
    ADD CONSTRAINT workflow_runs_tracestate_needs_traceparent
        CHECK (tracestate IS NULL OR traceparent IS NOT NULL);
