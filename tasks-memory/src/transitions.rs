//! The fenced transitions of a run: a worker's (extend its lease, sleep, complete, fail,
//! release) and an operator's (cancel, pause, resume; retry is in `lifecycle`).
//!
//! Each is [`MemoryStore::transition`]: under the lock, the run's [`Transition`] admits it
//! or settles the miss, the change is applied, a finished run's family is told
//! ([`after_finish`]) and the transition's announcements are queued.

use crate::MemoryStore;
use crate::children::after_finish;
use crate::tables::{Tx, storable};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::FailRun;
use tasks_core::transition::{
    BACKED_OFF, CANCEL, CANCELED, COMPLETE, COMPLETED, EXTEND_LEASE, FAIL, FAILED_FOR_GOOD, PAUSE,
    PAUSED, RELEASE, RELEASED, RESUME, RESUMED, SLEEP, SLEEPING, Transition, gives_up,
    released_attempts, retry_after,
};
use uuid::Uuid;

impl MemoryStore {
    /// Applies `transition` to run `run_id` in its own write; see [`transition_in`].
    pub(crate) fn transition(
        &self,
        transition: &Transition,
        run_id: Uuid,
        worker_id: Option<&str>,
        change: impl FnOnce(&mut WorkflowRun, &Tx<'_>) -> StoreResult<()>,
    ) -> StoreResult<WorkflowRun> {
        self.write(|tx| transition_in(tx, transition, run_id, worker_id, change))
    }

    pub(crate) fn extend_lease_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        self.transition(&EXTEND_LEASE, run_id, Some(worker_id), |run, tx| {
            run.available_at = Some(tx.plus(lease)?);
            Ok(())
        })
    }

    pub(crate) fn sleep_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        let until = storable(until)?;
        self.transition(&SLEEP, run_id, Some(worker_id), |run, tx| {
            SLEEPING.apply(run, tx.now);
            run.available_at = Some(until);
            Ok(())
        })
    }

    pub(crate) fn complete_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        self.write(|tx| complete_in(tx, run_id, worker_id, output))
    }

    pub(crate) fn fail_run_impl(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        let worker = Some(params.worker_id.as_str());
        self.write(|tx| {
            let current = tx.space.run(params.run_id);
            let run = match current {
                Some(run) if FAIL.admits(&run, worker) => run,
                current => return Err(FAIL.miss(params.run_id, worker, current.as_ref())),
            };
            // Decided under the lock, on the attempt just read.
            let retry_at = retry_after(&run, params.force)
                .map(|wait| tx.plus(wait))
                .transpose()?;
            let retry_at = retry_at.filter(|_| !gives_up(retry_at, run.deadline_at));
            transition_in(tx, &FAIL, params.run_id, worker, |run, tx| {
                match retry_at {
                    Some(at) => {
                        BACKED_OFF.apply(run, tx.now);
                        run.available_at = Some(at);
                    }
                    None => FAILED_FOR_GOOD.apply(run, tx.now),
                }
                run.error = Some(params.error);
                Ok(())
            })
        })
    }

    pub(crate) fn release_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        self.transition(&RELEASE, run_id, Some(worker_id), |run, tx| {
            let available_at = tx.plus(delay)?;
            RELEASED.apply(run, tx.now);
            run.available_at = Some(available_at);
            run.error = Some(reason);
            run.attempts = released_attempts(run.attempts);
            Ok(())
        })
    }

    pub(crate) fn cancel_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&CANCEL, run_id, None, |run, tx| {
            CANCELED.apply(run, tx.now);
            Ok(())
        })
    }

    pub(crate) fn pause_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&PAUSE, run_id, None, |run, tx| {
            PAUSED.apply(run, tx.now);
            Ok(())
        })
    }

    pub(crate) fn resume_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&RESUME, run_id, None, |run, tx| {
            RESUMED.apply(run, tx.now);
            Ok(())
        })
    }
}

/// Completes run `run_id` for `worker_id` with `output` in the write `tx` ([`COMPLETE`]).
pub(crate) fn complete_in(
    tx: &mut Tx<'_>,
    run_id: Uuid,
    worker_id: &str,
    output: Value,
) -> StoreResult<WorkflowRun> {
    transition_in(tx, &COMPLETE, run_id, Some(worker_id), |run, tx| {
        COMPLETED.apply(run, tx.now);
        run.output = Some(output);
        Ok(())
    })
}

/// Applies `transition` to run `run_id` in the write `tx`: when its fence admits the run
/// (for `worker_id`, if the transition is leased), `change` changes a copy of it, which
/// is stored with `updated_at` now; a run it finished wakes its parent (and, for a cancel,
/// cancels its cascading descendants); its announcements are queued. When the fence does
/// not admit the run, the transition settles the miss: the run as it is when the
/// transition is already done, else the error. `change` may fail before anything is
/// stored.
pub(crate) fn transition_in(
    tx: &mut Tx<'_>,
    transition: &Transition,
    run_id: Uuid,
    worker_id: Option<&str>,
    change: impl FnOnce(&mut WorkflowRun, &Tx<'_>) -> StoreResult<()>,
) -> StoreResult<WorkflowRun> {
    let mut run = match tx.space.run(run_id) {
        Some(run) if transition.admits(&run, worker_id) => run,
        current => return transition.settle(run_id, worker_id, current),
    };
    change(&mut run, tx)?;
    run.updated_at = tx.now;
    if let Some(row) = tx.space.runs.get_mut(&run_id) {
        row.run = run.clone();
    }
    // The transition's own announcements come before its family's.
    tx.notes.extend(transition.announcements(&run));
    if transition.wakes_parent() {
        after_finish(tx, &run, transition.operation == Operation::CancelRun);
    }
    Ok(run)
}
