//! Errors raised by stores, and the operations they name.

use uuid::Uuid;

use crate::model::RunStatus;

/// The error of a database driver, boxed so that the contract names no driver's types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store operation: what a [`StoreError`] says the store was doing.
///
/// Its [`Display`](std::fmt::Display) is a phrase such as "claiming workflow runs";
/// [`Operation::verb`] is the verb a [`StoreError::WrongState`] uses ("cancel").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Opening a connection or a pool.
    Connect,
    /// Applying the schema migrations.
    Migrate,
    /// [`RunStore::create_run`](crate::RunStore::create_run).
    CreateRun,
    /// [`RunStore::get_run`](crate::RunStore::get_run).
    GetRun,
    /// [`RunStore::list_runs`](crate::RunStore::list_runs).
    ListRuns,
    /// [`RunStore::count_runs`](crate::RunStore::count_runs).
    CountRuns,
    /// [`LeaseStore::claim_runs`](crate::LeaseStore::claim_runs).
    ClaimRuns,
    /// [`LeaseStore::extend_lease`](crate::LeaseStore::extend_lease).
    ExtendLease,
    /// [`LeaseStore::sleep_run`](crate::LeaseStore::sleep_run).
    SleepRun,
    /// [`LeaseStore::complete_run`](crate::LeaseStore::complete_run).
    CompleteRun,
    /// [`LeaseStore::fail_run`](crate::LeaseStore::fail_run).
    FailRun,
    /// [`LeaseStore::release_run`](crate::LeaseStore::release_run).
    ReleaseRun,
    /// [`LifecycleStore::cancel_run`](crate::LifecycleStore::cancel_run).
    CancelRun,
    /// [`LifecycleStore::pause_run`](crate::LifecycleStore::pause_run).
    PauseRun,
    /// [`LifecycleStore::resume_run`](crate::LifecycleStore::resume_run).
    ResumeRun,
    /// [`StepStore::create_step_attempt`](crate::StepStore::create_step_attempt).
    CreateStepAttempt,
    /// [`StepStore::complete_step_attempt`](crate::StepStore::complete_step_attempt).
    CompleteStepAttempt,
    /// [`StepStore::record_step_attempt`](crate::StepStore::record_step_attempt).
    RecordStepAttempt,
    /// [`StepStore::get_step_attempt`](crate::StepStore::get_step_attempt).
    GetStepAttempt,
    /// [`StepStore::list_step_attempts`](crate::StepStore::list_step_attempts).
    ListStepAttempts,
    /// [`StepStore::step_history`](crate::StepStore::step_history).
    StepHistory,
    /// [`Store::subscribe`](crate::Store::subscribe), and the listener behind it.
    Subscribe,
    /// [`LeaseStore::heartbeat`](crate::LeaseStore::heartbeat).
    Heartbeat,
    /// [`LeaseStore::remove_worker`](crate::LeaseStore::remove_worker).
    RemoveWorker,
    // Events sent to a run.
    /// [`EventStore::send_event`](crate::EventStore::send_event).
    SendEvent,
    /// [`EventStore::signal_with_start`](crate::EventStore::signal_with_start).
    SignalWithStart,
    /// [`EventStore::wait_for_event`](crate::EventStore::wait_for_event).
    WaitForEvent,
    /// [`EventStore::list_events`](crate::EventStore::list_events).
    ListEvents,
    /// [`LifecycleStore::retry_run`](crate::LifecycleStore::retry_run).
    RetryRun,
    /// [`LifecycleStore::fork_run`](crate::LifecycleStore::fork_run).
    ForkRun,
    // Continue-as-new.
    /// [`ContinueStore::continue_run`](crate::ContinueStore::continue_run).
    ContinueRun,
    /// [`ContinueStore::lineage_head`](crate::ContinueStore::lineage_head).
    LineageHead,
    // Retention.
    /// [`RetentionStore::purge_runs`](crate::RetentionStore::purge_runs).
    PurgeRuns,
    /// [`RetentionStore::take_retention_turn`](crate::RetentionStore::take_retention_turn).
    RetentionTurn,
    // Child workflows.
    /// [`ChildStore::start_child`](crate::ChildStore::start_child).
    StartChild,
    /// [`ChildStore::wait_for_children`](crate::ChildStore::wait_for_children).
    WaitForChildren,
    // Selects.
    /// [`SelectStore::wait_for_any`](crate::SelectStore::wait_for_any).
    WaitForAny,
    // Published state.
    /// [`StateStore::set_state`](crate::StateStore::set_state).
    SetState,
    /// [`StateStore::get_state`](crate::StateStore::get_state) and
    /// [`StateStore::list_state`](crate::StateStore::list_state).
    GetState,
    // Schedules.
    /// [`ScheduleStore::create_schedule`](crate::ScheduleStore::create_schedule) and
    /// [`ScheduleStore::put_schedule`](crate::ScheduleStore::put_schedule).
    CreateSchedule,
    /// [`ScheduleStore::get_schedule`](crate::ScheduleStore::get_schedule) and
    /// [`ScheduleStore::list_schedules`](crate::ScheduleStore::list_schedules).
    GetSchedule,
    /// [`ScheduleStore::pause_schedule`](crate::ScheduleStore::pause_schedule) and
    /// [`ScheduleStore::resume_schedule`](crate::ScheduleStore::resume_schedule).
    PauseSchedule,
    /// [`ScheduleStore::delete_schedule`](crate::ScheduleStore::delete_schedule).
    DeleteSchedule,
    /// [`ScheduleStore::due_schedules`](crate::ScheduleStore::due_schedules) and
    /// [`ScheduleStore::fire_schedule`](crate::ScheduleStore::fire_schedule).
    FireSchedule,
    // Named queues.
    /// [`QueueStore::put_queue`](crate::QueueStore::put_queue).
    PutQueue,
    /// [`QueueStore::get_queue`](crate::QueueStore::get_queue) and
    /// [`QueueStore::list_queues`](crate::QueueStore::list_queues).
    GetQueue,
    /// [`QueueStore::delete_queue`](crate::QueueStore::delete_queue).
    DeleteQueue,
    // The overview.
    /// [`OverviewStore::queue_backlogs`](crate::OverviewStore::queue_backlogs).
    QueueBacklogs,
    /// [`OverviewStore::list_workers`](crate::OverviewStore::list_workers).
    ListWorkers,
    /// [`OverviewStore::finished_runs`](crate::OverviewStore::finished_runs).
    FinishedRuns,
}

impl Operation {
    /// What the store was doing, as a phrase: "claiming workflow runs".
    pub const fn description(self) -> &'static str {
        match self {
            Operation::Connect => "connecting to the database",
            Operation::Migrate => "migrating the schema",
            Operation::CreateRun => "creating a workflow run",
            Operation::GetRun => "getting a workflow run",
            Operation::ListRuns => "listing workflow runs",
            Operation::CountRuns => "counting workflow runs",
            Operation::ClaimRuns => "claiming workflow runs",
            Operation::ExtendLease => "extending a lease",
            Operation::SleepRun => "sleeping a workflow run",
            Operation::CompleteRun => "completing a workflow run",
            Operation::FailRun => "failing a workflow run",
            Operation::ReleaseRun => "releasing a workflow run",
            Operation::CancelRun => "canceling a workflow run",
            Operation::PauseRun => "pausing a workflow run",
            Operation::ResumeRun => "resuming a workflow run",
            Operation::CreateStepAttempt => "creating a step attempt",
            Operation::CompleteStepAttempt => "completing a step attempt",
            Operation::RecordStepAttempt => "recording a step attempt",
            Operation::GetStepAttempt => "getting a step attempt",
            Operation::ListStepAttempts => "listing step attempts",
            Operation::StepHistory => "loading step history",
            Operation::Subscribe => "listening for notifications",
            Operation::Heartbeat => "recording a worker heartbeat",
            Operation::RemoveWorker => "removing a worker's heartbeat",
            Operation::SendEvent => "sending an event to a workflow run",
            Operation::SignalWithStart => {
                "sending an event to a workflow run, starting it if need be"
            }
            Operation::WaitForEvent => "waiting for an event",
            Operation::ListEvents => "listing the events of a workflow run",
            Operation::RetryRun => "retrying a workflow run",
            Operation::ForkRun => "forking a workflow run",
            Operation::ContinueRun => "continuing a workflow run as a new run",
            Operation::LineageHead => "finding the current run of a lineage",
            Operation::PurgeRuns => "purging finished workflow runs",
            Operation::RetentionTurn => "taking the retention turn",
            Operation::StartChild => "starting a child workflow run",
            Operation::WaitForChildren => "waiting for child workflow runs",
            Operation::WaitForAny => "waiting for the first of several things",
            Operation::SetState => "publishing state of a workflow run",
            Operation::GetState => "reading the published state of a workflow run",
            Operation::CreateSchedule => "creating a schedule",
            Operation::GetSchedule => "reading schedules",
            Operation::PauseSchedule => "pausing or resuming a schedule",
            Operation::DeleteSchedule => "deleting a schedule",
            Operation::FireSchedule => "firing a schedule",
            Operation::PutQueue => "configuring a queue",
            Operation::GetQueue => "reading queues",
            Operation::DeleteQueue => "deleting a queue",
            Operation::QueueBacklogs => "reading the backlog of queues",
            Operation::ListWorkers => "listing workers",
            Operation::FinishedRuns => "counting finished workflow runs",
        }
    }

    /// The verb a [`StoreError::WrongState`] shows: "cannot *cancel* workflow run ...".
    pub const fn verb(self) -> &'static str {
        match self {
            Operation::CancelRun => "cancel",
            Operation::PauseRun => "pause",
            Operation::ResumeRun => "resume",
            Operation::RetryRun => "retry",
            Operation::ForkRun => "fork",
            Operation::SleepRun => "sleep",
            Operation::CompleteRun => "complete",
            Operation::ContinueRun => "continue as new",
            Operation::FailRun => "fail",
            Operation::ReleaseRun => "release",
            Operation::ExtendLease => "extend the lease of",
            Operation::CreateStepAttempt => "add a step to",
            Operation::CompleteStepAttempt => "complete a step of",
            Operation::RecordStepAttempt => "record a step of",
            Operation::ClaimRuns => "claim",
            Operation::SendEvent | Operation::SignalWithStart => "send an event to",
            Operation::WaitForEvent => "wait for an event in",
            Operation::StartChild => "start a child of",
            Operation::WaitForChildren => "wait for the children of",
            Operation::WaitForAny => "select in",
            Operation::SetState => "publish state of",
            _ => "change",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.description())
    }
}

/// An operation on a run or step that a store refused or could not carry out.
///
/// Match on the variant to tell a missing run from one in the wrong state, or a worker that
/// lost its lease from a database failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run with this id exists in the store's namespace.
    #[error("workflow run {id} does not exist")]
    RunNotFound {
        /// The id that was looked up.
        id: Uuid,
    },
    /// No step attempt with this id exists for the run in the store's namespace.
    #[error("step attempt {id} does not exist")]
    StepNotFound {
        /// The id that was looked up.
        id: Uuid,
    },
    /// The store does not implement a capability of the contract (events, schedules, ...)
    /// that the operation needs. Nothing was written.
    #[error("the store of namespace {namespace:?} does not support {capability}")]
    Unsupported {
        /// The capability that is missing.
        capability: Capability,
        /// The namespace of the store that was asked.
        namespace: String,
    },
    /// The run exists but has no step attempt with this (resolved) name.
    #[error("workflow run {run_id} has no step named {step_name:?}")]
    UnknownStep {
        /// The run.
        run_id: Uuid,
        /// The step name that was looked up.
        step_name: String,
    },
    /// The run exists but its status forbids the operation.
    #[error("cannot {} workflow run {id} with status {status}", operation.verb())]
    WrongState {
        /// The run.
        id: Uuid,
        /// What was attempted.
        operation: Operation,
        /// The status the run is in.
        status: RunStatus,
    },
    /// The run is running, but not under the writer's claim: another worker holds it, or
    /// it was claimed again since (by another worker or by the same one, whose earlier
    /// execution's writes are then refused; see [`Holder`](crate::Holder)).
    #[error(
        "worker {worker_id} (claim {claim_epoch}) no longer holds the lease on workflow run {id}"
    )]
    LeaseLost {
        /// The run.
        id: Uuid,
        /// The worker that thought it held the lease.
        worker_id: String,
        /// The claim epoch it thought it held the run by.
        claim_epoch: i64,
    },
    /// The step attempt exists but is no longer running, so it cannot be finished again.
    #[error("step attempt {id} is already {status}")]
    StepAlreadyFinished {
        /// The attempt.
        id: Uuid,
        /// Its status.
        status: crate::model::StepStatus,
    },
    /// A pagination cursor that this store did not produce.
    #[error("invalid cursor: {reason}")]
    InvalidCursor {
        /// What is wrong with it.
        reason: String,
    },
    /// An argument the store cannot accept (for example a negative limit).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A value exceeds one of the [`limits`](crate::limits) every store enforces (too long,
    /// too large, too deep, NUL, an instant or duration out of range). Checked before the
    /// database sees anything: nothing was written.
    #[error(transparent)]
    Limit(#[from] crate::limits::LimitError),
    /// The database failed while carrying out `operation`.
    #[error("database error while {operation}: {source}")]
    Database {
        /// What the store was doing.
        operation: Operation,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A row in the database could not be decoded (a status unknown to this version, ...).
    #[error("corrupt row while {operation}: {reason}")]
    Corrupt {
        /// What the store was doing.
        operation: Operation,
        /// What could not be decoded.
        reason: String,
    },
    /// No run of this workflow has this idempotency key in the store's namespace (an event
    /// addressed by workflow and key, see [`EventTarget`](crate::events::EventTarget)).
    #[error("no workflow run of {workflow_name} has the idempotency key {idempotency_key:?}")]
    RunKeyNotFound {
        /// The workflow name that was looked up.
        workflow_name: String,
        /// The idempotency key that was looked up.
        idempotency_key: String,
    },
    /// A purge asked for runs in a live status: only completed, failed and canceled runs
    /// are ever purged. Nothing was deleted.
    #[error("a purge deletes only completed, failed or canceled runs, not {status} ones")]
    NotTerminal {
        /// The live status that was asked for.
        status: RunStatus,
    },
    // Schedules.
    /// No schedule with this name exists in the store's namespace.
    #[error("schedule {name:?} does not exist")]
    ScheduleNotFound {
        /// The name that was looked up.
        name: String,
    },
    // Named queues.
    /// No queue with this name is configured in the store's namespace.
    #[error("queue {name:?} is not configured")]
    QueueNotFound {
        /// The name that was looked up.
        name: String,
    },
    /// A schedule with this name already exists in the store's namespace (a create; a
    /// declarative schedule is put, which replaces it).
    #[error("schedule {name:?} already exists")]
    ScheduleExists {
        /// The name.
        name: String,
    },
    /// The stored row of this run could not be decoded (JSON a decoder refuses, a status
    /// unknown to this version, ...): [`StoreError::Corrupt`] for a row whose id is known.
    /// A step attempt row is a [`StoreError::CorruptStep`] instead (this only when even the
    /// step row's own id does not read). A claim never returns this: it fails such a run
    /// for good instead (see [`LeaseStore::claim_runs`](crate::LeaseStore::claim_runs)),
    /// after which the run reads again.
    #[error("corrupt row of workflow run {id} while {operation}: {reason}")]
    CorruptRun {
        /// The run.
        id: Uuid,
        /// What the store was doing.
        operation: Operation,
        /// What could not be decoded.
        reason: String,
    },
    /// A stored step attempt row of run `run_id` could not be decoded: its `column` holds a
    /// value this version cannot read (JSON a decoder refuses, a status or kind unknown to
    /// this version, a value of another type). Every read of the row returns it, whether a
    /// step history, a page of attempts or one attempt, instead of a database error or a
    /// guessed value. A worker whose run's step history returns it fails the run for good
    /// (kind `corrupt`), leaving the row for inspection; trying again gives the same answer.
    #[error(
        "corrupt step attempt {step_id} (step {step_name:?}) of workflow run {run_id} while \
         {operation}: column `{column}` does not decode: {reason}"
    )]
    CorruptStep {
        /// The run the attempt belongs to.
        run_id: Uuid,
        /// The step attempt's id.
        step_id: Uuid,
        /// The step's name, as stored.
        step_name: String,
        /// The column that does not decode.
        column: &'static str,
        /// What the store was doing.
        operation: Operation,
        /// Why the column does not decode.
        reason: String,
    },
}

impl StoreError {
    /// `true` when the error says the run or step does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            StoreError::RunNotFound { .. }
                | StoreError::StepNotFound { .. }
                | StoreError::RunKeyNotFound { .. }
                | StoreError::UnknownStep { .. }
                | StoreError::ScheduleNotFound { .. }
                | StoreError::QueueNotFound { .. }
        )
    }

    /// `true` when the database failed (a lost connection, a restart, a timeout): the
    /// operation may be tried again. Refusals (not found, wrong state, lease lost), invalid
    /// arguments and corrupt rows are not: trying again gives the same answer.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Database { .. })
    }

    /// The [`StoreError::Unsupported`] of a store of `namespace` without `capability`.
    pub fn unsupported(capability: Capability, namespace: &str) -> Self {
        StoreError::Unsupported {
            capability,
            namespace: namespace.to_owned(),
        }
    }

    /// A [`StoreError::Database`] of `operation` caused by `source`.
    pub fn database(operation: Operation, source: impl Into<BoxError>) -> Self {
        StoreError::Database {
            operation,
            source: source.into(),
        }
    }
}

/// A part of the store contract that a backend may leave out: each is one trait of
/// [`crate::store`], reached through its accessor on [`Store`](crate::Store) (which a store
/// without it answers with [`StoreError::Unsupported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Cancel, pause, resume, retry and fork ([`LifecycleStore`](crate::LifecycleStore)).
    Lifecycle,
    /// Events sent to runs ([`EventStore`](crate::EventStore)).
    Events,
    /// Child workflows ([`ChildStore`](crate::ChildStore)).
    Children,
    /// Published state ([`StateStore`](crate::StateStore)).
    PublishedState,
    /// Cron schedules ([`ScheduleStore`](crate::ScheduleStore)).
    Schedules,
    /// Named queues and their limits ([`QueueStore`](crate::QueueStore)).
    Queues,
    /// Purging finished runs ([`RetentionStore`](crate::RetentionStore)).
    Retention,
    /// The figures of an operator's overview ([`OverviewStore`](crate::OverviewStore)).
    Overview,
    /// Waiting for the first of several events, timers and children
    /// ([`SelectStore`](crate::SelectStore)).
    Select,
    /// Continue-as-new ([`ContinueStore`](crate::ContinueStore)).
    Continuation,
}

impl Capability {
    /// What the capability is, in a few words ("events sent to runs").
    pub fn description(self) -> &'static str {
        match self {
            Capability::Lifecycle => "cancel, pause, resume, retry and fork",
            Capability::Events => "events sent to runs",
            Capability::Children => "child workflows",
            Capability::PublishedState => "published state",
            Capability::Schedules => "schedules",
            Capability::Queues => "named queues",
            Capability::Retention => "purging finished runs",
            Capability::Overview => "the overview's figures",
            Capability::Select => "waiting for the first of several things",
            Capability::Continuation => "continue-as-new",
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.description())
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Builds a closure that wraps a driver error with the operation that failed, for
/// `map_err`: `.map_err(db(Operation::CreateRun))`.
pub fn db<E: Into<BoxError>>(operation: Operation) -> impl FnOnce(E) -> StoreError {
    move |source| StoreError::database(operation, source)
}
