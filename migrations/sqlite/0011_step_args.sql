-- Step arguments; see the Postgres migration 0012_step_args.sql.
ALTER TABLE tasks_step_attempts ADD COLUMN args TEXT;
