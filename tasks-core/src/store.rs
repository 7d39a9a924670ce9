//! The store contract: every durable transition of runs and step attempts.
//!
//! A [`Store`] is opened on one namespace and never reads or changes rows of another. Every
//! transition is a single statement that is fenced on the state it expects, so concurrent
//! workers, operators and stale workers cannot overwrite each other.
//!
//! # One state machine, rendered per dialect
//!
//! The policy of every transition lives once, in [`crate::transition`]:
//! the statuses it may start from, whether the caller must hold the run's lease, which
//! statuses mean "already done" (an idempotent repeat of a cancel or a pause), how a miss is
//! explained ([`StoreError::RunNotFound`], [`StoreError::LeaseLost`],
//! [`StoreError::WrongState`]) and which [`Notification`] it announces; so does the retry
//! decision of a failed run and what happens to a step attempt whose run was paused or
//! canceled. The Postgres and SQLite stores only write each transition's `SET` list and
//! statement in their SQL dialect, and the in-memory store applies it to its rows; the
//! fence, the explanation of a miss and the announcement come from the shared definition.
//!
//! # Adding a transition
//!
//! 1. Add its [`Operation`] (a description for errors and a verb for
//!    [`StoreError::WrongState`]).
//! 2. Define it as a `const Transition` in `transition/` (beside the transitions of its
//!    kind): `from`, `leased`, `done`, `announce`, `announce_status`. Unit-test its policy
//!    there.
//! 3. Add the method to the trait of the contract it belongs to ([`RunStore`],
//!    [`LeaseStore`], [`StepStore`], or a capability such as [`EventStore`]), documenting
//!    its promise and errors. Every value it takes is checked against the [`limits`]
//!    first, by the operation's function in [`check`] (the one list of which limit applies
//!    to which operation), which each store calls before anything else.
//! 4. In each store, write the `SET` list and pass it to the store's generic helper
//!    (`PgStore::transition`, `SqliteStore::transition`), which renders the fence, settles a
//!    miss and sends the announcement.
//! 5. Add conformance cases to `tasks-conformance`; every store (Postgres, SQLite, memory,
//!    and any other) runs them.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Capability, StoreError, StoreResult};
use crate::limits::LimitError;

#[cfg(doc)]
use crate::{error::Operation, limits, model::StepKind};

pub mod check;
mod decode;
mod leases;
mod lifecycle;
pub(crate) mod notify;
pub mod overview;
mod pages;
mod queues;
pub(crate) mod runs;
mod steps;

pub use decode::{UndecodableStepRow, status_of, step_column, step_status_of};
pub use leases::{LeaseStore, complete_separately};
pub use lifecycle::LifecycleStore;
pub use notify::namespace_stream;
pub use notify::{Notification, NotificationStream};
pub use overview::OverviewStore;
pub use pages::{Cursor, DEFAULT_PAGE_SIZE, ListRuns, ListStepAttempts, Order, Page};
pub use pages::{PageQuery, counts_in_order};
pub use queues::QueueStore;
pub use runs::{ClaimedRun, CreateRun, CreatedRun, DEFAULT_NAMESPACE, FailRun, RunStore};
pub use steps::{CreateStepAttempt, RecordStepAttempt, StepStore, StepUpdate};
// The capabilities live beside the records they keep; named here too, so that the whole
// contract is one module away.
pub use crate::children::ChildStore;
pub use crate::continuation::ContinueStore;
pub use crate::events::EventStore;
pub use crate::retention::RetentionStore;
pub use crate::schedule::ScheduleStore;
pub use crate::select::SelectStore;
pub use crate::state::StateStore;

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
/// [`StoreError::Corrupt`] when the row's id is unknown) when a run row could not be
/// decoded, [`StoreError::CorruptStep`] (see [`UndecodableStepRow`]) for a step row,
/// and [`StoreError::Limit`] for a value past the [`limits`] (checked before the database
/// sees anything, by the operation's function in [`check`]; nothing is written). Worker-side transitions (those taking a [`Holder`](crate::Holder): a worker and its
/// claim) fail with [`StoreError::RunNotFound`] for an unknown run,
/// [`StoreError::LeaseLost`] when the run is running under another claim (another worker's,
/// or a later claim of the same worker), and [`StoreError::WrongState`] (naming the status) when it
/// is not running; they never change a run they refused.
///
/// The conformance suite (`tasks-conformance`) specifies every method by example; a store
/// proves itself by running it with one macro call.
///
/// # The traits of the contract
///
/// `Store` is the root: its namespace, its notifications and the accessors of the
/// capabilities. Every store implements it with three traits it requires: [`RunStore`]
/// (runs as records), [`LeaseStore`] (claims, leases and the end of a run) and
/// [`StepStore`] (step attempts). The primitives are capabilities, one trait each, that a
/// store implements when it can and returns from its accessor (all nine at once with
/// [`every_capability!`](crate::every_capability)): [`LifecycleStore`],
/// [`EventStore`], [`ChildStore`], [`StateStore`], [`ScheduleStore`], [`QueueStore`],
/// [`RetentionStore`], [`OverviewStore`], [`SelectStore`] and [`ContinueStore`]. The engine asks for the capability it uses
/// (`store.events()?.send_event(...)`), and a store without it answers
/// [`StoreError::Unsupported`] naming it; nothing panics.
#[async_trait]
pub trait Store: RunStore + LeaseStore + Send + Sync + 'static {
    /// The namespace this store reads and writes.
    fn namespace(&self) -> &str;

    /// The same store (same connections, same background work) scoped to another namespace.
    ///
    /// Errors: a [`LimitError`] for a namespace past the [`limits`] (check it with
    /// [`limits::check_namespace`]): no store is made that would hand the database a
    /// namespace it cannot take, so every later call, by id or not, is safe.
    fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError>;

    /// Subscribes to the notifications of this store's namespace. Dropped connections are
    /// reconnected behind the stream, which then yields [`Notification::Missed`].
    ///
    /// Besides the wake-ups and finishes named by each method, a store announces
    /// [`Notification::StatusChanged`] after every write that leaves a run sleeping
    /// ([`LeaseStore::sleep_run`], a parked [`EventStore::wait_for_event`]), paused
    /// ([`LifecycleStore::pause_run`]), pending ([`LifecycleStore::resume_run`], [`LifecycleStore::retry_run`], a
    /// [`LeaseStore::fail_run`] that retries, [`LeaseStore::release_run`]) or running (each run of
    /// [`LeaseStore::claim_runs`]); waiters on a status rely on it (the conformance module
    /// `status`).
    async fn subscribe(&self) -> StoreResult<NotificationStream>;

    /// This store's lifecycle operations (cancel, pause, resume, retry, fork): `Ok(self)` in a store that implements
    /// [`LifecycleStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Lifecycle`].
    fn lifecycle(&self) -> StoreResult<&dyn LifecycleStore> {
        Err(StoreError::unsupported(
            Capability::Lifecycle,
            self.namespace(),
        ))
    }

    /// This store's events sent to runs: `Ok(self)` in a store that implements
    /// [`EventStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Events`].
    fn events(&self) -> StoreResult<&dyn EventStore> {
        Err(StoreError::unsupported(
            Capability::Events,
            self.namespace(),
        ))
    }

    /// This store's child workflows: `Ok(self)` in a store that implements
    /// [`ChildStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Children`].
    fn children(&self) -> StoreResult<&dyn ChildStore> {
        Err(StoreError::unsupported(
            Capability::Children,
            self.namespace(),
        ))
    }

    /// This store's published state: `Ok(self)` in a store that implements
    /// [`StateStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::PublishedState`].
    fn published_state(&self) -> StoreResult<&dyn StateStore> {
        Err(StoreError::unsupported(
            Capability::PublishedState,
            self.namespace(),
        ))
    }

    /// This store's schedules: `Ok(self)` in a store that implements
    /// [`ScheduleStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Schedules`].
    fn schedules(&self) -> StoreResult<&dyn ScheduleStore> {
        Err(StoreError::unsupported(
            Capability::Schedules,
            self.namespace(),
        ))
    }

    /// This store's named queues: `Ok(self)` in a store that implements
    /// [`QueueStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Queues`].
    fn queues(&self) -> StoreResult<&dyn QueueStore> {
        Err(StoreError::unsupported(
            Capability::Queues,
            self.namespace(),
        ))
    }

    /// This store's overview figures (queue backlogs, workers, runs finished lately):
    /// `Ok(self)` in a store that implements [`OverviewStore`]; the default is
    /// [`StoreError::Unsupported`] naming [`Capability::Overview`].
    fn overview(&self) -> StoreResult<&dyn OverviewStore> {
        Err(StoreError::unsupported(
            Capability::Overview,
            self.namespace(),
        ))
    }

    /// This store's continue-as-new: `Ok(self)` in a store that implements
    /// [`ContinueStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Continuation`].
    fn continuation(&self) -> StoreResult<&dyn ContinueStore> {
        Err(StoreError::unsupported(
            Capability::Continuation,
            self.namespace(),
        ))
    }

    /// This store's retention (purging finished runs): `Ok(self)` in a store that implements
    /// [`RetentionStore`]; the default is [`StoreError::Unsupported`] naming
    /// [`Capability::Retention`].
    fn retention(&self) -> StoreResult<&dyn RetentionStore> {
        Err(StoreError::unsupported(
            Capability::Retention,
            self.namespace(),
        ))
    }

    /// This store's selects (waiting for the first of several events, timers and
    /// children): `Ok(self)` in a store that implements [`SelectStore`]; the default is
    /// [`StoreError::Unsupported`] naming [`Capability::Select`].
    fn select(&self) -> StoreResult<&dyn SelectStore> {
        Err(StoreError::unsupported(
            Capability::Select,
            self.namespace(),
        ))
    }
}

/// The accessors of every capability of [`Store`], each answering `Ok(self)`: written inside
/// the `impl Store` of a store that implements all nine capability traits, instead of
/// nine one-line methods. A store that lacks some writes the accessors of those it has by
/// hand and keeps the defaults ([`StoreError::Unsupported`]) for the others.
///
/// ```rust,ignore
/// #[async_trait::async_trait]
/// impl Store for MyStore {
///     fn namespace(&self) -> &str { &self.namespace }
///     fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError> { /* ... */ }
///     async fn subscribe(&self) -> StoreResult<NotificationStream> { /* ... */ }
///
///     tasks_core::every_capability!();
/// }
/// ```
#[macro_export]
macro_rules! every_capability {
    () => {
        fn lifecycle(&self) -> $crate::StoreResult<&dyn $crate::LifecycleStore> {
            ::core::result::Result::Ok(self)
        }
        fn events(&self) -> $crate::StoreResult<&dyn $crate::EventStore> {
            ::core::result::Result::Ok(self)
        }
        fn children(&self) -> $crate::StoreResult<&dyn $crate::ChildStore> {
            ::core::result::Result::Ok(self)
        }
        fn published_state(&self) -> $crate::StoreResult<&dyn $crate::StateStore> {
            ::core::result::Result::Ok(self)
        }
        fn schedules(&self) -> $crate::StoreResult<&dyn $crate::ScheduleStore> {
            ::core::result::Result::Ok(self)
        }
        fn queues(&self) -> $crate::StoreResult<&dyn $crate::QueueStore> {
            ::core::result::Result::Ok(self)
        }
        fn retention(&self) -> $crate::StoreResult<&dyn $crate::RetentionStore> {
            ::core::result::Result::Ok(self)
        }
        fn overview(&self) -> $crate::StoreResult<&dyn $crate::OverviewStore> {
            ::core::result::Result::Ok(self)
        }
        fn select(&self) -> $crate::StoreResult<&dyn $crate::SelectStore> {
            ::core::result::Result::Ok(self)
        }
        fn continuation(&self) -> $crate::StoreResult<&dyn $crate::ContinueStore> {
            ::core::result::Result::Ok(self)
        }
    };
}

/// A store shared by workers, clients and their tasks: cheap to clone, and what
/// `Worker::builder` and `Client::new`
/// take. Every store converts into one (`PgStore`, `SqliteStore`, `MemoryStore`, any
/// [`Store`], or an `Arc<dyn Store>`). It does not dereference to the contract:
/// [`SharedStore::contract`] is the explicit way in.
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

    /// The namespace this store reads and writes.
    pub fn namespace(&self) -> &str {
        self.0.namespace()
    }

    /// The same store (same connections, same background work) scoped to another
    /// namespace; see [`Store::scoped`].
    ///
    /// Errors: a [`LimitError`] for a namespace past the [`limits`].
    pub fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError> {
        self.0.scoped(namespace)
    }

    /// The store contract behind this handle: for the engine, operator tools and stores
    /// that wrap another. An application reaches its runs through the engine's `Client`
    /// and `Worker`, which take this handle; nothing of the contract is reachable from it
    /// without this explicit call.
    pub fn contract(&self) -> &dyn Store {
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
