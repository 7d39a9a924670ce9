//! What a run is created, failed and claimed with: the parameters of [`RunStore::create_run`],
//! [`LeaseStore::fail_run`] and the runs a claim returns.

#[cfg(doc)]
use crate::{ChildStore, LeaseStore, LifecycleStore, Notification};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::flow::Concurrency;
use crate::holder::Holder;
use crate::limits::{self, Field, LimitError};
use crate::model::RunStatus;
use crate::model::WorkflowRun;

use super::pages::{ListRuns, Page};
use crate::retry::RetryPolicy;

#[cfg(doc)]
use super::Store;

/// The namespace stores use when none is chosen.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Parameters of [`RunStore::create_run`].
#[derive(Debug, Clone, Default)]
pub struct CreateRun {
    /// The registered workflow name.
    pub workflow_name: String,
    /// The workflow version, if versioned.
    pub version: Option<String>,
    /// The workflow input.
    pub input: Option<Value>,
    /// Extra configuration stored with the run.
    pub config: Value,
    /// Free-form context.
    pub context: Option<Value>,
    /// When the run may start; `None` means now, or `delay` from now.
    pub available_at: Option<DateTime<Utc>>,
    /// When `available_at` is unset: start this long after now, by the store's clock (so a
    /// client with a skewed clock still delays by exactly this much).
    pub delay: Option<Duration>,
    /// After this instant the run fails instead of executing.
    pub deadline_at: Option<DateTime<Utc>>,
    /// The workflow-level retry policy, stored in `config.retryPolicy`.
    pub retry_policy: Option<RetryPolicy>,
    /// Deduplication key: a second create with the same workflow name and key returns the
    /// first run, while that run holds the key (see `idempotency_scope`).
    pub idempotency_key: Option<String>,
    /// How long the run holds its `idempotency_key` (for ever by default); nothing without
    /// a key. A create whose key is held by a run whose scope has lapsed releases the key
    /// from that run and creates a new one.
    pub idempotency_scope: crate::idempotency::IdempotencyScope,
    // Flow control.
    /// Pending runs of higher priority are claimed first (default 0).
    pub priority: i32,
    /// The run's concurrency key and limit: at most that many runs of the key run at once,
    /// across every worker.
    pub concurrency: Option<Concurrency>,
    /// The run's queue (see [`crate::queue`]); `None` is [`DEFAULT_QUEUE`](crate::queue::DEFAULT_QUEUE).
    pub queue: Option<String>,
    /// The W3C trace context every execution of the run joins (see [`crate::trace`]).
    pub trace_context: Option<crate::trace::TraceContext>,
}

impl CreateRun {
    /// The idempotency scope as stored: its name and time to live in milliseconds, both
    /// `None` without a key or for ever.
    pub fn stored_scope(&self) -> (Option<&'static str>, Option<i64>) {
        match self.idempotency_key {
            Some(_) => self.idempotency_scope.stored(),
            None => (None, None),
        }
    }

    /// The config as stored: `config` (a JSON object, or null for none) with the retry
    /// policy under `retryPolicy`.
    pub fn stored_config(&self) -> StoreResult<Value> {
        let mut config = match &self.config {
            Value::Object(map) => map.clone(),
            Value::Null => Default::default(),
            other => {
                return Err(StoreError::InvalidArgument(format!(
                    "run config must be a JSON object, got {other}"
                )));
            }
        };
        if let Some(policy) = self.retry_policy {
            let policy = serde_json::to_value(policy)
                .map_err(|error| StoreError::InvalidArgument(error.to_string()))?;
            config.insert("retryPolicy".into(), policy);
        }
        Ok(Value::Object(config))
    }

    /// Checks every value against the [`limits`]: the namespace the run goes to, the names, the
    /// key, the JSON documents, the instants, the delay and the retry policy. A store reaches it
    /// through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_namespace(namespace)?;
        limits::check_text(
            Field::WorkflowName,
            &self.workflow_name,
            limits::MAX_WORKFLOW_NAME_BYTES,
        )?;
        if let Some(version) = &self.version {
            limits::check_text(Field::Version, version, limits::MAX_VERSION_BYTES)?;
        }
        if let Some(key) = &self.idempotency_key {
            limits::check_text(
                Field::IdempotencyKey,
                key,
                limits::MAX_IDEMPOTENCY_KEY_BYTES,
            )?;
        }
        self.idempotency_scope.check()?;
        if let Some(input) = &self.input {
            limits::check_json(Field::Input, input)?;
        }
        limits::check_json(Field::Config, &self.config)?;
        if let Some(context) = &self.context {
            limits::check_json(Field::Context, context)?;
        }
        if let Some(at) = self.available_at {
            limits::check_time(Field::AvailableAt, at)?;
        }
        if let Some(at) = self.deadline_at {
            limits::check_time(Field::Deadline, at)?;
        }
        if let Some(delay) = self.delay {
            limits::check_duration(Field::Delay, delay)?;
        }
        if let Some(policy) = &self.retry_policy {
            policy.check()?;
        }
        if let Some(concurrency) = &self.concurrency {
            concurrency.check()?;
        }
        if let Some(queue) = &self.queue {
            limits::check_queue_name(queue)?;
        }
        Ok(())
    }

    /// The queue as stored: [`CreateRun::queue`] or the default queue.
    pub fn stored_queue(&self) -> &str {
        self.queue.as_deref().unwrap_or(crate::queue::DEFAULT_QUEUE)
    }

    /// A run of `workflow_name` with everything else defaulted.
    pub fn new(workflow_name: impl Into<String>) -> Self {
        CreateRun {
            workflow_name: workflow_name.into(),
            config: Value::Object(Default::default()),
            ..CreateRun::default()
        }
    }
}

/// What [`RunStore::create_or_get_run`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedRun {
    /// The run: the new one, or the one that holds the idempotency key.
    pub run: WorkflowRun,
    /// This call created the run; `false` when a run held its idempotency key already.
    pub created: bool,
}

/// Parameters of [`LeaseStore::fail_run`].
#[derive(Debug, Clone)]
pub struct FailRun {
    /// The run.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
    /// The error to record.
    pub error: Value,
    /// Fail for good, whatever the retry policy says.
    pub force: bool,
}

impl FailRun {
    /// Checks the holder's worker id and the error against the [`limits`]. A store reaches it
    /// through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_json(Field::Error, &self.error)
    }
}

/// A run as a claim returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedRun {
    /// The run, now running under the claiming worker by a new claim epoch: its
    /// [`Holder::of`] is the holder every write of this execution carries.
    pub run: WorkflowRun,
    /// This claim is the run's very first execution: nothing can have been recorded for it
    /// yet, so its step history need not be loaded. After the claim, `attempts` is 1 and
    /// `started_at` is the claim's own time (a claim sets `started_at` only when it was
    /// unset; retries, takeovers and resumes count another attempt or keep an older
    /// `started_at`), and it was not forked (a fork starts with copied history). A store
    /// may say `false` when unsure: that only costs a history read.
    pub first_execution: bool,
}

impl ClaimedRun {
    /// The holder every write of this claim's execution carries: the claiming worker, by
    /// the claim's epoch ([`Holder::of`] the claimed run).
    pub fn holder(&self) -> Holder {
        Holder::new(
            self.run.worker_id.clone().unwrap_or_default(),
            self.run.claim_epoch,
        )
    }
}

/// Runs as records: create, read, list and count. Part of every store ([`Store`] requires
/// it); the errors common to every method are on [`Store`].
#[async_trait::async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a pending run, available at `available_at`, or `delay` after now by the
    /// store's clock, or now; announces it with [`Notification::RunAvailable`]. With an
    /// idempotency key, a second create of the same workflow name and key (racing or not)
    /// creates nothing and returns the first run. The run's trace context
    /// ([`CreateRun::trace_context`]) is stored with it, and every read and claim of the run
    /// returns it ([`WorkflowRun::trace_context`]); [`ChildStore::start_child`] stores the child's
    /// the same way, and [`LifecycleStore::fork_run`] copies the source's.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a config that is not a JSON object or
    /// null, or a time out of the store's range.
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        Ok(self.create_or_get_run(params).await?.run)
    }

    /// [`RunStore::create_run`], saying whether this call created the run or found the run
    /// that holds its idempotency key ([`CreatedRun::created`]): what an API answers 201 or
    /// 200 by. Of racing creates with one key, at most one says it created the run (exactly
    /// one, unless the answer of the one that created it was lost on a broken connection:
    /// the store's retry then finds the run held and says `false`).
    ///
    /// Errors: those of [`RunStore::create_run`].
    async fn create_or_get_run(&self, params: CreateRun) -> StoreResult<CreatedRun>;

    /// The run with this id, or `None`.
    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>>;

    /// A page of runs by `(created_at, id)` in the requested order, filtered.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a zero limit or both cursors given.
    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>>;

    /// How many runs of the namespace are in each of `statuses`, in the order given, zeros
    /// included (a status given twice is counted once, where it first appears). The live
    /// statuses are what the partial indexes cover: counting them stays cheap however many
    /// finished runs the store keeps, while counting a terminal status reads every run in it.
    ///
    /// Errors: only the database's ([`StoreError::Database`]).
    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>>;
}
