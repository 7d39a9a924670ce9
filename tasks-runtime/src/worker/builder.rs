//! Configuring a worker: the [`WorkerBuilder`], its defaults, the checks of its settings,
//! and what a worker does with a run it cannot execute ([`UnknownWorkflowPolicy`]).

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Worker, WorkerError, WorkerInner};
use crate::context::ExecutionLimits;
use crate::executor::Executor;
use crate::liveness::Liveness;
use crate::purge::Retention;
use crate::queue::{ClaimFilter, QueueOptions};
use crate::registry::Registry;
use crate::store::SharedStore;

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
}
