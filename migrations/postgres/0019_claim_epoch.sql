-- The claim epoch: every claim of a run increments it, and nothing ever decreases it. A
-- worker's writes under a lease carry the worker id and the epoch of the claim their
-- execution began with, and are fenced on both, so a run claimed again (by another worker,
-- or by the same worker after its lease ran out) refuses the earlier execution's writes.
-- Existing runs start at 0: the next claim of each takes 1. A constant default makes the
-- new column a change of the catalog only: no row is rewritten.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN claim_epoch BIGINT NOT NULL DEFAULT 0;
