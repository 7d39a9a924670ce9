//! The fenced transition of a run, which a worker's (extend its lease, sleep, complete,
//! fail, release: `leases`) and an operator's (cancel, pause, resume: `lifecycle`) go
//! through.
//!
//! Each is [`MemoryStore::transition`]: under the lock, the run's [`Transition`] admits it
//! or settles the miss, the change is applied, a finished run's family is told
//! ([`after_finish`]) and the transition's announcements are queued.

use crate::MemoryStore;
use crate::children::after_finish;
use crate::tables::Tx;
use serde_json::Value;
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::transition::{COMPLETE, COMPLETED, Transition};
use uuid::Uuid;

impl MemoryStore {
    /// Applies `transition` to run `run_id` in its own write; see [`transition_in`].
    pub(crate) fn transition(
        &self,
        transition: &Transition,
        run_id: Uuid,
        holder: Option<&Holder>,
        change: impl FnOnce(&mut WorkflowRun, &Tx<'_>) -> StoreResult<()>,
    ) -> StoreResult<WorkflowRun> {
        self.write(|tx| transition_in(tx, transition, run_id, holder, change))
    }
}

/// Completes run `run_id` for `holder` with `output` in the write `tx` ([`COMPLETE`]).
pub(crate) fn complete_in(
    tx: &mut Tx<'_>,
    run_id: Uuid,
    holder: &Holder,
    output: Value,
) -> StoreResult<WorkflowRun> {
    transition_in(tx, &COMPLETE, run_id, Some(holder), |run, tx| {
        COMPLETED.apply(run, tx.now);
        run.output = Some(output);
        Ok(())
    })
}

/// Applies `transition` to run `run_id` in the write `tx`: when its fence admits the run
/// (for `holder`, if the transition is leased), `change` changes a copy of it, which
/// is stored with `updated_at` now; a run it finished wakes its parent (and, for a cancel,
/// cancels its cascading descendants); its announcements are queued. When the fence does
/// not admit the run, the transition settles the miss: the run as it is when the
/// transition is already done, else the error. `change` may fail before anything is
/// stored.
pub(crate) fn transition_in(
    tx: &mut Tx<'_>,
    transition: &Transition,
    run_id: Uuid,
    holder: Option<&Holder>,
    change: impl FnOnce(&mut WorkflowRun, &Tx<'_>) -> StoreResult<()>,
) -> StoreResult<WorkflowRun> {
    let mut run = match tx.space.run(run_id) {
        Some(run) if transition.admits(&run, holder) => run,
        current => return transition.settle(run_id, holder, current),
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
