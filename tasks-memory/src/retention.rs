//! Retention: purging finished runs in batches with everything that belongs to them, and
//! the lease that gives one worker of a fleet each periodic purge. The statuses a purge
//! may delete are [`PURGE`]'s.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use tasks_core::error::StoreResult;
use tasks_core::model::RunStatus;
use tasks_core::retention::{FinishedBefore, PurgeRuns};
use tasks_core::transition::{PURGE, WAITABLE};

use crate::MemoryStore;
use crate::tables::{RetentionLease, Space, stored};

/// Whether a finished run whose parent is in `parent` (`None`: it has none, or its parent
/// is gone) may be purged: a child is kept while its parent is live, whatever its own age,
/// because the parent may still join it (`transition::purgeable_family`).
pub(crate) fn purgeable_family(parent: Option<RunStatus>) -> bool {
    parent.is_none_or(|status| !WAITABLE.contains(&status))
}

/// The turn a retention lease gives at `now`: the lease's next turn counter when it is due
/// (or the first one, for a namespace without a lease), else `None`.
pub(crate) fn turn(lease: Option<&RetentionLease>, now: DateTime<Utc>) -> Option<u64> {
    match lease {
        None => Some(1),
        Some(lease) if lease.next_at <= now => Some(lease.turns.saturating_add(1)),
        Some(_) => None,
    }
}

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
            purgeable_family(parent.map(|row| row.run.status))
        })
        .map(|run| run.id)
        .take(params.batch_size as usize)
        .collect()
}

impl MemoryStore {
    pub(crate) fn purge_runs_impl(&self, params: &PurgeRuns) -> StoreResult<u64> {
        self.write(|tx| {
            let cutoff = match params.finished_before {
                FinishedBefore::Instant(at) => stored(at),
                FinishedBefore::Age(age) => tx.minus(age)?,
            };
            let doomed = batch(tx.space, params, cutoff);
            let space = &mut *tx.space;
            // The links other runs keep to the batch: a fork keeps `forked_from_step`, not
            // the dangling id; a step that started a purged child; a child started by a step
            // of a purged run.
            let doomed_steps: BTreeSet<Uuid> = space
                .steps
                .values()
                .filter(|step| doomed.contains(&step.workflow_run_id))
                .map(|step| step.id)
                .collect();
            for row in space.runs.values_mut() {
                let run = &mut row.run;
                if run
                    .forked_from_run_id
                    .is_some_and(|id| doomed.contains(&id))
                {
                    run.forked_from_run_id = None;
                }
                if run
                    .parent_step_attempt_id
                    .is_some_and(|id| doomed_steps.contains(&id))
                {
                    run.parent_step_attempt_namespace = None;
                    run.parent_step_attempt_id = None;
                }
            }
            for step in space.steps.values_mut() {
                if step
                    .child_workflow_run_id
                    .is_some_and(|id| doomed.contains(&id))
                {
                    step.child_workflow_run_namespace = None;
                    step.child_workflow_run_id = None;
                }
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

    pub(crate) fn take_retention_turn_impl(
        &self,
        _worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        self.write(|tx| {
            let next_at = tx.plus(every)?;
            let turn = turn(tx.space.retention.as_ref(), tx.now);
            if let Some(turns) = turn {
                tx.space.retention = Some(RetentionLease { next_at, turns });
            }
            Ok(turn)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_of_live_parents_are_kept() {
        assert!(purgeable_family(None));
        for status in RunStatus::ALL {
            assert_eq!(purgeable_family(Some(status)), status.is_terminal());
        }
    }

    #[test]
    fn a_turn_is_taken_once_per_period() {
        let now = Utc::now();
        assert_eq!(turn(None, now), Some(1));
        let lease = RetentionLease {
            next_at: now,
            turns: 3,
        };
        assert_eq!(turn(Some(&lease), now), Some(4));
        assert_eq!(
            turn(Some(&lease), now - chrono::TimeDelta::seconds(1)),
            None
        );
    }
}
