//! The worker: claims runs in batches, executes them concurrently under a lease, wakes on
//! notifications with polling as the fallback, and shuts down gracefully.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use crate::context::ExecutionLimits;
use crate::error::StoreError;
use crate::executor::{Executor, Outcome};
use crate::failure::ErrorRecord;
use crate::liveness::Liveness;
use crate::model::WorkflowRun;
use crate::purge::Retention;
use crate::queue::{ClaimFilter, QueueOptions};
use crate::registry::{Registry, RegistryError};
use crate::store::{ClaimedRun, FailRun, NotificationStream, SharedStore};

/// What a worker does with a claimed run whose `(name, version)` is not registered in its
/// binary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnknownWorkflowPolicy {
    /// Give the run back, available again after a backoff that doubles on every deferral
    /// (from `initial` up to `max`), and record why on the run. This is what rolling
    /// deploys need: a newer worker picks the run up. The default.
    Reschedule {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
    },
    /// Fail the run for good.
    Fail,
}

impl Default for UnknownWorkflowPolicy {
    fn default() -> Self {
        UnknownWorkflowPolicy::Reschedule {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(300),
        }
    }
}

/// Why a worker could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The registry of linked workflows and steps could not be built (duplicates, or an
    /// invalid name).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A setting is out of range.
    #[error("invalid worker setting: {0}")]
    InvalidSetting(String),
    /// The namespace given to [`WorkerBuilder::namespace`] is past the
    /// [`limits`](crate::limits) (too long, or with NUL).
    #[error(transparent)]
    Limit(#[from] crate::LimitError),
    /// Waiting for Ctrl-C failed.
    #[error("could not listen for Ctrl-C: {0}")]
    Signal(#[source] std::io::Error),
}

/// Configures a [`Worker`].
///
/// ```no_run
/// # async fn demo(store: tasks_runtime::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tasks_runtime::Worker;
///
/// let worker = Worker::builder(store)
///     .concurrency(32)
///     .lease(Duration::from_secs(30))
///     .build()?;
/// worker.run_until_ctrl_c().await?;
/// # Ok(()) }
/// ```
pub struct WorkerBuilder {
    store: SharedStore,
    namespace: Option<String>,
    registry: Option<Registry>,
    concurrency: usize,
    lease: Duration,
    poll_min: Duration,
    poll_max: Duration,
    shutdown_grace: Duration,
    max_steps: u32,
    park_threshold: Duration,
    unknown_workflow: UnknownWorkflowPolicy,
    worker_id: Option<String>,
    heartbeat_interval: Duration,
    heartbeat_timeout: Option<Duration>,
    retention: Option<Duration>,
    retention_interval: Duration,
    #[cfg(feature = "schedules")]
    schedule_tick: Option<Duration>,
    claim_filter: ClaimFilter,
    declared_queues: Vec<QueueOptions>,
}

impl WorkerBuilder {
    /// Serve only the runs of these queues (default: every queue). Runs of other queues are
    /// not claimed by this worker: the claim filters them in the database. Calling it again
    /// replaces the list. See [`crate::queue`].
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.claim_filter.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// Serve only the runs of these workflows (by name; default: every workflow, those this
    /// binary does not know included, which [`WorkerBuilder::unknown_workflow`] handles).
    /// Each must be in the worker's registry. The claim filters in the database; with
    /// [`WorkerBuilder::queues`], a run must pass both. To give a heavy workflow its own pool
    /// of workers, put it on its own queue: the claim of a queue reads the queue's runs
    /// through an index, while a workflow filter is checked on the runs it reads.
    pub fn workflows<I, S>(mut self, workflows: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.claim_filter.workflows = Some(workflows.into_iter().map(Into::into).collect());
        self
    }

    /// Declares a queue's configuration ([`QueueOptions`]: its concurrency and rate limits),
    /// written to the store ([`QueueStore::put_queue`](crate::QueueStore::put_queue)) when the worker
    /// starts, so that every worker of the namespace applies it. Declaring a queue does not
    /// make the worker serve it only (see [`WorkerBuilder::queues`]). Workers that declare
    /// one queue differently overwrite each other: the last to start wins.
    pub fn queue(mut self, options: QueueOptions) -> Self {
        self.declared_queues.push(options);
        self
    }

    /// How many runs execute at once (default 10). A run's slot is freed as soon as its
    /// workflow function returns, so the worker claims the next run while the outcome of
    /// the last one is being written; graceful shutdown still waits for those writes.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long a claim lasts without being extended (default 30 s); the worker extends the
    /// lease of each run it executes every half lease. Leases are the fallback of
    /// [heartbeats](WorkerBuilder::heartbeat_interval): the runs of a worker that died are
    /// claimed when its heartbeat goes stale, or at the latest when their leases expire.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the worker writes its heartbeat row (default 1 s): one write per worker,
    /// whatever number of runs it holds ([`LeaseStore::heartbeat`](crate::LeaseStore::heartbeat)).
    /// When the row has not been rewritten for the
    /// [heartbeat timeout](WorkerBuilder::heartbeat_timeout), other workers presume this one
    /// dead and claim its runs. The task that writes it belongs to the worker: it stops with
    /// the worker, and a graceful shutdown removes the row.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// How long after its last heartbeat the worker is presumed dead, by the database clock
    /// (default three heartbeat intervals: 3 s). Its runs are then claimable by other
    /// workers, and every later write of this worker on a run taken over is refused. Must be
    /// longer than the heartbeat interval; a longer timeout tolerates longer database
    /// hiccups and pauses, at the price of slower recovery.
    pub fn heartbeat_timeout(mut self, timeout: Duration) -> Self {
        self.heartbeat_timeout = Some(timeout);
        self
    }

    /// Bounds of the idle polling interval (default 50 ms to 1 s): it starts at `min` after
    /// any work or wake-up and doubles, with jitter, up to `max` while idle.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// The namespace to work in (default: the store's). A namespace past the
    /// [`limits`](crate::limits) makes [`WorkerBuilder::build`] fail with
    /// [`WorkerError::Limit`].
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Use this registry instead of the link-time one.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// How long shutdown waits for in-flight runs before abandoning them (default 30 s):
    /// the worker then marks its heartbeat row stale, so other workers take them at once.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Fail runs that resolve more than this many steps and sleeps (default 10 000).
    pub fn max_steps_per_run(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Step retries whose backoff is at most this long wait in the worker; longer ones park
    /// the run so its slot is freed (default 5 s).
    pub fn step_retry_park_threshold(mut self, threshold: Duration) -> Self {
        self.park_threshold = threshold;
        self
    }

    /// What to do with runs of workflows this binary does not know.
    pub fn unknown_workflow(mut self, policy: UnknownWorkflowPolicy) -> Self {
        self.unknown_workflow = policy;
        self
    }

    /// The id the worker writes on the runs it claims (default: a fresh UUID).
    pub fn worker_id(mut self, worker_id: impl Into<String>) -> Self {
        self.worker_id = Some(worker_id.into());
        self
    }

    /// Purges finished runs (completed, failed, canceled) of the worker's namespace once they
    /// finished more than `max_age` ago, with their steps and events (default: never). The
    /// purge runs every [retention interval](WorkerBuilder::retention_interval), in batches
    /// of short transactions ([`Client::purge`](crate::Client::purge)), in a task that
    /// belongs to the worker and stops with it. Among the workers of a namespace, one per
    /// interval purges (the one that takes the namespace's turn,
    /// [`RetentionStore::take_retention_turn`](crate::RetentionStore::take_retention_turn)), so the cost does
    /// not grow with the number of workers.
    pub fn retention(mut self, max_age: Duration) -> Self {
        self.retention = Some(max_age);
        self
    }

    /// How often the namespace's workers purge when [retention](WorkerBuilder::retention)
    /// is set (default [`DEFAULT_RETENTION_INTERVAL`](crate::retention::DEFAULT_RETENTION_INTERVAL),
    /// one minute; at least 10 ms). Every worker asks about once per interval (with
    /// jitter); one of them purges.
    pub fn retention_interval(mut self, interval: Duration) -> Self {
        self.retention_interval = interval;
        self
    }

    /// How often the worker's scheduler fires the due slots of the namespace's schedules
    /// (default 500 ms); `None` turns the scheduler off (this worker then neither puts
    /// the declared schedules nor fires any: other workers do). Every worker may tick: each
    /// slot fires once however many do (see [`crate::schedule`]).
    #[cfg(feature = "schedules")]
    pub fn schedule_tick(mut self, tick: Option<Duration>) -> Self {
        self.schedule_tick = tick;
        self
    }

    /// Builds the worker, collecting link-time registrations unless a registry was given.
    pub fn build(self) -> Result<Worker, WorkerError> {
        if self.concurrency == 0 {
            return Err(WorkerError::InvalidSetting(
                "concurrency must be at least 1".into(),
            ));
        }
        if self.lease < Duration::from_millis(100) {
            return Err(WorkerError::InvalidSetting(
                "lease must be at least 100 ms".into(),
            ));
        }
        if let Err(error) = crate::limits::check_duration(crate::limits::Field::Lease, self.lease) {
            return Err(WorkerError::InvalidSetting(error.to_string()));
        }
        if self.poll_min.is_zero() || self.poll_min > self.poll_max {
            return Err(WorkerError::InvalidSetting(
                "poll interval bounds must satisfy 0 < min <= max".into(),
            ));
        }
        if self.heartbeat_interval < Duration::from_millis(10) {
            return Err(WorkerError::InvalidSetting(
                "heartbeat interval must be at least 10 ms".into(),
            ));
        }
        let stale_after = self.heartbeat_timeout.unwrap_or(
            self.heartbeat_interval
                .saturating_mul(crate::liveness::DEFAULT_STALE_INTERVALS),
        );
        if stale_after <= self.heartbeat_interval {
            return Err(WorkerError::InvalidSetting(
                "heartbeat timeout must be longer than the heartbeat interval".into(),
            ));
        }
        if self.retention_interval < Duration::from_millis(10) {
            return Err(WorkerError::InvalidSetting(
                "retention interval must be at least 10 ms".into(),
            ));
        }
        for (field, duration) in [
            (
                crate::limits::Field::RetentionInterval,
                self.retention_interval,
            ),
            (
                crate::limits::Field::PurgeAge,
                self.retention.unwrap_or_default(),
            ),
        ] {
            if let Err(error) = crate::limits::check_duration(field, duration) {
                return Err(WorkerError::InvalidSetting(error.to_string()));
            }
        }
        let registry = match self.registry {
            Some(registry) => registry,
            None => Registry::from_inventory()?,
        };
        if let Err(error) = self.claim_filter.check() {
            return Err(WorkerError::InvalidSetting(error.to_string()));
        }
        if self.claim_filter.queues.as_ref().is_some_and(Vec::is_empty) {
            return Err(WorkerError::InvalidSetting(
                "the worker serves no queue: `queues` is empty".into(),
            ));
        }
        if let Some(workflows) = &self.claim_filter.workflows {
            if workflows.is_empty() {
                return Err(WorkerError::InvalidSetting(
                    "the worker serves no workflow: `workflows` is empty".into(),
                ));
            }
            if let Some(unknown) = workflows
                .iter()
                .find(|name| !registry.iter().any(|definition| definition.name == *name))
            {
                return Err(WorkerError::InvalidSetting(format!(
                    "the worker serves workflow {unknown:?}, which is not in its registry"
                )));
            }
        }
        for queue in &self.declared_queues {
            if let Err(error) = queue.check() {
                return Err(WorkerError::InvalidSetting(error.to_string()));
            }
        }
        let store = match &self.namespace {
            Some(namespace) => self.store.scoped(namespace)?,
            None => self.store,
        };
        let worker_id = self.worker_id.unwrap_or_else(|| Uuid::new_v4().to_string());
        let retention = self.retention.map(|max_age| Retention {
            store: store.clone(),
            worker_id: worker_id.clone(),
            max_age,
            interval: self.retention_interval,
        });
        #[cfg(feature = "schedules")]
        let scheduler = match self.schedule_tick {
            Some(tick) if tick < Duration::from_millis(10) => {
                return Err(WorkerError::InvalidSetting(
                    "schedule tick must be at least 10 ms".into(),
                ));
            }
            Some(tick) => Some(crate::scheduler::Scheduler::new(
                store.clone(),
                &registry,
                tick,
            )),
            None => None,
        };
        let beats = crate::liveness::BeatClock::new(stale_after);
        Ok(Worker {
            inner: Arc::new(WorkerInner {
                retention,
                liveness: Liveness {
                    store: store.clone(),
                    worker_id: worker_id.clone(),
                    interval: self.heartbeat_interval,
                    stale_after,
                    beats: beats.clone(),
                },
                executor: Executor {
                    store: store.clone(),
                    worker_id,
                    lease: self.lease,
                    beats,
                    limits: ExecutionLimits {
                        max_steps: self.max_steps,
                        park_threshold: self.park_threshold,
                    },
                },
                store,
                registry,
                concurrency: self.concurrency,
                poll_min: self.poll_min,
                poll_max: self.poll_max,
                shutdown_grace: self.shutdown_grace,
                unknown_workflow: self.unknown_workflow,
                claim_filter: self.claim_filter,
                declared_queues: self.declared_queues,
                #[cfg(feature = "schedules")]
                scheduler,
            }),
        })
    }
}

/// Executes runs. Build one with [`Worker::builder`], then [`Worker::run`] it until a
/// cancellation token fires (or use [`Worker::run_until_ctrl_c`] / [`Worker::spawn`]).
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

struct WorkerInner {
    store: SharedStore,
    retention: Option<Retention>,
    liveness: Liveness,
    executor: Executor,
    registry: Registry,
    concurrency: usize,
    poll_min: Duration,
    poll_max: Duration,
    shutdown_grace: Duration,
    unknown_workflow: UnknownWorkflowPolicy,
    claim_filter: ClaimFilter,
    declared_queues: Vec<QueueOptions>,
    #[cfg(feature = "schedules")]
    scheduler: Option<crate::scheduler::Scheduler>,
}

/// A worker running in the background; see [`Worker::spawn`].
#[derive(Debug)]
pub struct WorkerHandle {
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl WorkerHandle {
    /// Stops claiming, waits for in-flight runs (up to the grace period) and returns once
    /// the worker has stopped.
    pub async fn shutdown(self) {
        self.token.cancel();
        if let Err(error) = self.task.await {
            tracing::error!(%error, "worker task failed");
        }
    }

    /// The token that stops the worker.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.inner.executor.worker_id)
            .field("namespace", &self.inner.store.namespace())
            .field("concurrency", &self.inner.concurrency)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder with the defaults: concurrency 10, lease 30 s, heartbeat every 1 s (stale
    /// after 3 s), polling 50 ms–1 s, grace 30 s.
    pub fn builder(store: impl Into<SharedStore>) -> WorkerBuilder {
        WorkerBuilder {
            store: store.into(),
            namespace: None,
            registry: None,
            concurrency: 10,
            lease: Duration::from_secs(30),
            poll_min: Duration::from_millis(50),
            poll_max: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
            max_steps: 10_000,
            park_threshold: Duration::from_secs(5),
            unknown_workflow: UnknownWorkflowPolicy::default(),
            worker_id: None,
            heartbeat_interval: crate::liveness::DEFAULT_INTERVAL,
            heartbeat_timeout: None,
            retention: None,
            retention_interval: crate::retention::DEFAULT_RETENTION_INTERVAL,
            #[cfg(feature = "schedules")]
            schedule_tick: Some(crate::scheduler::DEFAULT_TICK),
            claim_filter: ClaimFilter::default(),
            declared_queues: Vec::new(),
        }
    }

    /// The id written on the runs this worker claims.
    pub fn id(&self) -> &str {
        &self.inner.executor.worker_id
    }

    /// The workflows this worker can execute.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Runs in the background until the handle is shut down.
    pub fn spawn(&self) -> WorkerHandle {
        let token = CancellationToken::new();
        let worker = self.clone();
        let task = tokio::spawn({
            let token = token.clone();
            async move { worker.run(token).await }
        });
        WorkerHandle { token, task }
    }

    /// Runs until Ctrl-C, then shuts down gracefully.
    pub async fn run_until_ctrl_c(&self) -> Result<(), WorkerError> {
        let token = CancellationToken::new();
        let run = self.run(token.clone());
        tokio::pin!(run);
        tokio::select! {
            () = &mut run => return Ok(()),
            signal = tokio::signal::ctrl_c() => {
                signal.map_err(WorkerError::Signal)?;
                tracing::info!("Ctrl-C received; shutting down");
                token.cancel();
            }
        }
        run.await;
        Ok(())
    }

    /// Claims and executes runs until `shutdown` is cancelled. Then it stops claiming,
    /// waits up to the grace period for in-flight runs, and abandons the rest without
    /// writing to them: it marks its heartbeat row stale, so other workers replay them at
    /// once (or when their leases expire). A worker that stopped with nothing in flight
    /// removes its heartbeat row.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        tracing::info!(
            worker.id = %inner.executor.worker_id,
            namespace = inner.store.namespace(),
            workflows = inner.registry.len(),
            concurrency = inner.concurrency,
            "worker started"
        );
        let slots = Arc::new(Semaphore::new(inner.concurrency));
        let in_flight = Arc::new(std::sync::Mutex::new(HashSet::new()));
        let _slots_gauge = crate::metrics::SlotsGauge::new(inner.concurrency);
        let slot_freed = Arc::new(Notify::new());
        let wake = Arc::new(Notify::new());
        let tracker = TaskTracker::new();
        let abandon = CancellationToken::new();
        let mut notifications = self.subscribe().await;
        // The declared queues, before the first claim reads them.
        for queue in &inner.declared_queues {
            let declared = match inner.store.contract().queues() {
                Ok(queues) => queues.put_queue(queue).await.map(drop),
                Err(unsupported) => Err(unsupported),
            };
            if let Err(error) = declared {
                tracing::warn!(%error, queue = queue.name(), "could not declare a queue; the claims apply its stored configuration");
            }
        }
        let mut idle = inner.poll_min;
        // Beats until every run in flight has finished or been abandoned.
        let beating = inner.liveness.start().await;
        // The periodic purge stops with the claim loop (between two batches); the tracker
        // waits for it like for the runs in flight.
        let retention_stop = shutdown.child_token();
        if let Some(retention) = inner.retention.clone() {
            tracker.spawn(
                retention
                    .run(retention_stop.clone())
                    .instrument(tracing::info_span!("retention")),
            );
        }
        #[cfg(feature = "schedules")]
        let ticking = inner.scheduler.as_ref().map(|scheduler| scheduler.start());

        while !shutdown.is_cancelled() {
            let free = slots.available_permits();
            let mut claimed_all = false;
            if free > 0 {
                let claiming = std::time::Instant::now();
                match inner
                    .store
                    .contract()
                    .claim_runs_filtered(
                        &inner.executor.worker_id,
                        inner.executor.lease,
                        free as u32,
                        &inner.claim_filter,
                    )
                    .await
                {
                    Ok(runs) => {
                        crate::metrics::claimed(claiming.elapsed(), runs.len());
                        claimed_all = runs.len() == free;
                        if !runs.is_empty() {
                            idle = inner.poll_min;
                        }
                        for run in runs {
                            // A lease that ran out while this worker still executes the run
                            // (a heartbeat that came late on a starved machine) lets the
                            // claim hand the run back to this same worker: the execution in
                            // flight goes on under the renewed lease, and a second one
                            // would run its unrecorded steps again.
                            let Some(executing) = InFlight::enter(&in_flight, run.run.id) else {
                                tracing::warn!(run.id = %run.run.id, "reclaimed a run whose lease ran out while this worker still executes it; the execution goes on");
                                continue;
                            };
                            let Ok(permit) = slots.clone().try_acquire_owned() else {
                                // Cannot happen: we claimed no more than the free slots.
                                tracing::error!(run.id = %run.run.id, "no free slot for a claimed run");
                                break;
                            };
                            let worker = self.clone();
                            let abandon = abandon.clone();
                            let slot_freed = slot_freed.clone();
                            let wake = wake.clone();
                            let shutdown = shutdown.clone();
                            tracker.spawn(async move {
                                let _executing = executing;
                                let mut slot = Some(Slot {
                                    permit: Some(permit),
                                    freed: slot_freed,
                                    _in_use: crate::metrics::SlotInUse::new(),
                                });
                                let outcome =
                                    worker.process(run, claiming, abandon, &mut slot).await;
                                drop(slot);
                                if let Some(Outcome::Sleeping(wait)) = outcome {
                                    // Come back for the run when its sleep ends rather than
                                    // at the next idle poll. Not tracked: shutdown does not
                                    // wait for timers.
                                    tokio::spawn(async move {
                                        tokio::select! {
                                            () = tokio::time::sleep(wait) => wake.notify_one(),
                                            () = shutdown.cancelled() => {}
                                        }
                                    });
                                }
                            });
                        }
                    }
                    Err(error) => tracing::warn!(%error, "claiming runs failed; retrying"),
                }
            }
            if claimed_all {
                continue;
            }
            let wait = jitter(idle);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = slot_freed.notified(), if free == 0 || slots.available_permits() == 0 => {}
                () = wake.notified() => idle = inner.poll_min,
                woke = next_wakeup(&mut notifications) => {
                    if woke.is_none() {
                        notifications = self.subscribe().await;
                    }
                    idle = inner.poll_min;
                }
                () = tokio::time::sleep(wait) => {
                    idle = (idle * 2).min(inner.poll_max);
                }
            }
        }

        retention_stop.cancel();
        #[cfg(feature = "schedules")]
        if let Some(ticking) = ticking {
            ticking.stop().await;
        }
        tracker.close();
        tracing::info!(
            in_flight = tracker.len(),
            "worker stopping; waiting for in-flight runs"
        );
        let abandoned = tokio::time::timeout(inner.shutdown_grace, tracker.wait())
            .await
            .is_err();
        if abandoned {
            tracing::warn!(
                abandoned = tracker.len(),
                "grace period over; abandoning in-flight runs to other workers"
            );
            abandon.cancel();
            tracker.wait().await;
        }
        inner.liveness.stop(beating, abandoned).await;
        tracing::info!("worker stopped");
    }

    async fn subscribe(&self) -> Option<NotificationStream> {
        match self.inner.store.contract().subscribe().await {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot subscribe to wake-ups; relying on polling");
                None
            }
        }
    }

    async fn process(
        &self,
        claimed: ClaimedRun,
        claimed_at: std::time::Instant,
        abandon: CancellationToken,
        slot: &mut Option<Slot>,
    ) -> Option<Outcome> {
        let inner = &self.inner;
        let Some(definition) = inner
            .registry
            .get(&claimed.run.workflow_name, claimed.run.version.as_deref())
        else {
            self.unknown(claimed.run).await;
            return None;
        };
        let outcome = inner
            .executor
            .execute(claimed, claimed_at, definition, abandon, || {
                drop(slot.take())
            })
            .await;
        tracing::debug!(?outcome, "execution ended");
        let workflow = definition.name;
        crate::metrics::execution(workflow, outcome.label());
        match outcome {
            Outcome::Completed => crate::metrics::run_finished(workflow, "completed"),
            Outcome::Failed => crate::metrics::run_finished(workflow, "failed"),
            _ => {}
        }
        if matches!(outcome, Outcome::Abandoned) {
            // Give other work a chance before this worker tries again.
            tokio::time::sleep(inner.poll_min).await;
        }
        Some(outcome)
    }

    async fn unknown(&self, run: WorkflowRun) {
        let inner = &self.inner;
        let label = match &run.version {
            Some(version) => format!("{}@{}", run.workflow_name, version),
            None => run.workflow_name.clone(),
        };
        let message = format!(
            "workflow {label} is not registered in worker {}",
            inner.executor.worker_id
        );
        let result = match inner.unknown_workflow {
            UnknownWorkflowPolicy::Reschedule { initial, max } => {
                let deferrals = run
                    .error
                    .as_ref()
                    .filter(|e| e.get("kind").and_then(|k| k.as_str()) == Some("unregistered"))
                    .and_then(|e| e.get("deferrals"))
                    .and_then(|d| d.as_u64())
                    .unwrap_or(0);
                let factor = 2u32.saturating_pow(deferrals.min(16) as u32);
                let delay = initial.saturating_mul(factor).min(max);
                tracing::warn!(run.id = %run.id, %message, ?delay, "rescheduling a run this worker cannot execute");
                let reason = json!({
                    "message": message,
                    "kind": "unregistered",
                    "deferrals": deferrals + 1,
                });
                inner
                    .store
                    .contract()
                    .release_run(run.id, &inner.executor.worker_id, delay, reason)
                    .await
                    .map(|_| ())
            }
            UnknownWorkflowPolicy::Fail => {
                tracing::error!(run.id = %run.id, %message, "failing a run this worker cannot execute");
                inner
                    .store
                    .contract()
                    .fail_run(FailRun {
                        run_id: run.id,
                        worker_id: inner.executor.worker_id.clone(),
                        error: ErrorRecord::new(message)
                            .with_kind("unregistered")
                            .non_retryable()
                            .to_json(),
                        force: true,
                    })
                    .await
                    .map(|_| ())
            }
        };
        if let Err(error) = result {
            match error {
                StoreError::LeaseLost { .. } | StoreError::WrongState { .. } => {}
                error => tracing::warn!(%error, "could not hand back an unknown workflow's run"),
            }
        }
    }
}

/// A run this worker executes: its id is in the worker's in-flight set until dropped.
struct InFlight {
    set: Arc<std::sync::Mutex<HashSet<Uuid>>>,
    run_id: Uuid,
}

impl InFlight {
    /// Marks `run_id` as executing; `None` when it already is.
    fn enter(set: &Arc<std::sync::Mutex<HashSet<Uuid>>>, run_id: Uuid) -> Option<InFlight> {
        let mut runs = set.lock().unwrap_or_else(|poison| poison.into_inner());
        runs.insert(run_id).then(|| InFlight {
            set: set.clone(),
            run_id,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut runs = self.set.lock().unwrap_or_else(|poison| poison.into_inner());
        runs.remove(&self.run_id);
    }
}

/// A worker slot held by one run: frees it, and wakes the claim loop, when dropped.
struct Slot {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    freed: Arc<Notify>,
    /// Counts the slot in [`WORKER_SLOTS_IN_USE`](crate::metrics::WORKER_SLOTS_IN_USE)
    /// while it lives.
    _in_use: crate::metrics::SlotInUse,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The permit first, so that the woken claim loop sees the free slot.
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

/// Waits for a wake-up; `None` when the stream ended and must be re-subscribed.
async fn next_wakeup(notifications: &mut Option<NotificationStream>) -> Option<()> {
    match notifications {
        Some(stream) => loop {
            match stream.next().await {
                // None makes a run claimable: a finish, or a status change or a published
                // value for waiters.
                Some(
                    crate::store::Notification::RunFinished { .. }
                    | crate::store::Notification::StatusChanged { .. }
                    | crate::store::Notification::StateChanged { .. },
                ) => continue,
                Some(_) => return Some(()),
                None => return None,
            }
        },
        None => std::future::pending().await,
    }
}

/// `base` ± 20 %, so that idle workers do not poll in lockstep.
fn jitter(base: Duration) -> Duration {
    let factor = rand::rng().random_range(0.8..1.2);
    base.mul_f64(factor)
}
