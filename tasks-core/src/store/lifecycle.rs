//! Operators' transitions of a run ([`LifecycleStore`]): cancel, pause, resume, retry from
//! the failure, fork.

#[cfg(doc)]
use crate::store::Store;
use uuid::Uuid;

use crate::error::StoreResult;
use crate::model::WorkflowRun;

#[cfg(doc)]
use crate::{
    error::StoreError,
    store::{LeaseStore, Notification},
};

/// Operators' transitions of a run: cancel, pause, resume, retry from the failure and fork.
/// A capability: reached through [`Store::lifecycle`].
#[async_trait::async_trait]
pub trait LifecycleStore: Send + Sync {
    /// Cancels a pending, running, sleeping or paused run for good, and announces it as
    /// finished. Returns a canceled run as it is.
    ///
    /// Errors: [`StoreError::RunNotFound`]; [`StoreError::WrongState`] for a completed or
    /// failed run.
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun>;

    /// Pauses a pending, running or sleeping run: no worker claims it until it is resumed,
    /// and a worker running it stops at its next write. Returns a paused run as it is.
    ///
    /// Errors: [`StoreError::RunNotFound`]; [`StoreError::WrongState`] for a terminal run.
    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun>;

    /// Makes a paused run pending and available now, and announces it. Returns a pending
    /// or running run as it is.
    ///
    /// Errors: [`StoreError::RunNotFound`]; [`StoreError::WrongState`] for a sleeping or
    /// terminal run.
    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun>;

    /// Runs a failed or canceled run again from its first unfinished step: the run becomes
    /// pending now, its output, error, worker and attempt counter are cleared (so its own
    /// retry policy starts over) and `retried_at` is set to the store's clock. Its step
    /// history is kept: completed steps replay their outputs and do not run again, while
    /// step failures recorded before `retried_at` are ignored by replay, so the steps that
    /// failed run again with their full retry budget. The deadline is kept.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run, [`StoreError::WrongState`]
    /// for a run that is not failed or canceled (a second retry of a run that is live
    /// again is refused the same way).
    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun>;

    /// Creates a new run of the same workflow, version, input, config and context as the
    /// finished (completed, failed or canceled) run `run_id`, with a copy of every step
    /// attempt recorded before the first attempt named `from_step` (a resolved step name:
    /// `name`, `name:1`, ...): those replay, and `from_step` and everything after it run
    /// again. The new run is pending now, records `forked_from_run_id` and
    /// `forked_from_step`, and has no idempotency key or deadline. The source is unchanged.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run, [`StoreError::WrongState`]
    /// for a live one, [`StoreError::UnknownStep`] when the run has no step attempt named
    /// `from_step`, a [`StoreError::Limit`] for a step name the limits refuse.
    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun>;
}
