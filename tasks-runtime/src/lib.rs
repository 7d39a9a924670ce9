//! Runtime of `tasks`: store, worker, replay executor and client. Users depend on the
//! `tasks` facade crate, which re-exports everything here.
#![warn(missing_docs)]
// Without a store feature only the contract is compiled (for a third backend); the helpers
// the two stores share are then unused.
#![cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]

pub mod children;
pub mod client;
pub mod clock;
mod context;
pub mod definition;
pub mod error;
pub mod events;
mod executor;
pub mod failure;
mod finite;
pub mod flow;
pub mod idempotency;
pub mod limits;
mod liveness;
pub mod metrics;
mod migration;
pub mod model;
#[cfg(feature = "postgres")]
pub mod postgres;
mod purge;
pub mod queue;
pub mod registry;
mod replay;
pub mod retention;
pub mod retry;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod row;
pub mod schedule;
#[cfg(feature = "schedules")]
mod scheduler;
mod session;
pub mod state;
mod step_args;
pub mod step_failure;
pub mod store;
pub mod trace;
mod transition;
pub mod worker;

#[doc(hidden)]
pub mod private;

pub use children::{
    ChildOutcome, ChildWait, ParentCancel, StartChild, StartedChild, WaitForChildren,
};
pub use client::{
    Client, ClientError, RunError, RunHandle, SendOptions, StartOptions, StateWaitError,
    WAIT_SAFETY_REREAD, WaitError,
};
pub use clock::{Clock, ClockError};
pub use context::WorkflowContext;
pub use context::branches::Branch;
pub use context::children::{ChildError, ChildHandle, ChildOptions};
pub use context::events::EventOutcome;
pub use definition::{
    SourceLocation, StepDefinition, StepRegistration, Workflow, WorkflowDefinition, WorkflowInput,
    WorkflowOutput,
};
pub use error::{BoxError, Operation, StoreError, StoreResult};
pub use events::{Event, EventTarget, EventWait, RunEvent, SendEvent, SentEvent, WaitForEvent};
pub use failure::{ErrorRecord, RecordError, RetryAfter, WorkflowError};
pub use flow::{Concurrency, ConcurrencyKeyError, DeriveKeyError, DerivedConcurrency};
pub use idempotency::IdempotencyScope;
pub use limits::LimitError;
pub use migration::{MigrateError, Migration};
pub use model::{RunStatus, StepAttempt, StepKind, StepStatus, WorkflowRun};
pub use queue::{ClaimFilter, DEFAULT_QUEUE, Queue, QueueOptions, RateLimit};
#[allow(deprecated)]
pub use registry::DuplicateWorkflow;
pub use registry::{InvalidInput, Registry, RegistryError, Violation};
pub use replay::{CallIdentity, NonDeterminism};
pub use retention::{FinishedBefore, PurgeRuns};
pub use retry::RetryPolicy;
#[cfg(feature = "schedules")]
pub use schedule::{Cadence, ScheduleError};
pub use schedule::{CatchUp, NewSchedule, Schedule};
pub use state::{PublishedState, SetState, StateSet};
pub use step_failure::{ReplayError, StepFailure};
pub use store::{
    ClaimedRun, CreateRun, CreateStepAttempt, Cursor, DEFAULT_NAMESPACE, FailRun, ListRuns,
    ListStepAttempts, Notification, NotificationStream, Order, Page, RecordStepAttempt,
    SharedStore, StepUpdate, Store,
};
pub use tokio_util::sync::CancellationToken;
pub use trace::{TraceContext, TraceContextError};

/// The `chrono` crate: every timestamp of this API is a `chrono::DateTime<Utc>`. Re-exported
/// so that your `chrono` is always the version this crate was built with.
pub use chrono;
/// The `uuid` crate: runs and step attempts are named by `uuid::Uuid`. Re-exported so that
/// your `uuid` is always the version this crate was built with.
pub use uuid;
pub use worker::{UnknownWorkflowPolicy, Worker, WorkerBuilder, WorkerError, WorkerHandle};

// The embedded SQLite store, and choosing a store from `DATABASE_URL`.
mod connect;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
pub use connect::{
    ConnectError, DATABASE_URL_VAR, DEFAULT_DATABASE_URL, connect, connect_from_env,
    database_url_from_env,
};
