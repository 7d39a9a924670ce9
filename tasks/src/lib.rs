//! Durable workflows for Rust, written as ordinary async functions and stored in Postgres.
//!
//! A `#[step]` is an async function whose output is stored once it completes. A
//! `#[workflow]` is an async function that calls steps; when its worker dies, another worker
//! replays it, and completed steps return their stored output instead of running again.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use tasks::prelude::*;
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
//! struct Order {
//!     id: u64,
//!     amount_cents: u64,
//! }
//!
//! #[step(retry(max_attempts = 5, initial_interval = "200ms"))]
//! async fn charge(order: &Order) -> Result<String, std::io::Error> {
//!     Ok(format!("ch_{}", order.id)) // a real side effect goes here
//! }
//!
//! /// Charges an order, then waits before closing it.
//! #[workflow(name = "checkout", version = "2")]
//! async fn checkout(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
//!     let charge_id = charge(&order).await?; // runs once, memoized
//!     ctx.sleep("cool-off", Duration::from_secs(3600)).await?; // durable timer
//!     Ok(charge_id)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let store = tasks::postgres::PgStore::connect("postgres://postgres@127.0.0.1/app").await?;
//!     store.migrate().await?;
//!
//!     // Executes every #[workflow] linked into this binary.
//!     let worker = Worker::builder(store.clone()).concurrency(16).build()?.spawn();
//!
//!     let client = Client::new(store)?;
//!     let run = checkout::start(&client, Order { id: 7, amount_cents: 1999 }).await?;
//!     println!("charged: {}", run.result().await?);
//!     worker.shutdown().await;
//!     Ok(())
//! }
//! ```
//!
//! - [`workflow`] and [`step`] are the attributes; misuse is a compile error on your tokens.
//! - [`Worker`] claims and executes runs; [`Client`] starts, awaits, lists and operates on
//!   them; [`postgres::PgStore`] is the production store ([`connect`] chooses one from a
//!   URL, and [`store`] is the contract every store implements).
//! - Step calls resolve their names in call order (`name`, `name:1`, ...). Outside a running
//!   workflow a step is a plain function call.
//! - Every start is a [`StartBuilder`] (`client.start::<W>(input)`,
//!   `client.start_by_name(name, json)`), every send a [`SendEventBuilder`]; each call of the
//!   client returns one of [`ClientError`], [`RunError`], [`WaitError`] and [`StoreError`]
//!   (the [`guide::errors`] chapter says which, and how the smaller errors nest in them).
//! - The [`guide`] is the manual: the path of a run through the crates, and one chapter
//!   for each part (semantics, versioning, errors, limits, testing, the command line, the
//!   dashboard, metrics and traces, features, stores).
#![warn(missing_docs)]

pub use tasks_macros::{step, workflow};

// Starting runs, awaiting them, operating on them.
pub use tasks_runtime::{
    Client, RunHandle, SendEventBuilder, SignalWithStartBuilder, Signalled, StartBuilder,
    StartOptions, Started, WAIT_SAFETY_REREAD,
};
// Executing runs.
pub use tasks_runtime::{
    CancellationToken, UnknownWorkflowPolicy, Worker, WorkerBuilder, WorkerHandle,
};
// Workflow code: the context, its primitives, and the errors steps and workflows return.
pub use tasks_runtime::{
    Branch, ChildHandle, ChildOptions, ErrorRecord, Event, EventOutcome, RecordError, ReplayError,
    RetryAfter, RetryPolicy, Select, StepFailure, WorkflowContext, WorkflowError,
};
// Replay verification before a deploy.
pub use tasks_runtime::verify;
pub use tasks_runtime::{VerifyOptions, VerifyReport, verify_replay};
// Compensation (sagas).
pub use tasks_runtime::saga;
pub use tasks_runtime::{CompensationError, Saga};
// The workflows linked into the binary.
pub use tasks_runtime::{
    Registry, SourceLocation, StepDefinition, Workflow, WorkflowDefinition, WorkflowInput,
    WorkflowOutput,
};
// Records and queries.
pub use tasks_runtime::{
    Cursor, EventTarget, FinishedBefore, IdempotencyScope, ListRuns, ListStepAttempts, Order, Page,
    PublishedState, PurgeRuns, RunEvent, RunStatus, SentEvent, StepAttempt, StepKind, StepStatus,
    TraceContext, WorkflowRun,
};
// Queues and schedules.
#[cfg(feature = "schedules")]
pub use tasks_runtime::Cadence;
pub use tasks_runtime::{
    CatchUp, DEFAULT_QUEUE, NewSchedule, Queue, QueueOptions, RateLimit, Schedule,
};
// Stores: choosing one, and the handle that workers and clients share.
pub use tasks_runtime::{
    Clock, DATABASE_URL_VAR, DEFAULT_DATABASE_URL, DEFAULT_NAMESPACE, SharedStore, connect,
    connect_from_env, connect_unmigrated, database_url_from_env,
};
// Errors.
#[cfg(feature = "schedules")]
pub use tasks_runtime::ScheduleError;
pub use tasks_runtime::{
    Awaited, CallIdentity, ChildError, ClientError, ClockError, ConcurrencyKeyError, ConnectError,
    DeriveKeyError, InvalidInput, LimitError, MigrateError, NonDeterminism, RegistryError,
    RunError, StoreError, TraceContextError, Violation, WaitError, WorkerError,
};

/// The `chrono` crate: every timestamp of this API is a `chrono::DateTime<Utc>`. Re-exported
/// so that your `chrono` is always the version this crate was built with.
pub use tasks_runtime::chrono;
/// The `rand` crate (0.9): the generator of [`WorkflowContext::rng`] implements its traits.
/// Re-exported so that your `Rng` trait is always the one it implements.
pub use tasks_runtime::rand;
/// The `rand_chacha` crate: the type of [`WorkflowContext::rng`]'s generator.
pub use tasks_runtime::rand_chacha;
/// The `uuid` crate: runs and step attempts are named by `uuid::Uuid`. Re-exported so that
/// your `uuid` is always the version this crate was built with.
pub use tasks_runtime::uuid;

/// The values every store refuses (names, keys, payloads, instants, durations) and the
/// checks the client makes before a store sees them; see the guide's `limits` chapter.
pub use tasks_runtime::limits;
/// The in-memory store: the `tasks-memory` crate.
#[cfg(feature = "memory")]
pub use tasks_runtime::memory;
/// The Postgres store: the `tasks-postgres` crate.
#[cfg(feature = "postgres")]
pub use tasks_runtime::postgres;
/// The embedded SQLite store: the `tasks-sqlite` crate.
#[cfg(feature = "sqlite")]
pub use tasks_runtime::sqlite;
#[cfg(feature = "testing")]
pub use tasks_runtime::testing;

/// The store contract, for code that implements a store or wraps one (to count calls, to
/// inject faults): the [`Store`](store::Store) trait and one trait per capability, their
/// parameters and records, by module. An application does not need it: it reaches its
/// runs through [`Client`] and [`Worker`], which take a [`SharedStore`]. The guide's
/// `stores` chapter says how to write a store; a store crate depends on `tasks-core`, where
/// all of this is defined.
pub mod store {
    pub use tasks_runtime::store::*;
    pub use tasks_runtime::{
        BoxError, Capability, ChildOutcome, ChildWait, ClaimFilter, Concurrency, ContinueRun,
        ContinuedRun, DerivedConcurrency, EventWait, Holder, Migration, Operation, ParentCancel,
        SendEvent, SetState, SignalWithStart, SignalledRun, StartChild, StartedChild, StateSet,
        StoreResult, WaitForChildren, WaitForEvent,
    };
    pub use tasks_runtime::{
        children, clock, continuation, error, events, failure, flow, holder, idempotency, model,
        queue, retention, retry, schedule, state, trace,
    };
}

/// The names most programs need: `use tasks::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Client, RunHandle, RunStatus, Worker, WorkflowContext, WorkflowError, step, workflow,
    };
}

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "dashboard")]
pub mod dashboard;
#[cfg(any(feature = "cli", feature = "dashboard"))]
mod display;
pub mod guide;
#[cfg(feature = "http-api")]
pub mod http_api;
pub mod metrics;

/// Support for the code `#[workflow]` and `#[step]` generate; not an API.
#[doc(hidden)]
pub mod __private {
    pub use tasks_runtime::private::*;
}
