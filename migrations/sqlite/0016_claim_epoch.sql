-- The claim epoch of a run; see the Postgres migration 0019_claim_epoch.sql. Existing runs
-- start at 0: the next claim of each takes 1.
ALTER TABLE tasks_workflow_runs
    ADD COLUMN claim_epoch INTEGER NOT NULL DEFAULT 0;
