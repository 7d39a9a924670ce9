//! The contract of `tasks`: what a run is, what a store must do with it, and the rules
//! every store executes. No driver, no worker.
//!
//! Users depend on the `tasks` facade; this crate is for whoever writes a store (a backend
//! depends on `tasks-core` and never on the engine) and for the engine itself.
//!
//! # The map
//!
//! ```text
//!  records      model (runs, step attempts, statuses)   holder (who holds a run, by which
//!               claim)   events   children   select   state
//!               queue   schedule   retention   idempotency   flow (concurrency keys)
//!               continuation (continue-as-new: a run's successor, its lineage)
//!       │
//!  limits       limits (every size and range a store holds; checked before any write)
//!  failures     failure (ErrorRecord, WorkflowError, RetryAfter)   retry (RetryPolicy)
//!       │
//!  contract     store (the `Store` trait, its parameters and pages, notifications;
//!               `store::check`: what each operation checks, first, in every store)
//!               error (StoreError, Operation)   migration (embedded schema migrations)
//!       │
//!  policy       transition (each transition's fence, landing and announcement; attempt
//!               counting, the deadline give-up; the claim order and admission walk, rate
//!               windows, slots; what a missed fence means); the primitives' rules beside
//!               their records (event wait, state versions, schedule put, key lapse)
//! ```
//!
//! Every rule is pure Rust with unit tests here. A store (`tasks-postgres`, `tasks-sqlite`)
//! renders the policy in its SQL dialect and decodes rows into the records; the in-memory
//! store (`tasks-memory`) runs the same rules in code. The engine (`tasks-runtime`) drives
//! the contract: a client creates runs, a worker claims them, replays their steps and
//! records what they did. The conformance suite (`tasks-conformance`) specifies the contract by example, and
//! a store proves itself by running it.
//!
//! # The path of a run, through the contract
//!
//! 1. A client checks a start ([`CreateRun::check`]) and calls [`RunStore::create_run`].
//! 2. A worker claims it with [`LeaseStore::claim_runs`]: the claim order and the slot rules of
//!    [`transition`] decide which runs it gets; the run is now `running` under the
//!    worker's lease, by a new claim epoch: its [`Holder`] fences the execution's writes.
//! 3. Each step is recorded ([`StepStore::record_step_attempt`]) under the claim's fence, once
//!    per attempt id whatever the retries.
//! 4. The run ends with [`LeaseStore::complete_run`] or [`LeaseStore::fail_run`] (the retry decision
//!    is [`transition::retry_after`]), or parks ([`LeaseStore::sleep_run`], an event or child
//!    wait) until a [`Notification`] wakes a worker to claim it again.
#![warn(missing_docs)]

pub mod children;
pub mod clock;
pub mod continuation;
pub mod error;
pub mod events;
pub mod failure;
mod finite;
pub mod flow;
pub mod holder;
pub mod idempotency;
pub mod limits;
pub mod migration;
pub mod model;
pub mod queue;
pub mod retention;
pub mod retry;
mod row;
pub mod schedule;
pub mod select;
pub mod state;
pub mod store;
pub mod trace;
pub mod transition;

pub use children::{
    ChildOutcome, ChildWait, ParentCancel, StartChild, StartedChild, WaitForChildren,
};
pub use clock::{Clock, ClockError};
pub use continuation::{ContinueRun, ContinueStore, ContinuedRun};
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
pub use retention::{FinishedBefore, PurgeRuns};
pub use retry::RetryPolicy;
#[cfg(feature = "schedules")]
pub use schedule::{Cadence, ScheduleError};
pub use schedule::{CatchUp, NewSchedule, Schedule};
pub use select::{AnyWait, Readiness, WaitForAny};
pub use state::{PublishedState, SetState, StateSet};
pub use store::{
    ChildStore, ClaimedRun, CreateRun, CreateStepAttempt, CreatedRun, Cursor, DEFAULT_NAMESPACE,
    EventStore, FailRun, LeaseStore, LifecycleStore, ListRuns, ListStepAttempts, Notification,
    NotificationStream, Order, OverviewStore, Page, QueueStore, RecordStepAttempt, RetentionStore,
    RunStore, ScheduleStore, SelectStore, SharedStore, StateStore, StepStore, StepUpdate, Store,
};
pub use trace::{TraceContext, TraceContextError};
