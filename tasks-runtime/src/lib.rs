//! The engine of `tasks`: registry, client, worker, executor, replay (and its offline
//! check before a deploy, [`verify`]) and the workflow context, driving the store contract
//! of `tasks-core`. Users depend on the `tasks` facade
//! crate, which re-exports what they need from here.
#![warn(missing_docs)]

pub mod client;
mod context;
pub mod definition;
mod executor;
mod liveness;
pub mod metrics;
mod purge;
pub mod registry;
mod replay;
pub mod saga;
#[cfg(feature = "schedules")]
mod scheduler;
mod session;
mod step_args;
pub mod step_failure;
pub mod verify;
pub mod worker;

#[doc(hidden)]
pub mod private;

/// The Postgres store: the `tasks-postgres` crate.
#[cfg(feature = "postgres")]
pub use tasks_postgres as postgres;
// The records, limits, failures, retry policy and the store contract are `tasks-core`'s,
// under the paths they have always had here.
pub use tasks_core::{
    children, clock, continuation, error, events, failure, flow, holder, idempotency, limits,
    model, queue, retention, retry, schedule, select, state, store, trace,
};
use tasks_core::{migration, transition};

pub use children::{
    ChildOutcome, ChildWait, ParentCancel, StartChild, StartedChild, WaitForChildren,
};
pub use client::{
    Awaited, Client, ClientError, RunError, RunHandle, SendEventBuilder, SignalWithStartBuilder,
    Signalled, StartBuilder, StartOptions, Started, WAIT_SAFETY_REREAD, WaitError,
};
pub use clock::{Clock, ClockError};
pub use context::WorkflowContext;
pub use context::branches::Branch;
pub use context::children::{ChildError, ChildHandle, ChildOptions};
pub use context::events::EventOutcome;
pub use context::select::Select;
pub use continuation::{ContinueRun, ContinueStore, ContinuedRun};
pub use definition::{
    SourceLocation, StepDefinition, StepRegistration, Workflow, WorkflowDefinition, WorkflowInput,
    WorkflowOutput,
};
pub use error::{BoxError, Capability, Operation, StoreError, StoreResult};
pub use events::{
    Event, EventTarget, EventWait, RunEvent, SendEvent, SentEvent, SignalWithStart, SignalledRun,
    WaitForEvent,
};
pub use failure::{ErrorRecord, RecordError, RetryAfter, WorkflowError};
pub use flow::{Concurrency, ConcurrencyKeyError, DeriveKeyError, DerivedConcurrency};
pub use holder::Holder;
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
pub use saga::{CompensationError, CompensationFailure, Saga};
#[cfg(feature = "schedules")]
pub use schedule::{Cadence, ScheduleError};
pub use schedule::{CatchUp, NewSchedule, Schedule};
pub use state::{PublishedState, SetState, StateSet};
pub use step_failure::{ReplayError, StepFailure};
pub use store::{
    ChildStore, ClaimedRun, CreateRun, CreateStepAttempt, Cursor, DEFAULT_NAMESPACE, EventStore,
    FailRun, LeaseStore, LifecycleStore, ListRuns, ListStepAttempts, Notification,
    NotificationStream, Order, Page, QueueStore, RecordStepAttempt, RetentionStore, RunStore,
    ScheduleStore, SharedStore, StateStore, StepStore, StepUpdate, Store,
};
pub use tokio_util::sync::CancellationToken;
pub use trace::{TraceContext, TraceContextError};
pub use verify::{VerifyOptions, VerifyReport, verify_replay};

/// The `chrono` crate: every timestamp of this API is a `chrono::DateTime<Utc>`. Re-exported
/// so that your `chrono` is always the version this crate was built with.
pub use chrono;
/// The `rand` crate (0.9): the generator of [`WorkflowContext::rng`] implements its traits.
/// Re-exported so that your `Rng` trait is always the one it implements.
pub use rand;
/// The `rand_chacha` crate: the type of [`WorkflowContext::rng`]'s generator.
pub use rand_chacha;
/// The `uuid` crate: runs and step attempts are named by `uuid::Uuid`. Re-exported so that
/// your `uuid` is always the version this crate was built with.
pub use uuid;
pub use worker::{UnknownWorkflowPolicy, Worker, WorkerBuilder, WorkerError, WorkerHandle};

// The embedded SQLite store, and choosing a store from `DATABASE_URL`.
mod connect;
/// The in-memory store: the `tasks-memory` crate.
#[cfg(feature = "memory")]
pub use tasks_memory as memory;
/// The embedded SQLite store: the `tasks-sqlite` crate.
#[cfg(feature = "sqlite")]
pub use tasks_sqlite as sqlite;
#[cfg(feature = "testing")]
pub mod testing;
pub use connect::{
    ConnectError, DATABASE_URL_VAR, DEFAULT_DATABASE_URL, connect, connect_from_env,
    connect_unmigrated, database_url_from_env,
};
