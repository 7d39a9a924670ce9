-- Step arguments: what a `#[step]` function was called with, recorded with each
-- attempt for inspection (CLI, dashboard, `Client::steps`). NULL when nothing was recorded:
-- `#[step(record_args = false)]`, steps that are not function calls (sleeps, events,
-- children), and attempts written before this migration.
ALTER TABLE tasks.step_attempts ADD COLUMN args JSONB;
