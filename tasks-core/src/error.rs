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
    /// [`Store::create_run`](crate::Store::create_run).
    CreateRun,
    /// [`Store::get_run`](crate::Store::get_run).
    GetRun,
    /// [`Store::list_runs`](crate::Store::list_runs).
    ListRuns,
    /// [`Store::count_runs`](crate::Store::count_runs).
    CountRuns,
    /// [`Store::claim_runs`](crate::Store::claim_runs).
    ClaimRuns,
    /// [`Store::extend_lease`](crate::Store::extend_lease).
    ExtendLease,
    /// [`Store::sleep_run`](crate::Store::sleep_run).
    SleepRun,
    /// [`Store::complete_run`](crate::Store::complete_run).
    CompleteRun,
    /// [`Store::fail_run`](crate::Store::fail_run).
    FailRun,
    /// [`Store::release_run`](crate::Store::release_run).
    ReleaseRun,
    /// [`Store::cancel_run`](crate::Store::cancel_run).
    CancelRun,
    /// [`Store::pause_run`](crate::Store::pause_run).
    PauseRun,
    /// [`Store::resume_run`](crate::Store::resume_run).
    ResumeRun,
    /// [`Store::create_step_attempt`](crate::Store::create_step_attempt).
    CreateStepAttempt,
    /// [`Store::complete_step_attempt`](crate::Store::complete_step_attempt).
    CompleteStepAttempt,
    /// [`Store::record_step_attempt`](crate::Store::record_step_attempt).
    RecordStepAttempt,
    /// [`Store::get_step_attempt`](crate::Store::get_step_attempt).
    GetStepAttempt,
    /// [`Store::list_step_attempts`](crate::Store::list_step_attempts).
    ListStepAttempts,
    /// [`Store::step_history`](crate::Store::step_history).
    StepHistory,
    /// [`Store::subscribe`](crate::Store::subscribe), and the listener behind it.
    Subscribe,
    /// [`Store::heartbeat`](crate::Store::heartbeat).
    Heartbeat,
    /// [`Store::remove_worker`](crate::Store::remove_worker).
    RemoveWorker,
    // Events sent to a run.
    /// [`Store::send_event`](crate::Store::send_event).
    SendEvent,
    /// [`Store::wait_for_event`](crate::Store::wait_for_event).
    WaitForEvent,
    /// [`Store::list_events`](crate::Store::list_events).
    ListEvents,
    /// [`Store::retry_run`](crate::Store::retry_run).
    RetryRun,
    /// [`Store::fork_run`](crate::Store::fork_run).
    ForkRun,
    // Retention.
    /// [`Store::purge_runs`](crate::Store::purge_runs).
    PurgeRuns,
    /// [`Store::take_retention_turn`](crate::Store::take_retention_turn).
    RetentionTurn,
    // Child workflows.
    /// [`Store::start_child`](crate::Store::start_child).
    StartChild,
    /// [`Store::wait_for_children`](crate::Store::wait_for_children).
    WaitForChildren,
    // Published state.
    /// [`Store::set_state`](crate::Store::set_state).
    SetState,
    /// [`Store::get_state`](crate::Store::get_state) and
    /// [`Store::list_state`](crate::Store::list_state).
    GetState,
    // Schedules.
    /// [`Store::create_schedule`](crate::Store::create_schedule) and
    /// [`Store::put_schedule`](crate::Store::put_schedule).
    CreateSchedule,
    /// [`Store::get_schedule`](crate::Store::get_schedule) and
    /// [`Store::list_schedules`](crate::Store::list_schedules).
    GetSchedule,
    /// [`Store::pause_schedule`](crate::Store::pause_schedule) and
    /// [`Store::resume_schedule`](crate::Store::resume_schedule).
    PauseSchedule,
    /// [`Store::delete_schedule`](crate::Store::delete_schedule).
    DeleteSchedule,
    /// [`Store::due_schedules`](crate::Store::due_schedules) and
    /// [`Store::fire_schedule`](crate::Store::fire_schedule).
    FireSchedule,
    // Named queues.
    /// [`Store::put_queue`](crate::Store::put_queue).
    PutQueue,
    /// [`Store::get_queue`](crate::Store::get_queue) and
    /// [`Store::list_queues`](crate::Store::list_queues).
    GetQueue,
    /// [`Store::delete_queue`](crate::Store::delete_queue).
    DeleteQueue,
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
            Operation::WaitForEvent => "waiting for an event",
            Operation::ListEvents => "listing the events of a workflow run",
            Operation::RetryRun => "retrying a workflow run",
            Operation::ForkRun => "forking a workflow run",
            Operation::PurgeRuns => "purging finished workflow runs",
            Operation::RetentionTurn => "taking the retention turn",
            Operation::StartChild => "starting a child workflow run",
            Operation::WaitForChildren => "waiting for child workflow runs",
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
            Operation::FailRun => "fail",
            Operation::ReleaseRun => "release",
            Operation::ExtendLease => "extend the lease of",
            Operation::CreateStepAttempt => "add a step to",
            Operation::CompleteStepAttempt => "complete a step of",
            Operation::RecordStepAttempt => "record a step of",
            Operation::ClaimRuns => "claim",
            Operation::SendEvent => "send an event to",
            Operation::WaitForEvent => "wait for an event in",
            Operation::StartChild => "start a child of",
            Operation::WaitForChildren => "wait for the children of",
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
    /// The run is running, but under another worker's lease (or its lease was taken over).
    #[error("worker {worker_id} no longer holds the lease on workflow run {id}")]
    LeaseLost {
        /// The run.
        id: Uuid,
        /// The worker that thought it held the lease.
        worker_id: String,
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
    /// The stored row of this run, or of one of its step attempts, could not be decoded
    /// (JSON a decoder refuses, a status unknown to this version, ...):
    /// [`StoreError::Corrupt`] for a row whose id is known. For a step row, `reason` names
    /// the attempt and its step. A claim never returns this: it fails such a run for good
    /// instead (see [`Store::claim_runs`](crate::Store::claim_runs)), after which the run
    /// reads again; a worker whose run's step history returns it fails the run for good the
    /// same way (kind `corrupt`), leaving the step rows for inspection.
    #[error("corrupt row of workflow run {id} while {operation}: {reason}")]
    CorruptRun {
        /// The run.
        id: Uuid,
        /// What the store was doing.
        operation: Operation,
        /// What could not be decoded.
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

    /// A [`StoreError::Database`] of `operation` caused by `source`.
    pub fn database(operation: Operation, source: impl Into<BoxError>) -> Self {
        StoreError::Database {
            operation,
            source: source.into(),
        }
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Builds a closure that wraps a driver error with the operation that failed, for
/// `map_err`: `.map_err(db(Operation::CreateRun))`.
pub fn db<E: Into<BoxError>>(operation: Operation) -> impl FnOnce(E) -> StoreError {
    move |source| StoreError::database(operation, source)
}
