-- Continue-as-new: a run that finishes by handing over to a successor names it
-- (`continued_as_run_id`); the successor names the run it continued from
-- (`continued_from_run_id`) and the first run of their lineage (`lineage_root_id`; NULL on
-- the first run, whose own id is the lineage's). Links, not foreign keys: a purge may delete
-- a finished run of a lineage before the rest.
ALTER TABLE tasks.workflow_runs
    ADD COLUMN lineage_root_id       UUID,
    ADD COLUMN continued_from_run_id UUID,
    ADD COLUMN continued_as_run_id   UUID;

-- The current run of a lineage: its runs other than the first, by lineage.
CREATE INDEX workflow_runs_lineage
    ON tasks.workflow_runs (namespace, lineage_root_id)
    WHERE lineage_root_id IS NOT NULL;
