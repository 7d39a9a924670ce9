//! The store contract: every durable transition of runs and step attempts.
//!
//! A [`Store`] is opened on one namespace and never reads or changes rows of another. Every
//! transition is a single statement that is fenced on the state it expects, so concurrent
//! workers, operators and stale workers cannot overwrite each other.
//!
//! # One state machine, rendered per dialect
//!
//! The policy of every transition lives once, in the runtime's private `transition` module:
//! the statuses it may start from, whether the caller must hold the run's lease, which
//! statuses mean "already done" (an idempotent repeat of a cancel or a pause), how a miss is
//! explained ([`StoreError::RunNotFound`], [`StoreError::LeaseLost`],
//! [`StoreError::WrongState`]) and which [`Notification`] it announces; so does the retry
//! decision of a failed run and what happens to a step attempt whose run was paused or
//! canceled. The Postgres and SQLite stores only write each transition's `SET` list and
//! statement in their SQL dialect; the fence, the explanation of a miss and the
//! announcement come from the shared definition.
//!
//! # Adding a transition
//!
//! 1. Add its [`Operation`] (a description for errors and a verb for
//!    [`StoreError::WrongState`]).
//! 2. Define it as a `const Transition` in `transition.rs`: `from`, `leased`, `done`,
//!    `announce`, `announce_status`. Unit-test its policy there.
//! 3. Add the method to [`Store`], documenting its promise and errors. Every value it takes
//!    is checked against the [`limits`] first, in a `check` method of its
//!    parameters (or a function of `limits`) that each store calls before any SQL.
//! 4. In each store, write the `SET` list and pass it to the store's generic helper
//!    (`PgStore::transition`, `SqliteStore::transition`), which renders the fence, settles a
//!    miss and sends the announcement.
//! 5. Add conformance cases to `tasks-conformance`; both stores, and any third store, run
//!    them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::children::{ChildWait, StartChild, StartedChild, WaitForChildren};
use crate::error::StoreResult;
use crate::events::{EventWait, RunEvent, SendEvent, SentEvent, WaitForEvent};
use crate::limits::LimitError;
use crate::model::{RunStatus, StepAttempt, WorkflowRun};
use crate::queue::{ClaimFilter, Queue, QueueOptions};
use crate::retention::PurgeRuns;
use crate::schedule::{DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule};
use crate::state::{PublishedState, SetState, StateSet};

#[cfg(doc)]
use crate::{
    error::{Operation, StoreError},
    limits,
    model::StepKind,
};

mod decode;
pub(crate) mod notify;
mod pages;
pub(crate) mod runs;
mod steps;

pub use decode::{corrupt_step_reason, status_of, step_status_of};
pub use notify::namespace_stream;
pub use notify::{Notification, NotificationStream};
pub use pages::{Cursor, DEFAULT_PAGE_SIZE, ListRuns, ListStepAttempts, Order, Page};
pub use pages::{PageQuery, counts_in_order};
pub use runs::{ClaimedRun, CreateRun, DEFAULT_NAMESPACE, FailRun};
pub use steps::{CreateStepAttempt, RecordStepAttempt, StepUpdate};

/// [`Store::complete_run_with_steps`] as separate writes: each attempt recorded, then the
/// completion. The trait's default, and a store's fallback when its single transaction was
/// refused: the separate writes say why (or succeed, if the run is still the worker's).
pub async fn complete_separately<S: Store + ?Sized>(
    store: &S,
    run_id: Uuid,
    worker_id: &str,
    output: Value,
    steps: Vec<RecordStepAttempt>,
) -> StoreResult<WorkflowRun> {
    for step in steps {
        // A refused record (paused, canceled) is reported by the completion below.
        store.record_step_attempt(step).await?;
    }
    store.complete_run(run_id, worker_id, output).await
}

/// The durable store behind workers and clients: the contract every backend implements.
///
/// Every operation is scoped to [`Store::namespace`] and never reads or changes rows of
/// another namespace. Every transition is one fenced write (a single statement, or one
/// transaction holding the write lock) whose fence and whose errors are those of
/// shared state machine ([`crate::transition`]); its time comes from the store's clock, one
/// clock for every worker.
///
/// Errors common to every method: [`StoreError::Database`] when the database failed (the
/// operation may or may not have been applied only where the method says so; a single
/// fenced write either applied fully or not at all), [`StoreError::CorruptRun`] (or
/// [`StoreError::Corrupt`] when the row's id is unknown) when a row could not be decoded,
/// and [`StoreError::Limit`] for a value past the [`limits`] (checked before the database
/// sees anything, with the `check` method of the parameters or the functions of
/// [`limits`]; nothing is written). Worker-side transitions (those taking a `worker_id`) fail with
/// [`StoreError::RunNotFound`] for an unknown run, [`StoreError::LeaseLost`] when the run is
/// running under another worker, and [`StoreError::WrongState`] (naming the status) when it
/// is not running; they never change a run they refused.
///
/// The conformance suite (`tasks-conformance`) specifies every method by example; a store
/// proves itself by running it with one macro call.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The namespace this store reads and writes.
    fn namespace(&self) -> &str;

    /// Whether this store keeps its runs in Postgres (in the `tasks` schema), so that
    /// `Client::start_in` may create runs in a caller's
    /// transaction on its database. `false` by default; a store that wraps a Postgres store
    /// forwards its answer.
    fn is_postgres(&self) -> bool {
        false
    }

    /// The same store (same connections, same background work) scoped to another namespace.
    ///
    /// Errors: a [`LimitError`] for a namespace past the [`limits`] (check it with
    /// [`limits::check_namespace`]): no store is made that would hand the database a
    /// namespace it cannot take, so every later call, by id or not, is safe.
    fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError>;

    /// Creates a pending run, available at `available_at`, or `delay` after now by the
    /// store's clock, or now; announces it with [`Notification::RunAvailable`]. With an
    /// idempotency key, a second create of the same workflow name and key (racing or not)
    /// creates nothing and returns the first run. The run's trace context
    /// ([`CreateRun::trace_context`]) is stored with it, and every read and claim of the run
    /// returns it ([`WorkflowRun::trace_context`]); [`Store::start_child`] stores the child's
    /// the same way, and [`Store::fork_run`] copies the source's.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a config that is not a JSON object or
    /// null, or a time out of the store's range.
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun>;

    /// The run with this id, or `None`.
    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>>;

    /// A page of runs by `(created_at, id)` in the requested order, filtered.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a zero limit or both cursors given.
    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>>;

    /// How many runs of the namespace are in each of `statuses`, in the order given, zeros
    /// included (a status given twice is counted once, where it first appears). The live
    /// statuses are what the partial indexes cover: counting them stays cheap however many
    /// finished runs the store keeps, while counting a terminal status reads every run in it.
    ///
    /// Errors: only the database's ([`StoreError::Database`]).
    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>>;

    /// Fails runs whose deadline passed (with a non-retryable `deadline` error; no wake-up is
    /// sent for them), then claims up to `limit` available runs for `worker_id` with a lease of
    /// `lease`: pending runs first, then runs whose lease expired or whose sleep ended, each
    /// group by `available_at` then `created_at`, then running runs of *another* worker whose
    /// heartbeat row is stale (see [`Store::heartbeat`]; by the store's clock), before their
    /// lease expires. A claim counts an attempt, except waking from a sleep, which continues
    /// the attempt. Concurrent claims never return the same run. The claimed runs are
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
    /// ([`Store::put_queue`]) is taken only into a free slot of its queue, counted like a
    /// key's (its running runs in the namespace plus the runs of the queue this claim takes
    /// never exceed the limit, whatever other claims run at once); a pending run that was
    /// never claimed (a start) of a queue with a rate limit is taken only while the queue's
    /// current window has starts left. A run with a key in a limited queue needs a slot of
    /// both. Runs the limits hold back stay pending; runs of other queues are taken past them.
    ///
    /// The default takes every run: [`Store::claim_runs_filtered`] with [`ClaimFilter::ALL`].
    async fn claim_runs(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedRun>> {
        self.claim_runs_filtered(worker_id, lease, limit, &ClaimFilter::ALL)
            .await
    }

    /// [`Store::claim_runs`] of only the runs `filter` admits (their queue and workflow
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

    /// Extends the lease of a run that `worker_id` is running to `lease` from now.
    /// Worker-side errors (see the trait docs).
    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun>;

    /// Parks a run that `worker_id` is running until `until`: its status is sleeping, and
    /// any worker may claim it from then on. Worker-side errors.
    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun>;

    /// Completes a run that `worker_id` is running with `output`, and announces it with
    /// [`Notification::RunFinished`]. Worker-side errors.
    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun>;

    /// Records the run's last finished step attempts (`steps`, all of this run and this
    /// worker, oldest first) and completes the run: the executor's path when a workflow
    /// returns right after its last steps. The outcome is that of
    /// [`Store::record_step_attempt`] for each attempt followed by [`Store::complete_run`]:
    /// the same fences and errors, and after a pause or cancel the attempts are kept marked
    /// like the run while the completion is refused (`WrongState`).
    ///
    /// The default does exactly that, one write after the other; a store that can write
    /// the attempts and the completion in one transaction (both stores here do) saves the
    /// commits in between.
    ///
    /// Errors: [`StoreError::InvalidArgument`] when an attempt is not finished or belongs
    /// to another run or worker; worker-side errors.
    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        RecordStepAttempt::check_last_steps(&steps, run_id, worker_id, &output)?;
        complete_separately(self, run_id, worker_id, output, steps).await
    }

    /// Records a failed attempt of a run that `worker_id` is running, with `error`: the run
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
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun>;

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

    /// Starts a running step attempt of a run that `params.worker_id` is running (durable
    /// sleeps use this; function steps are written once, finished, by
    /// [`Store::record_step_attempt`]). Idempotent by `params.id` like
    /// [`Store::record_step_attempt`]: an id the store already holds for this run returns
    /// the stored attempt and creates nothing. Worker-side errors, and
    /// [`StoreError::InvalidArgument`] for an id the store holds for another run.
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt>;

    /// The step attempt with this id, or `None`.
    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>>;

    /// A page of the attempts of a run, by `(created_at, id)`.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a zero limit or both cursors given.
    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>>;

    /// Every attempt of a run, oldest first: the history a replay starts from.
    ///
    /// Errors: [`StoreError::CorruptRun`] naming the run (and, in its reason, the step
    /// attempt) when a step row does not decode; a worker then fails the run for good.
    /// Never a [`StoreError::Database`] for a row that was read but did not decode.
    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>>;

    /// Completes a running step attempt with `output`, only while its run is running under
    /// `worker_id`. When the run was paused or canceled meanwhile, the attempt is marked like
    /// the run, without its output, and the outcome is [`StepUpdate::Interrupted`].
    ///
    /// Errors: [`StoreError::StepNotFound`] (also for an attempt of another run),
    /// [`StoreError::StepAlreadyFinished`], and the worker-side errors.
    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate>;

    /// Records a step attempt that already finished, in one write: the write path of a step
    /// is one commit. Its `started_at` is the store's clock minus `elapsed`. Fenced like
    /// [`Store::complete_step_attempt`]: when the run was paused or canceled meanwhile, the
    /// attempt is stored with that status and no result, and the outcome is
    /// [`StepUpdate::Interrupted`].
    ///
    /// Idempotent by `params.id`: when the store already holds a finished attempt with that
    /// id for this run (a retry whose first try committed but whose answer was lost), it
    /// stores nothing and answers [`StepUpdate::Recorded`] with the stored attempt, whatever
    /// the run's state is now. [`Store::complete_run_with_steps`] inherits this for its
    /// attempts: a retried completion never stores a step a second time.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for an attempt that is not completed or
    /// failed, a duration out of range, or an id the store holds for another run;
    /// worker-side errors.
    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate>;

    /// Subscribes to the notifications of this store's namespace. Dropped connections are
    /// reconnected behind the stream, which then yields [`Notification::Missed`].
    ///
    /// Besides the wake-ups and finishes named by each method, a store announces
    /// [`Notification::StatusChanged`] after every write that leaves a run sleeping
    /// ([`Store::sleep_run`], a parked [`Store::wait_for_event`]), paused
    /// ([`Store::pause_run`]), pending ([`Store::resume_run`], [`Store::retry_run`], a
    /// [`Store::fail_run`] that retries, [`Store::release_run`]) or running (each run of
    /// [`Store::claim_runs`]); waiters on a status rely on it (the conformance module
    /// `status`).
    async fn subscribe(&self) -> StoreResult<NotificationStream>;

    /// Records that `worker_id` is alive: writes its heartbeat row in this namespace (one
    /// row per worker, whatever number of runs it holds), stale `stale_after` from now by
    /// the store's clock. While the row is stale, [`Store::claim_runs`] of other workers
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

    // ---- Events sent to a run (see the `events` module) ----

    /// Sends an event to a live run, in one transaction that first locks the run: stores it
    /// in the run's mailbox for `topic` (FIFO), and when the run is parked waiting on that
    /// topic makes it available now and announces it with [`Notification::RunAvailable`].
    /// With a deduplication key already used for this run and topic, nothing is stored and
    /// the first event is returned (`duplicate`). A paused run keeps the event for when it
    /// is resumed.
    ///
    /// Errors: [`StoreError::RunNotFound`] (or [`StoreError::RunKeyNotFound`] for a target
    /// by workflow and key); [`StoreError::WrongState`] for a completed, failed or canceled
    /// run. Nothing is stored then.
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent>;

    /// The event wait `params.step_name` of a run that `params.worker_id` is running, in one
    /// transaction that first locks the run: creates the wait's running step attempt (kind
    /// [`StepKind::Event`], with the topic and timeout in its config) unless it exists, then
    /// consumes the oldest unconsumed event of the topic, marking it consumed by the step,
    /// and completes the attempt with it ([`EventWait::Done`]); else, when the timeout
    /// (counted from the attempt's creation, by the store's clock) has passed, completes the
    /// attempt as timed out; else parks the run (sleeping until the timeout, or
    /// [`limits::LATEST`]) waiting on the topic ([`EventWait::Parked`]). A wait whose attempt
    /// is already completed returns it as it is. Worker-side errors.
    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait>;

    /// Every event sent to a run, oldest first, consumed or not.
    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>>;

    // ---- Lifecycle: retry from the failure ----

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

    // ---- Retention (see the `retention` module) ----

    /// Deletes one batch of finished runs of this namespace: at most `params.batch_size`
    /// runs in `params`' statuses (every terminal status when none is given) whose
    /// `finished_at` is before the cutoff (an instant, or the store's clock minus an age),
    /// in one short transaction, and returns how many were deleted. With each run go its
    /// step attempts and its events; the links other runs keep to it are cleared in the same
    /// transaction: the `forked_from_run_id` of runs forked from it (their
    /// `forked_from_step` is kept), the child-run columns of a step that started it, and the
    /// parent step of runs its steps started. A caller repeats batches until one returns
    /// fewer than `batch_size` runs.
    ///
    /// Safe while workers run: only completed, failed and canceled runs are ever deleted,
    /// and the delete is fenced on those statuses: a run retried while a purge runs either
    /// is live again and survives, or was deleted first and the retry finds it gone
    /// ([`StoreError::RunNotFound`]). On Postgres a batch
    /// skips rows other transactions hold locked (a retry or fork in progress) instead of
    /// waiting for them, so concurrent purges take disjoint batches; on SQLite a batch holds
    /// the write lock for its one transaction. Deleting announces nothing.
    ///
    /// Errors: [`StoreError::NotTerminal`] for a live status in `params.statuses`,
    /// [`StoreError::Limit`] for a batch size outside `1..=`[`MAX_PURGE_BATCH`](crate::retention::MAX_PURGE_BATCH)
    /// or a cutoff past the limits; nothing is deleted then.
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64>;

    /// Takes this namespace's retention turn for `worker_id` when it is due: the
    /// namespace's lease row (one per namespace) is written with `worker_id` and its next
    /// turn `every` from now by the store's clock, and its turn counter (from 1) is
    /// returned. Before then every call, from any worker, returns `None` and writes nothing.
    /// Concurrent calls in one period give the turn to one of them. A worker purges only
    /// when it took the turn, so a fleet's periodic purge costs the same whatever its size.
    ///
    /// Errors: [`StoreError::Limit`] for a worker id past the limits or a duration past
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION).
    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>>;

    // ---- Child workflows (see the `children` module) ----

    /// Starts a child run from the step `params.step_name` of a run that `params.worker_id`
    /// is running, in one transaction fenced on that lease: creates the step attempt (kind
    /// [`StepKind::Child`], running, with the child's workflow in its config and the child's
    /// id in `child_workflow_run_id`) and the child run (pending now, unless `params.child`
    /// says otherwise; with `parent_run_id`, `parent_step_attempt_id` and
    /// `cancel_with_parent` set), and announces the child with
    /// [`Notification::RunAvailable`]. When the step already has a child attempt, nothing is
    /// created and the first child is returned (`created` false): a child is started
    /// exactly once per step, however often the parent replays or retries the start.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a child with an idempotency key or a
    /// config that is not an object; the limit errors of [`CreateRun::check`]; worker-side
    /// errors (about the parent). Nothing is written then.
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild>;

    /// The wait of a run that `params.worker_id` is running for the children started by
    /// the steps `params.step_names`, in one transaction fenced on that lease: completes
    /// the step attempt of every child that has finished with the child's outcome
    /// ([`ChildOutcome::to_output`](crate::ChildOutcome::to_output)), then, when all have
    /// finished, returns their attempts ([`ChildWait::Done`]); otherwise parks the run
    /// (sleeping until [`limits::LATEST`], no worker) until the last live one of them
    /// finishes ([`ChildWait::Parked`]). The completion, failure for good or cancel of a
    /// child makes its parked parent available in the child's own transition and announces
    /// it with [`Notification::RunAvailable`].
    ///
    /// Errors: [`StoreError::UnknownStep`] when a name is not a child step of the run;
    /// [`StoreError::InvalidArgument`] for an empty list; worker-side errors.
    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait>;

    // ---- Published state (see the `state` module) ----

    /// The publication `params.step_name` of a value under `params.key` by a run that
    /// `params.worker_id` is running, in one transaction that first locks the run, fenced
    /// on that lease: records the step attempt (kind [`StepKind::State`], completed, with
    /// the key in its config and `{"version": n}` as output) and makes `params.value` the
    /// latest value of (run, key), with version `n` one more than the key's last (1 for
    /// the first), and the store's clock as `updated_at`; once committed it announces
    /// [`Notification::StateChanged`]. When the run already has an attempt named
    /// `params.step_name`, nothing is written and that attempt is returned (`published`
    /// false): a replay never publishes a value again.
    ///
    /// Errors: the limit errors of [`SetState::check`]; worker-side errors. Nothing is
    /// written then.
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet>;

    /// The latest value the run published under `key`, or `None` when it published none.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run; a [`StoreError::Limit`] for
    /// a key the limits refuse.
    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>>;

    /// The latest value of every key the run published, by key.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run.
    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>>;

    // ---- Schedules (see the `schedule` module) ----

    /// Creates a schedule, not paused, whose `next_slot` is `first_slot` of the store's
    /// clock.
    ///
    /// Errors: [`StoreError::ScheduleExists`] when the name is taken in this namespace
    /// (nothing is changed).
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule>;

    /// Creates or replaces a schedule (the worker's path for declarative schedules), in one
    /// transaction. A new schedule is created as by [`Store::create_schedule`]. An existing
    /// one takes the new workflow, version, input and catch-up policy and keeps whether it
    /// is paused; its `next_slot` is kept while the cron expression and the timezone are
    /// unchanged (a restart of the workers neither skips nor repeats a slot), and is
    /// `first_slot` of the store's clock when either changed.
    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule>;

    /// The schedule with this name, or `None`.
    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>>;

    /// Every schedule of this namespace, by name.
    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>>;

    /// Pauses a schedule: it fires nothing until it is resumed. Pausing a paused schedule
    /// returns it as it is.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule>;

    /// Resumes a paused schedule. Its `next_slot` is kept: the slots that passed while it
    /// was paused are missed slots, and its catch-up policy decides what the next tick does
    /// with them. Resuming a schedule that is not paused returns it as it is.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule>;

    /// Deletes a schedule. The runs it started are kept.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn delete_schedule(&self, name: &str) -> StoreResult<()>;

    /// Up to `limit` schedules that are not paused and whose `next_slot` is at or before the
    /// store's clock (earliest first), with that clock.
    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules>;

    /// Fires a slot of a schedule, in one transaction: moves the schedule's `next_slot` from
    /// `params.slot` to `params.next_slot`, only if it is still `params.slot` and the
    /// schedule is not paused (compare-and-set), and then creates `params.runs` (a run
    /// whose idempotency key exists already is not created again) and announces them with
    /// [`Notification::RunAvailable`]. Returns the runs created, or `None` when the
    /// compare-and-set missed (another firer moved the slot first, the schedule was paused,
    /// changed or deleted): then nothing was written. Of concurrent fires of one slot, at
    /// most one returns `Some`.
    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>>;

    // ---- Named queues (see the `queue` module) ----

    /// Creates or replaces the configuration of a queue: its concurrency and rate limits
    /// (a limit left out is removed). The current rate window is kept. Every claim of the
    /// namespace reads it from then on.
    ///
    /// Errors: a refused name or limit ([`StoreError::Limit`]; nothing is written), else the
    /// database's.
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue>;

    /// The configuration of the queue with this name, or `None` when it has none (a queue
    /// without configuration has no limits).
    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>>;

    /// Every configured queue of this namespace, by name.
    async fn list_queues(&self) -> StoreResult<Vec<Queue>>;

    /// Removes the configuration of a queue: its runs are claimed without limits from then
    /// on. Its runs are kept.
    ///
    /// Errors: [`StoreError::QueueNotFound`].
    async fn delete_queue(&self, name: &str) -> StoreResult<()>;
}

/// A store shared by workers, clients and their tasks: cheap to clone, and what
/// `Worker::builder` and `Client::new`
/// take. Every store converts into one (`PgStore`, `SqliteStore`, any [`Store`], or an
/// `Arc<dyn Store>`), and it dereferences to [`Store`].
#[derive(Clone)]
pub struct SharedStore(Arc<dyn Store>);

impl SharedStore {
    /// Shares `store`.
    pub fn new(store: impl Store) -> Self {
        SharedStore(Arc::new(store))
    }

    /// The shared store as an `Arc`.
    pub fn as_arc(&self) -> &Arc<dyn Store> {
        &self.0
    }
}

impl std::ops::Deref for SharedStore {
    type Target = dyn Store;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("namespace", &self.0.namespace())
            .finish_non_exhaustive()
    }
}

impl<S: Store> From<S> for SharedStore {
    fn from(store: S) -> Self {
        SharedStore::new(store)
    }
}

impl From<Arc<dyn Store>> for SharedStore {
    fn from(store: Arc<dyn Store>) -> Self {
        SharedStore(store)
    }
}
