//! The in-memory store of `tasks`: the whole [`Store`] contract in one process's memory,
//! behind one lock. For tests, the testing kit and single-process use; nothing survives the
//! process.
//!
//! # The map
//!
//! ```text
//!  MemoryStore      a handle: one namespace, one clock, the shared tables, the Store
//!       │           trait (lib.rs); each module implements one trait of the contract,
//!       │           every method calling `tasks_core::store::check` first
//!       ▼
//!  tables           every namespace's rows behind one Mutex; a write is a closure run
//!                   under it, with the clock read once, and announces after it (tables.rs)
//!       │
//!  the path of a run, one module each:
//!    runs           create (idempotency keys), read, list, count
//!    leases         claim, extend, sleep, complete, fail, release, heartbeat
//!    claim          deadlines, the candidates of a claim and their admission
//!    transitions    the fenced transition every run transition goes through
//!    steps          step attempts: created, recorded, completed, interrupted
//!    events         a run's mailboxes: send, wait (park, consume, time out)
//!    children       start a child, wait for children, wake a parent, cascade a cancel
//!    state          published values of a run
//!    lifecycle      cancel, pause, resume; retry and fork a finished run
//!    retention      purge finished runs, take the retention turn
//!    schedules      cron schedules' rows and their compare-and-set firing
//!    queues         queue configurations
//! ```
//!
//! The policy is `tasks_core`'s: every transition is a
//! [`Transition`](tasks_core::transition::Transition) whose fence is checked with `admits`
//! under the lock and whose miss is explained by `settle`/`miss`, and whose change is its
//! `Landing` applied; retries, interrupted steps and idempotent repeats use the same
//! functions as the SQL stores. The rules that the SQL stores keep as SQL text (the claim
//! order and its admission walk, attempt counting, the deadline give-up, a parent's
//! countdown, a fork's boundary, what a purge keeps and clears, an idempotency key's
//! lapse, ...) are the core's pure functions too, and this store calls them: it holds rows
//! and locks, not rules.
//!
//! # Behaviour
//!
//! * **Atomicity.** Every operation runs under one [`std::sync::Mutex`] shared by every
//!   handle of the store ([`MemoryStore::with_namespace`], [`Store::scoped`]), and checks
//!   everything that may fail before it changes anything: a transition is one fenced write,
//!   and concurrent workers serialize exactly like on SQLite's write lock.
//! * **Clock.** Every instant comes from the store's [`Clock`] (the system clock by
//!   default, a [manual clock](Clock::manual) with [`MemoryStore::with_clock`]), read once
//!   per operation under the lock and truncated to the microsecond like the SQL stores;
//!   durations added to it (leases, delays, backoffs) count whole milliseconds.
//! * **Limits.** Every value is checked first by the operation's function in
//!   [`tasks_core::store::check`], as in the SQL stores, so a value that Postgres or SQLite
//!   would refuse is refused here too, with the same error.
//! * **Notifications.** One `tokio::sync::broadcast` channel per store, filtered per
//!   namespace by [`namespace_stream`](tasks_core::store::namespace_stream); they are sent
//!   under the lock, so subscribers see them in commit order.
//! * **Cost.** Reads and claims scan the namespace's rows: fine for tests and small
//!   single-process workloads, not meant for millions of runs.
//!
//! # Example
//!
//! ```
//! use tasks_core::{CreateRun, RunStatus, RunStore};
//! use tasks_memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new().with_namespace("tenant-a")?;
//! let run = store.create_run(CreateRun::new("send-invoice")).await?;
//! let read = store.get_run(run.id).await?.expect("the run just created");
//! assert_eq!(read.status, RunStatus::Pending);
//! assert_eq!(read.namespace, "tenant-a");
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod children;
mod claim;
mod continuation;
mod events;
mod leases;
mod lifecycle;
mod overview;
mod queues;
mod retention;
mod runs;
mod schedules;
mod select;
mod state;
mod steps;
mod tables;
mod transitions;

use async_trait::async_trait;
use std::sync::Arc;
use tables::Shared;
use tasks_core::clock::Clock;
use tasks_core::error::StoreResult;
use tasks_core::limits::LimitError;
use tasks_core::store::{DEFAULT_NAMESPACE, Notification, NotificationStream, SharedStore, Store};

/// The in-memory store.
///
/// Cloning is cheap and shares the tables; [`MemoryStore::with_namespace`] gives a handle on
/// the same tables that sees another namespace, and [`MemoryStore::with_clock`] one that
/// reads another clock. The tables live as long as some handle does.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    namespace: Arc<str>,
    clock: Clock,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("namespace", &self.namespace)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store in the [default namespace](DEFAULT_NAMESPACE), on the system clock.
    pub fn new() -> Self {
        MemoryStore {
            shared: Arc::new(Shared::new()),
            namespace: Arc::from(DEFAULT_NAMESPACE),
            clock: Clock::system(),
        }
    }

    /// The same store, seeing only `namespace`.
    ///
    /// Errors: a [`LimitError`] for a namespace past the limits (longer than
    /// [`MAX_NAMESPACE_BYTES`](tasks_core::limits::MAX_NAMESPACE_BYTES), or with NUL), as
    /// the SQL stores refuse it.
    pub fn with_namespace(&self, namespace: impl Into<String>) -> Result<Self, LimitError> {
        let namespace = namespace.into();
        tasks_core::store::check::namespace(&namespace)?;
        Ok(MemoryStore {
            namespace: Arc::from(namespace),
            ..self.clone()
        })
    }

    /// The same store, reading the time from `clock` instead of the system clock. Every
    /// instant the store writes or compares comes from it. Every handle on the tables should
    /// use the same clock (clones of a [manual clock](Clock::manual) share its offset).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tasks_core::clock::Clock;
    /// use tasks_memory::MemoryStore;
    ///
    /// let clock = Clock::manual();
    /// let store = MemoryStore::new().with_clock(clock.clone());
    /// clock.advance(Duration::from_secs(3600)).unwrap(); // the store is an hour ahead
    /// assert!(store.clock().is_manual());
    /// ```
    pub fn with_clock(&self, clock: Clock) -> Self {
        MemoryStore {
            clock,
            ..self.clone()
        }
    }

    /// The clock this store reads the time from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Tells the subscribers of this namespace to look at the store again (after a
    /// [manual clock](Clock::manual) moved: runs may have become due).
    pub fn announce_time_moved(&self) {
        self.shared.publish(Notification::Missed {
            namespace: self.namespace.to_string(),
        });
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError> {
        Ok(SharedStore::new(self.with_namespace(namespace)?))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        Ok(self.notifications())
    }

    tasks_core::every_capability!();
}
