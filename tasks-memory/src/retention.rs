//! Retention: purging finished runs in batches with everything that belongs to them, and
//! the lease that gives one worker of a fleet each periodic purge. The statuses a purge
//! may delete are [`PURGE`]'s.

use crate::MemoryStore;
use crate::tables::{RetentionLease, Space, stored};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use std::time::Duration;
use tasks_core::error::StoreResult;
use tasks_core::retention::{FinishedBefore, PurgeRuns, next_turn};
use tasks_core::store::{RetentionStore, check};
use tasks_core::transition::{PURGE, purgeable_with_parent, unlink_purged_run, unlink_purged_step};
use uuid::Uuid;

/// The runs of a batch: at most `params.batch_size` of its statuses finished before
/// `cutoff`, without a live parent.
fn batch(space: &Space, params: &PurgeRuns, cutoff: DateTime<Utc>) -> BTreeSet<Uuid> {
    let statuses = params.selected_statuses();
    space
        .runs
        .values()
        .map(|row| &row.run)
        .filter(|run| PURGE.admits(run, None) && statuses.contains(&run.status))
        .filter(|run| run.finished_at.is_some_and(|at| at < cutoff))
        .filter(|run| {
            let parent = run.parent_run_id.and_then(|id| space.runs.get(&id));
            purgeable_with_parent(parent.map(|row| row.run.status))
        })
        .map(|run| run.id)
        .take(params.batch_size as usize)
        .collect()
}

#[async_trait]
impl RetentionStore for MemoryStore {
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        check::purge_runs(&self.namespace, params)?;
        self.write(|tx| {
            let cutoff = match params.finished_before {
                FinishedBefore::Instant(at) => stored(at),
                FinishedBefore::Age(age) => tx.minus(age)?,
            };
            let doomed = batch(tx.space, params, cutoff);
            let space = &mut *tx.space;
            // The links other runs and steps keep to the batch.
            let doomed_steps: BTreeSet<Uuid> = space
                .steps
                .values()
                .filter(|step| doomed.contains(&step.workflow_run_id))
                .map(|step| step.id)
                .collect();
            let purged_run = |id: Uuid| doomed.contains(&id);
            for row in space.runs.values_mut() {
                unlink_purged_run(&mut row.run, purged_run, |id| doomed_steps.contains(&id));
            }
            for step in space.steps.values_mut() {
                unlink_purged_step(step, purged_run);
            }
            space
                .events
                .retain(|_, event| !doomed.contains(&event.workflow_run_id));
            space
                .steps
                .retain(|_, step| !doomed.contains(&step.workflow_run_id));
            space
                .state
                .retain(|(run_id, _), _| !doomed.contains(run_id));
            space.runs.retain(|id, _| !doomed.contains(id));
            Ok(doomed.len() as u64)
        })
    }

    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        check::take_retention_turn(&self.namespace, worker_id, every)?;
        // Any worker may take the turn: the id is only checked.
        self.write(|tx| {
            let next_at = tx.plus(every)?;
            let lease = tx.space.retention.as_ref();
            let turn = next_turn(lease.map(|lease| (lease.next_at, lease.turns)), tx.now);
            if let Some(turns) = turn {
                tx.space.retention = Some(RetentionLease { next_at, turns });
            }
            Ok(turn)
        })
    }
}
