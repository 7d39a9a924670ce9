//! The worker's side of a run: its claim, its lease and heartbeat, and how it ends
//! ([`LeaseStore`]).

#[cfg(doc)]
use crate::store::QueueStore;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::StoreResult;
use crate::holder::Holder;
use crate::model::WorkflowRun;
use crate::queue::ClaimFilter;

use super::runs::{ClaimedRun, FailRun};
use super::steps::{RecordStepAttempt, StepStore};

/// [`LeaseStore::complete_run_with_steps`] as separate writes: each attempt recorded, then the
/// completion. The trait's default, and a store's fallback when its single transaction was
/// refused: the separate writes say why (or succeed, if the run is still the worker's).
pub async fn complete_separately<S: LeaseStore + ?Sized>(
    store: &S,
    run_id: Uuid,
    holder: &Holder,
    output: Value,
    steps: Vec<RecordStepAttempt>,
) -> StoreResult<WorkflowRun> {
    for step in steps {
        // A refused record (paused, canceled) is reported by the completion below.
        store.record_step_attempt(step).await?;
    }
    store.complete_run(run_id, holder, output).await
}

#[cfg(doc)]
use crate::{
    error::StoreError,
    store::{CreateRun, Notification, RunStore, Store},
};

/// Claims and leases: the worker's side of a run, from its claim to its end. Part of every
/// store ([`Store`] requires it); the errors common to every method, and the worker-side
/// errors of the methods taking a [`Holder`], are on [`Store`].
///
/// Every write under a lease names its [`Holder`]: the worker and the claim epoch of the
/// claim its execution began with. The write applies only while the run is running under
/// that very claim; once the run was claimed again (by another worker, or by the same
/// worker after its lease ran out) it is refused with [`StoreError::LeaseLost`] and changes
/// nothing. Heartbeats ([`LeaseStore::heartbeat`]) are per worker.
#[async_trait::async_trait]
pub trait LeaseStore: StepStore {
    /// Fails runs whose deadline passed (with a non-retryable `deadline` error; no wake-up is
    /// sent for them), then claims up to `limit` available runs for `worker_id` with a lease of
    /// `lease`: first the runs of dead workers (runs whose lease expired, then running runs
    /// of *another* worker whose heartbeat row is stale, see [`LeaseStore::heartbeat`]; by
    /// the store's clock, before their lease expires), so that recovery never waits behind
    /// a backlog; then pending runs; then runs whose sleep ended; each group by
    /// `available_at` then `created_at` (pending runs by priority first, see below). A claim
    /// counts an attempt, except waking from a sleep, which continues
    /// the attempt. Every claim increments the run's claim epoch
    /// ([`WorkflowRun::claim_epoch`]), in the same statement; the claimed run's
    /// [`Holder`] ([`ClaimedRun::holder`]) is the fence of the execution's writes.
    /// Concurrent claims never return the same run. The claimed runs are
    /// returned oldest (by `created_at`) first.
    ///
    /// Flow control ([`CreateRun::priority`], [`CreateRun::concurrency`]): pending runs are
    /// taken by priority, higher first, then by `available_at` and `created_at`. A pending or
    /// sleeping run with a concurrency key is taken only into a free slot of its key: the
    /// key's running runs in the namespace plus the runs of the key this claim takes never
    /// exceed the run's limit, whatever other claims run at the same time (a store may take
    /// fewer, never more). Runs of other keys and runs without a key are taken past the runs
    /// of a full key. A running run taken over keeps its slot.
    ///
    /// A claimed run whose stored row cannot be decoded (a "poison row": JSON that the
    /// decoder refuses, say) is not returned and does not fail the claim: it is failed for
    /// good, fenced on this claim, with a non-retryable error of kind `corrupt` that names
    /// the run, and its undecodable JSON columns are moved into that error as text under
    /// `quarantined` (so the row reads again), then announced as finished.
    ///
    /// Queues ([`crate::queue`]): a run of a queue configured with a concurrency limit
    /// ([`QueueStore::put_queue`]) is taken only into a free slot of its queue, counted like a
    /// key's (its running runs in the namespace plus the runs of the queue this claim takes
    /// never exceed the limit, whatever other claims run at once); a pending run that was
    /// never claimed (a start) of a queue with a rate limit is taken only while the queue's
    /// current window has starts left. A run with a key in a limited queue needs a slot of
    /// both. Runs the limits hold back stay pending; runs of other queues are taken past them.
    ///
    /// The default takes every run: [`LeaseStore::claim_runs_filtered`] with [`ClaimFilter::ALL`].
    async fn claim_runs(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedRun>> {
        self.claim_runs_filtered(worker_id, lease, limit, &ClaimFilter::ALL)
            .await
    }

    /// [`LeaseStore::claim_runs`] of only the runs `filter` admits (their queue and workflow
    /// name), in every group: pending runs, runs whose sleep or lease ended, and runs of
    /// stale workers. The filter is applied in the database: runs it refuses are not read
    /// into the worker, and stay claimable by other workers.
    ///
    /// Errors: a refused filter ([`StoreError::Limit`]), else the database's.
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>>;

    /// Extends the lease of a run that `holder` holds to `lease` from now.
    /// Worker-side errors (see the trait docs).
    async fn extend_lease(
        &self,
        run_id: Uuid,
        holder: &Holder,
        lease: Duration,
    ) -> StoreResult<WorkflowRun>;

    /// Parks a run that `holder` holds until `until`: its status is sleeping, and
    /// any worker may claim it from then on. Worker-side errors.
    async fn sleep_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun>;

    /// Completes a run that `holder` holds with `output`, and announces it with
    /// [`Notification::RunFinished`]. Worker-side errors.
    async fn complete_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<WorkflowRun>;

    /// Records the run's last finished step attempts (`steps`, all of this run and this
    /// holder, oldest first) and completes the run: the executor's path when a workflow
    /// returns right after its last steps. The outcome is that of
    /// [`StepStore::record_step_attempt`] for each attempt followed by [`LeaseStore::complete_run`]:
    /// the same fences and errors, and after a pause or cancel the attempts are kept marked
    /// like the run while the completion is refused (`WrongState`).
    ///
    /// The default does exactly that, one write after the other; a store that can write
    /// the attempts and the completion in one transaction (both stores here do) saves the
    /// commits in between.
    ///
    /// Errors: [`StoreError::InvalidArgument`] when an attempt is not finished or belongs
    /// to another run or holder; worker-side errors.
    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        RecordStepAttempt::check_last_steps(&steps, run_id, holder, &output)?;
        complete_separately(self, run_id, holder, output, steps).await
    }

    /// Records a failed attempt of a run that `params.holder` holds, with `error`: the run
    /// is pending again after the delay its retry policy (`config.retryPolicy`) gives for
    /// this attempt, or failed for good (and announced as finished) when `force` is set,
    /// when the policy has no attempts left, or when the retry would start at or after the
    /// run's deadline. Worker-side errors.
    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun>;

    /// Gives a claimed run back without counting the attempt: pending again after `delay`,
    /// with `reason` recorded as its error. Used when a worker cannot execute the run.
    /// Worker-side errors.
    async fn release_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun>;

    /// Records that `worker_id` is alive: writes its heartbeat row in this namespace (one
    /// row per worker, whatever number of runs it holds), stale `stale_after` from now by
    /// the store's clock. While the row is stale, [`LeaseStore::claim_runs`] of other workers
    /// takes the runs the worker holds; once they are taken, every write of the worker on
    /// them fails with [`StoreError::LeaseLost`]. A worker that never beats keeps the
    /// lease-only behaviour. `stale_after` of zero makes the row stale at once (a worker
    /// giving its runs up).
    ///
    /// The same write forgets the stale rows of this namespace whose workers hold no running
    /// run any more (their runs were all claimed).
    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()>;

    /// Deletes the heartbeat row of `worker_id` in this namespace (a worker that shut down
    /// gracefully): the runs it may still hold are left to their leases. Removing a worker
    /// without a row does nothing.
    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()>;
}
