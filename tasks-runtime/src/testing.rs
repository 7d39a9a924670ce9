//! A kit for unit-testing workflows: an isolated store, a worker, a client and a virtual
//! clock in one line (feature `testing`, which brings the in-memory store; add it to your
//! `[dev-dependencies]`: `tasks = { version = "...", features = ["testing"] }`).
//!
//! ```no_run
//! # use tasks_runtime as tasks;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tasks::testing::TestEnv;
//!
//! let env = TestEnv::start().await?; // a fresh in-memory store, a worker, a client
//! // let run = my_workflow::start(env.client(), input).await?;
//! env.advance(Duration::from_secs(3600)).await?; // an hour-long durable sleep is over
//! // assert_eq!(run.result_within(Duration::from_secs(5)).await?, expected);
//! env.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`TestEnv::start`] opens a private [in-memory store](crate::memory) (one per
//! environment: tests in one binary do not see each other's runs), and spawns a
//! [`Worker`] that executes every `#[workflow]` linked into the test binary, with short
//! polling intervals. The store reads the time from a [manual clock](Clock::manual):
//! [`TestEnv::advance`] moves it forward and wakes the worker, so the runs that became due
//! are claimed at once.
//!
//! # What follows the virtual clock
//!
//! Everything the store decides by time: durable sleeps (`ctx.sleep`), event-wait timeouts,
//! a failed run's retry backoff, a step retry backoff long enough to park the run (above the
//! worker's [park threshold](crate::WorkerBuilder::step_retry_park_threshold)), delayed
//! starts ([`StartOptions::delay`](crate::StartOptions::delay)), whether a run's deadline
//! passed when it is claimed, schedules, leases and heartbeats; and in workflow code
//! [`WorkflowContext::now`](crate::WorkflowContext::now) and the time part of
//! [`WorkflowContext::uuid`](crate::WorkflowContext::uuid). An instant you pass in
//! yourself ([`StartOptions::start_at`](crate::StartOptions::start_at),
//! [`StartOptions::deadline`](crate::StartOptions::deadline)) is compared with the virtual
//! clock: compute it from [`TestEnv::now`], not from `Utc::now()`.
//!
//! What does not, because it waits in the process with a tokio timer: a `#[step(timeout)]`,
//! a step retry backoff below the park threshold, and the deadline of a run *while it
//! executes* (it is checked against the virtual clock again at its next claim). For those,
//! use short real durations (the kit is not tested with tokio's paused time,
//! `#[tokio::test(start_paused = true)]`).
//!
//! # Why the in-memory store
//!
//! It keeps the whole contract (every conformance case passes on it, as on Postgres and
//! SQLite), needs no file and no server, and is the fastest of the three. The
//! [Postgres store](crate::postgres) takes every instant from the database's `now()`, one
//! clock shared by every worker on every machine; a test process cannot move it. Test the
//! workflow logic with this kit, and the deployment against Postgres (or SQLite, with a
//! [manual clock](Clock::manual) of its own: `MemoryStore::with_clock`).
//!
//! # Leases and heartbeats
//!
//! Leases and the worker's heartbeat are instants of the same clock, so a jump ages them
//! too. [`TestEnv::advance`] therefore first waits until no run is executing (every run is
//! finished, parked or not yet due), then jumps: no lease is held across the jump, and the
//! worker's own heartbeat row, stale for a moment, is rewritten at its next beat (a worker
//! never takes over its own runs). [`TestClock::advance`] jumps at once, without waiting; a
//! run executing at that moment keeps running on this worker, but its lease is renewed by
//! a fresh claim, which counts one more attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tasks_test_support::wait::{self, PollError};

use crate::client::Client;
use crate::clock::{Clock, ClockError};
use crate::error::StoreError;
use crate::memory::MemoryStore;
use crate::model::RunStatus;
use crate::registry::RegistryError;
use crate::store::ListRuns;
use crate::store::RunStore;
use crate::worker::{Worker, WorkerBuilder, WorkerError, WorkerHandle};

/// How often [`TestEnv::settle`] looks at the store again.
const SETTLE_POLL: Duration = Duration::from_millis(5);

/// How long [`TestEnv::advance`] waits for the runs in flight before it gives up.
pub const ADVANCE_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a [`TestEnv`] could not start or do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestEnvError {
    /// Reading the store failed.
    #[error("the test store failed: {0}")]
    Store(#[from] StoreError),
    /// The worker could not be built (a bad setting, or duplicate workflows).
    #[error("the test worker could not be built: {0}")]
    Worker(#[from] WorkerError),
    /// The workflows linked into the binary could not be collected for the client.
    #[error("the test client could not be built: {0}")]
    Registry(#[from] RegistryError),
    /// The clock could not be advanced that far.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// Some run was still executing (or due and not yet claimed) after `waited`.
    #[error("runs were still executing or due after {waited:?}")]
    NotSettled {
        /// How long the wait lasted.
        waited: Duration,
    },
}

/// Builds a [`TestEnv`] with settings of its worker; [`TestEnv::start`] takes the defaults.
#[must_use]
pub struct TestEnvBuilder {
    configure: Box<dyn FnOnce(WorkerBuilder) -> WorkerBuilder + Send>,
}

impl std::fmt::Debug for TestEnvBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnvBuilder").finish_non_exhaustive()
    }
}

impl TestEnvBuilder {
    /// Adjusts the worker's settings (concurrency, retry park threshold, ...), on top of the
    /// environment's (polling every 10–100 ms, schedules ticking every 20 ms, a 5 s grace).
    pub fn worker(
        mut self,
        configure: impl FnOnce(WorkerBuilder) -> WorkerBuilder + Send + 'static,
    ) -> Self {
        let before = self.configure;
        self.configure = Box::new(move |builder| configure(before(builder)));
        self
    }

    /// Opens the store and spawns the worker.
    pub async fn start(self) -> Result<TestEnv, TestEnvError> {
        let clock = Clock::manual();
        let store = MemoryStore::new().with_clock(clock.clone());
        let client = Client::new(store.clone())?;
        let builder = Worker::builder(store.clone())
            .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
            .shutdown_grace(Duration::from_secs(5));
        #[cfg(feature = "schedules")]
        let builder = builder.schedule_tick(Some(Duration::from_millis(20)));
        let worker = (self.configure)(builder).build()?.spawn();
        Ok(TestEnv {
            clock: TestClock {
                clock,
                store: store.clone(),
            },
            store,
            client,
            worker: Some(worker),
        })
    }
}

/// A store, a worker and a client for one test, on a private in-memory store whose clock the
/// test moves. See the [module docs](self).
///
/// Dropping it stops the worker without waiting; [`TestEnv::shutdown`] waits for it.
pub struct TestEnv {
    store: MemoryStore,
    clock: TestClock,
    client: Client,
    worker: Option<WorkerHandle>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("store", &self.store)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// A fresh environment with the default settings: a new in-memory store, a running
    /// worker with every workflow linked into the binary, and a client.
    ///
    /// Errors: [`TestEnvError::Worker`] or [`TestEnvError::Registry`] if the linked
    /// workflows clash (two with one name and version).
    pub async fn start() -> Result<TestEnv, TestEnvError> {
        TestEnv::builder().start().await
    }

    /// A builder, to adjust the worker's settings before starting.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder {
            configure: Box::new(|builder| builder),
        }
    }

    /// The client: start runs, send events, create schedules, read results.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The store, for what the client does not show (step attempts, raw runs).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The environment's virtual clock.
    pub fn clock(&self) -> &TestClock {
        &self.clock
    }

    /// The current virtual time: what the store writes as "now".
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Waits until no run is executing (up to [`ADVANCE_SETTLE_TIMEOUT`]), then moves the
    /// clock forward by `by` and wakes the worker: runs whose sleep, event-wait timeout,
    /// backoff or delayed start is now over are claimed at once, and schedules whose slot
    /// came fire within a few milliseconds. Returns once the clock moved, not once the woken
    /// runs finished: wait for those with [`RunHandle::result_within`](crate::RunHandle::result_within)
    /// or [`TestEnv::settle`].
    ///
    /// Errors: [`TestEnvError::NotSettled`] if a run still executes after the timeout (the
    /// clock is not moved); [`TestEnvError::Clock`] if the total advance would pass
    /// [`limits::MAX_DURATION`](crate::limits::MAX_DURATION); [`TestEnvError::Store`].
    pub async fn advance(&self, by: Duration) -> Result<(), TestEnvError> {
        self.wait_until(ADVANCE_SETTLE_TIMEOUT, |active| !active.running)
            .await?;
        self.clock.advance(by)?;
        Ok(())
    }

    /// Waits until the environment is quiet: no run executing, and none due and waiting to
    /// be claimed (every run is finished, paused, or parked until a later virtual time).
    /// Gives up after `timeout` of real time.
    ///
    /// Errors: [`TestEnvError::NotSettled`] after `timeout`; [`TestEnvError::Store`].
    pub async fn settle(&self, timeout: Duration) -> Result<(), TestEnvError> {
        self.wait_until(timeout, |active| !active.running && !active.due)
            .await
    }

    /// Polls the store until `quiet` holds for its active runs, or `timeout` passes.
    async fn wait_until(
        &self,
        timeout: Duration,
        quiet: impl Fn(Active) -> bool,
    ) -> Result<(), TestEnvError> {
        let probe = async || Ok(quiet(self.active().await?).then_some(()));
        wait::poll(timeout, SETTLE_POLL, probe)
            .await
            .map_err(|error| match error {
                PollError::TimedOut { waited } => TestEnvError::NotSettled { waited },
                PollError::Failed(error) => TestEnvError::Store(error),
            })
    }

    /// Whether some run is executing, and whether some run is due but not claimed yet.
    async fn active(&self) -> Result<Active, StoreError> {
        let now = self.clock.now();
        let mut active = Active {
            running: false,
            due: false,
        };
        let mut page = ListRuns {
            statuses: vec![RunStatus::Pending, RunStatus::Running, RunStatus::Sleeping],
            limit: Some(500),
            ..ListRuns::default()
        };
        loop {
            let runs = self.store.list_runs(page.clone()).await?;
            for run in &runs.data {
                match run.status {
                    RunStatus::Running => active.running = true,
                    _ if run.available_at.is_none_or(|at| at <= now) => active.due = true,
                    _ => {}
                }
            }
            match runs.next {
                Some(next) if !active.running => page.after = Some(next),
                _ => return Ok(active),
            }
        }
    }

    /// Stops the worker (its in-flight runs get the grace period) and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.shutdown().await;
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if let Some(worker) = &self.worker {
            worker.token().cancel();
        }
    }
}

/// What [`TestEnv`] found among the active runs.
#[derive(Clone, Copy)]
struct Active {
    running: bool,
    due: bool,
}

/// The virtual clock of a [`TestEnv`]: a [manual clock](Clock::manual) that wakes the
/// environment's worker when it moves.
#[derive(Clone, Debug)]
pub struct TestClock {
    clock: Clock,
    store: MemoryStore,
}

impl TestClock {
    /// The current virtual time.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// How far the clock has been advanced in total.
    pub fn offset(&self) -> Duration {
        self.clock.offset()
    }

    /// Moves the clock forward by `by` at once and wakes the worker, without waiting for the
    /// runs in flight (see the [module docs](self) on leases; [`TestEnv::advance`] waits).
    ///
    /// Errors: [`ClockError::OutOfRange`] if the total advance would pass
    /// [`limits::MAX_DURATION`](crate::limits::MAX_DURATION).
    pub fn advance(&self, by: Duration) -> Result<(), ClockError> {
        self.clock.advance(by)?;
        self.store.announce_time_moved();
        Ok(())
    }

    /// The underlying clock, to give to another store.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}
