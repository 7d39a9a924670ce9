//! Who holds a run's lease, as every leased write names it ([`Holder`]): a worker, and the
//! claim it holds the run by.
//!
//! A claim increments the run's claim epoch ([`WorkflowRun::claim_epoch`]), and the run is
//! then held by the claiming worker *at that epoch*. Every write under the lease (a step
//! record, a completion, a failure, a sleep, a release, a lease extension, an event wait, a
//! publication, a child's start or wait) carries the [`Holder`] of the claim its execution
//! began with, and the store applies it only while the run is still running under that
//! same claim ([`Transition::fence`](crate::transition::Transition::fence)). So an
//! execution whose run was claimed again (by another worker, or by the same worker after
//! its lease ran out) has every late write refused with
//! [`StoreError::LeaseLost`](crate::StoreError::LeaseLost), by the database itself,
//! whatever the process remembers.

use serde::{Deserialize, Serialize};

use crate::model::WorkflowRun;

/// The holder of a run's lease: the worker that claimed it and the claim's epoch. The fence
/// of every leased write.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// The worker that claimed the run.
    pub worker_id: String,
    /// The run's claim epoch as that claim left it ([`WorkflowRun::claim_epoch`]).
    pub claim_epoch: i64,
}

impl Holder {
    /// The holder `worker_id` by the claim that left the run at `claim_epoch`.
    pub fn new(worker_id: impl Into<String>, claim_epoch: i64) -> Self {
        Holder {
            worker_id: worker_id.into(),
            claim_epoch,
        }
    }

    /// Who holds `run` as it is now (its worker and its claim epoch), or `None` when no
    /// worker holds it. For a run a claim just returned, the holder its execution writes as.
    pub fn of(run: &WorkflowRun) -> Option<Holder> {
        run.worker_id
            .as_ref()
            .map(|worker| Holder::new(worker.clone(), run.claim_epoch))
    }

    /// Whether this holder holds `run` as it is now: the same worker, by the same claim.
    /// (Whether the run is running is the transition's check, not this one.)
    pub fn holds(&self, run: &WorkflowRun) -> bool {
        run.worker_id.as_deref() == Some(self.worker_id.as_str())
            && run.claim_epoch == self.claim_epoch
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (claim {})", self.worker_id, self.claim_epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunStatus;

    #[test]
    fn a_holder_holds_a_run_by_its_worker_and_its_claim() {
        let mut run = WorkflowRun::for_tests(RunStatus::Running, Some("w".into()));
        run.claim_epoch = 2;
        let holder = Holder::of(&run).unwrap();
        assert_eq!(holder, Holder::new("w", 2));
        assert!(holder.holds(&run));
        assert!(!Holder::new("w", 1).holds(&run), "an earlier claim");
        assert!(!Holder::new("x", 2).holds(&run), "another worker");
        run.worker_id = None;
        assert!(!holder.holds(&run));
        assert_eq!(Holder::of(&run), None);
    }
}
