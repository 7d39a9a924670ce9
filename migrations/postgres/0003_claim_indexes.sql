-- Claims take pending runs first, oldest available first, then runs whose lease or sleep is
-- over. One index per group, in claim order, lets a claim read exactly the rows it takes
-- (index order + LIMIT) instead of sorting every available run: a backlog of a million
-- pending runs costs a claim no more than a backlog of ten.
CREATE INDEX workflow_runs_claim_pending
    ON tasks.workflow_runs (namespace, available_at, created_at)
    WHERE status = 'pending';
CREATE INDEX workflow_runs_claim_due
    ON tasks.workflow_runs (namespace, available_at, created_at)
    WHERE status IN ('running', 'sleeping');
DROP INDEX tasks.workflow_runs_claim;
