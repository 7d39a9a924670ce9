//! The client: start runs, await their results, and operate on them.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

mod events;
mod state;
mod wait;

pub use events::SendOptions;
pub use state::StateWaitError;
pub use wait::{WAIT_SAFETY_REREAD, WaitError};

use crate::definition::{Workflow, WorkflowDefinition};
use crate::error::StoreError;
use crate::failure::ErrorRecord;
use crate::flow::Concurrency;
use crate::limits::{self, Field, LimitError};
use crate::model::{RunStatus, StepAttempt, WorkflowRun};
use crate::purge::purge_batches;
use crate::registry::{InvalidInput, Registry, RegistryError, Violation};
use crate::retention::PurgeRuns;
use crate::store::{CreateRun, ListRuns, ListStepAttempts, Notification, Page, SharedStore};
use crate::trace::TraceContext;

/// Why a run could not be started or looked at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No workflow with this name (and version) is registered in this binary.
    #[error("workflow {name:?}{} is not registered", version.as_ref().map(|v| format!(" version {v:?}")).unwrap_or_default())]
    UnknownWorkflow {
        /// The name asked for.
        name: String,
        /// The version asked for, if any.
        version: Option<String>,
    },
    /// [`Client::start_in`] on a client whose store does not keep its runs in Postgres
    /// ([`Store::is_postgres`](crate::Store::is_postgres) is `false`): a run created in the
    /// caller's Postgres transaction would be invisible to that store. Nothing was written.
    #[error(
        "a transactional start needs a client on a Postgres store; the store of namespace \
         {namespace:?} is not one"
    )]
    NotPostgres {
        /// The namespace of the client's store.
        namespace: String,
    },
    /// The input does not match the workflow's input schema, or does not decode into its
    /// input type (a number out of the type's range), or a typed input holds a NaN or
    /// infinite float anywhere (JSON has neither); nothing was stored.
    #[error(transparent)]
    InvalidInput(#[from] InvalidInput),
    /// A value exceeds one of the [`limits`] (a name or key too long, a
    /// payload too large or too deep, NUL, an instant or duration out of range); nothing
    /// was stored. The client checks before the store does, and a store's own
    /// [`StoreError::Limit`] is reported here too.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The input could not be serialized or parsed.
    #[error("the input is not valid JSON for this workflow: {0}")]
    Json(#[source] serde_json::Error),
    /// The registry of linked workflows and steps could not be built (duplicates, or an
    /// invalid name).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(StoreError),
    // Events sent to a run.
    /// A JSON event whose topic the run's workflow does not declare
    /// (`#[workflow(events(...))]`); nothing was stored.
    #[error("workflow {workflow:?} does not accept events on topic {topic:?} (it declares: {})", if declared.is_empty() { "none".to_owned() } else { declared.join(", ") })]
    UndeclaredEvent {
        /// The workflow of the run.
        workflow: String,
        /// The topic of the event.
        topic: String,
        /// The topics the workflow declares.
        declared: Vec<&'static str>,
    },
    // Published state.
    /// A published value that does not decode into the type asked for
    /// ([`Client::get_state`]).
    #[error(
        "the value of state {key:?} of workflow run {run_id} does not decode into the requested type: {source}"
    )]
    InvalidState {
        /// The run.
        run_id: Uuid,
        /// The key.
        key: String,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    // Schedules.
    /// A cron expression or timezone that does not parse; nothing was stored.
    #[cfg(feature = "schedules")]
    #[error(transparent)]
    InvalidSchedule(#[from] crate::schedule::ScheduleError),
    /// The workflow derives each run's concurrency key from its input and the key function
    /// failed (it panicked, or the input does not decode); nothing was stored. A derived key
    /// past the limits (NUL, too long) is a [`ClientError::Limit`], as a given one is.
    #[error(transparent)]
    ConcurrencyKey(#[from] crate::flow::ConcurrencyKeyError),
    /// A JSON event payload that does not match the payload type's JSON Schema, or does not
    /// decode into it; nothing was stored. Every violation is reported with its path.
    #[error("invalid payload for event {topic:?} of workflow {workflow:?}: {}", violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidEvent {
        /// The workflow of the run.
        workflow: String,
        /// The topic of the event.
        topic: String,
        /// Every violation, each with its JSON path.
        violations: Vec<Violation>,
    },
}

impl From<StoreError> for ClientError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Limit(limit) => ClientError::Limit(limit),
            other => ClientError::Store(other),
        }
    }
}

/// How a run ended, when it did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run failed; the error is what the workflow (or a step) recorded.
    #[error("workflow run {run_id} failed: {error}")]
    Failed {
        /// The run.
        run_id: Uuid,
        /// The recorded error.
        error: ErrorRecord,
    },
    /// The run was canceled.
    #[error("workflow run {run_id} was canceled")]
    Canceled {
        /// The run.
        run_id: Uuid,
    },
    /// The run completed but its output does not decode as the expected type.
    #[error("the output of workflow run {run_id} does not match its type: {source}")]
    Output {
        /// The run.
        run_id: Uuid,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The run does not exist.
    #[error("workflow run {run_id} does not exist")]
    NotFound {
        /// The run.
        run_id: Uuid,
    },
    /// [`RunHandle::result_within`] gave up waiting.
    #[error("workflow run {run_id} did not finish within {waited:?}")]
    Timeout {
        /// The run.
        run_id: Uuid,
        /// How long it waited.
        waited: Duration,
    },
    /// The store failed while waiting.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Options of a new run.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    idempotency_key: Option<String>,
    idempotency_scope: crate::idempotency::IdempotencyScope,
    available_at: Option<DateTime<Utc>>,
    delay: Option<Duration>,
    deadline_at: Option<DateTime<Utc>>,
    version: Option<String>,
    context: Option<Value>,
    // Flow control.
    priority: i32,
    concurrency: KeyChoice,
    queue: Option<String>,
    trace_context: Option<TraceContext>,
}

/// Where a start's concurrency key comes from.
#[derive(Debug, Clone, Default)]
enum KeyChoice {
    /// The workflow's derivation, if it declares one.
    #[default]
    Derived,
    /// [`StartOptions::concurrency_key`].
    Given(Concurrency),
    /// [`StartOptions::without_concurrency_key`].
    Without,
}

impl StartOptions {
    /// Default options: start now, no deadline, no idempotency key.
    pub fn new() -> Self {
        StartOptions::default()
    }

    /// A second start with the same workflow name and key returns the first run, while that
    /// run holds the key: for ever unless [`idempotency_scope`](Self::idempotency_scope)
    /// says otherwise.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// How long the run holds its idempotency key (see [`IdempotencyScope`]); the default is
    /// for ever. Without an idempotency key it has no effect. When the key is held already,
    /// the holder's scope counts: the start returns the holder and this scope is not used.
    ///
    /// [`IdempotencyScope`]: crate::IdempotencyScope
    pub fn idempotency_scope(mut self, scope: crate::idempotency::IdempotencyScope) -> Self {
        self.idempotency_scope = scope;
        self
    }

    /// Start no earlier than `at`.
    pub fn start_at(mut self, at: DateTime<Utc>) -> Self {
        self.available_at = Some(at);
        self
    }

    /// Start after `delay` from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Fail the run if it has not finished by `at`.
    pub fn deadline(mut self, at: DateTime<Utc>) -> Self {
        self.deadline_at = Some(at);
        self
    }

    /// For untyped starts: the version to run (default: the latest registered).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Free-form context stored with the run and readable from the workflow.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// Claim this run before pending runs of lower priority (default 0; negative values are
    /// claimed after the default). Priority is strict: see `tasks::guide::semantics`.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// At most `limit` runs of `key` run at once in the namespace, across every worker (the
    /// limit is stored with each run; give every run of a key the same one).
    ///
    /// It replaces the key and limit the workflow derives from the input
    /// (`#[workflow(concurrency(key = ..., limit = ...))]`) for this run.
    pub fn concurrency_key(mut self, key: impl Into<String>, limit: u32) -> Self {
        self.concurrency = KeyChoice::Given(Concurrency::new(key, limit));
        self
    }

    /// Start this run without a concurrency key, even when its workflow derives one from the
    /// input: it counts against no key's limit and waits for none (an operator's rerun, say).
    /// Undoes an earlier [`concurrency_key`](Self::concurrency_key) of the same options.
    pub fn without_concurrency_key(mut self) -> Self {
        self.concurrency = KeyChoice::Without;
        self
    }

    /// The queue the run goes to, instead of its workflow's
    /// ([`WorkflowDefinition::queue`](crate::WorkflowDefinition::queue)) or the default one
    /// (see [`crate::queue`]). The name follows the rules of workflow names; a name that
    /// breaks them is refused by the start ([`ClientError`] with a
    /// [`LimitError::InvalidName`]).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The trace the run's executions join (see [`crate::trace`]), for a caller that holds
    /// a W3C trace context itself (an incoming `traceparent` header, say). Without it the
    /// run takes the current `tracing` span's OpenTelemetry context when the
    /// `opentelemetry` feature is on, and no trace context otherwise.
    pub fn trace_context(mut self, trace: TraceContext) -> Self {
        self.trace_context = Some(trace);
        self
    }
}

/// Starts and operates on runs.
///
/// ```no_run
/// # async fn demo(store: tasks_runtime::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_runtime::{Client, StartOptions};
///
/// let client = Client::new(store)?;
/// let handle = client
///     .start_json("checkout", serde_json::json!({ "order_id": 7 }), StartOptions::new())
///     .await?;
/// let output = handle.result().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    store: SharedStore,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.store.namespace())
            .field("registry", &self.registry)
            .finish()
    }
}

impl Client {
    /// A client on `store` that knows every workflow linked into this binary.
    pub fn new(store: impl Into<SharedStore>) -> Result<Self, RegistryError> {
        Ok(Client::with_registry(
            store,
            Arc::new(Registry::from_inventory()?),
        ))
    }

    /// A client on `store` with an explicit registry.
    pub fn with_registry(store: impl Into<SharedStore>, registry: Arc<Registry>) -> Self {
        Client {
            store: store.into(),
            registry,
        }
    }

    /// The store behind the client.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The workflows this client knows.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Starts a run of `W`; the compiler checks the input type.
    pub async fn start<W: Workflow>(
        &self,
        input: W::Input,
    ) -> Result<RunHandle<W::Output>, ClientError> {
        self.start_with::<W>(input, StartOptions::new()).await
    }

    /// Starts a run of `W` with options.
    pub async fn start_with<W: Workflow>(
        &self,
        input: W::Input,
        options: StartOptions,
    ) -> Result<RunHandle<W::Output>, ClientError> {
        let definition = W::definition();
        check_finite_input(definition, &input)?;
        let input = serde_json::to_value(&input).map_err(ClientError::Json)?;
        check_type(definition, &input)?;
        let run = self.create(definition, input, options).await?;
        Ok(self.handle(run.id))
    }

    /// Starts a run by workflow name with JSON input, as another service or the command
    /// line would. The input is checked against the [`limits`], then
    /// validated against the workflow's JSON Schema, then decoded into the workflow's input
    /// type; on any violation nothing is stored and every violation is reported with its
    /// path. A workflow without input takes `null`, or `{}`.
    pub async fn start_json(
        &self,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> Result<RunHandle<Value>, ClientError> {
        let (definition, input) = self.checked_json(name, input, &options)?;
        let run = self.create(definition, input, options).await?;
        Ok(self.handle(run.id))
    }

    /// The workflow `name` names (at `options`' version, or the latest) and `input` checked
    /// against the limits, its schema and its input type.
    fn checked_json(
        &self,
        name: &str,
        input: Value,
        options: &StartOptions,
    ) -> Result<(&'static WorkflowDefinition, Value), ClientError> {
        let definition = match options.version.as_deref() {
            Some(version) => self.registry.get(name, Some(version)),
            None => self.registry.latest(name),
        }
        .ok_or_else(|| ClientError::UnknownWorkflow {
            name: name.to_owned(),
            version: options.version.clone(),
        })?;
        let input = unit_input(definition, input);
        // First: the schema validator recurses through the document.
        limits::check_json(Field::Input, &input)?;
        self.registry
            .validate_input(definition.name, definition.version, &input)?;
        check_type(definition, &input)?;
        Ok((definition, input))
    }

    /// Like [`Client::start_json`], from JSON text. Malformed JSON is
    /// [`ClientError::Json`].
    pub async fn start_json_str(
        &self,
        name: &str,
        input: &str,
        options: StartOptions,
    ) -> Result<RunHandle<Value>, ClientError> {
        let input: Value = serde_json::from_str(input).map_err(ClientError::Json)?;
        self.start_json(name, input, options).await
    }

    async fn create(
        &self,
        definition: &'static WorkflowDefinition,
        input: Value,
        options: StartOptions,
    ) -> Result<WorkflowRun, ClientError> {
        let params = self.create_params(definition, input, options)?;
        let run = self.store.contract().create_run(params).await?;
        crate::metrics::run_started(definition.name);
        tracing::debug!(run.id = %run.id, workflow.name = definition.name, "run started");
        Ok(run)
    }

    /// The checked parameters of a new run.
    fn create_params(
        &self,
        definition: &'static WorkflowDefinition,
        input: Value,
        options: StartOptions,
    ) -> Result<CreateRun, ClientError> {
        let concurrency = match options.concurrency {
            KeyChoice::Derived => definition.derived_concurrency(&input)?,
            KeyChoice::Given(concurrency) => Some(concurrency),
            KeyChoice::Without => None,
        };
        let params = CreateRun {
            workflow_name: definition.name.to_owned(),
            version: definition.version.map(str::to_owned),
            input: Some(input),
            config: Value::Object(Default::default()),
            context: options.context,
            available_at: options.available_at,
            delay: options.delay,
            deadline_at: options.deadline_at,
            retry_policy: definition.retry_policy,
            idempotency_key: options.idempotency_key,
            idempotency_scope: options.idempotency_scope,
            priority: options.priority,
            concurrency,
            queue: options
                .queue
                .or_else(|| definition.queue.map(str::to_owned)),
            trace_context: crate::trace::for_new_run(options.trace_context),
        };
        params.check(self.store.namespace())?;
        Ok(params)
    }

    /// A handle on an existing run whose output decodes as `T` (use `Value` when unsure).
    pub fn handle<T>(&self, run_id: Uuid) -> RunHandle<T> {
        RunHandle {
            run_id,
            store: self.store.clone(),
            output: PhantomData,
        }
    }

    /// Fetches a run.
    pub async fn get_run(&self, run_id: Uuid) -> Result<Option<WorkflowRun>, StoreError> {
        self.store.contract().get_run(run_id).await
    }

    /// Lists runs with filters and cursor pagination.
    pub async fn list_runs(&self, query: ListRuns) -> Result<Page<WorkflowRun>, StoreError> {
        self.store.contract().list_runs(query).await
    }

    /// Lists the step attempts of a run with cursor pagination.
    pub async fn list_steps(
        &self,
        query: ListStepAttempts,
    ) -> Result<Page<StepAttempt>, StoreError> {
        self.store.contract().list_step_attempts(query).await
    }

    /// Cancels a run.
    pub async fn cancel(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        let run = self
            .store
            .contract()
            .lifecycle()?
            .cancel_run(run_id)
            .await?;
        crate::metrics::run_finished(run.workflow_name.clone(), "canceled");
        Ok(run)
    }

    /// Pauses a run; a running run stops at its next step boundary.
    pub async fn pause(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.pause_run(run_id).await
    }

    /// Resumes a paused run.
    pub async fn resume(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.resume_run(run_id).await
    }

    /// Runs a failed or canceled run again from its first unfinished step (see
    /// [`LifecycleStore::retry_run`](crate::LifecycleStore::retry_run)): completed steps keep their outputs and do not run again, the
    /// steps that failed run again with their full retry budget, and the run's own attempt
    /// counter and retry policy start over. A run in another state is a
    /// [`StoreError::WrongState`]; an unknown run a [`StoreError::RunNotFound`].
    pub async fn retry(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.retry_run(run_id).await
    }

    /// Starts a new run from the finished run `run_id` (see
    /// [`LifecycleStore::fork_run`](crate::LifecycleStore::fork_run)): the steps recorded before the first
    /// attempt of `from_step` (a resolved step name, as `steps()` shows it) replay their
    /// outputs, and `from_step` and everything after it run again, with the workflow's
    /// current code. The new run records `forked_from_run_id` and `forked_from_step`. A live
    /// run is a [`StoreError::WrongState`], a step the run never recorded a
    /// [`StoreError::UnknownStep`].
    pub async fn fork(&self, run_id: Uuid, from_step: &str) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .fork_run(run_id, from_step)
            .await
    }

    /// Deletes the finished runs `params` selects (completed, failed or canceled, finished
    /// before an instant or longer ago than an age) in this client's namespace, with their
    /// step attempts and events, and returns how many runs were deleted. It works in
    /// batches of `params.batch_size` runs, each one short transaction
    /// ([`RetentionStore::purge_runs`](crate::RetentionStore::purge_runs)), until a batch comes back short;
    /// it is safe while workers run: a live run is never deleted.
    ///
    /// ```no_run
    /// # async fn demo(client: tasks_runtime::Client) -> Result<(), tasks_runtime::StoreError> {
    /// use std::time::Duration;
    /// use tasks_runtime::{PurgeRuns, RunStatus};
    ///
    /// let month = Duration::from_secs(30 * 24 * 3600);
    /// let purged = client
    ///     .purge(PurgeRuns::older_than(month).statuses([RunStatus::Failed]))
    ///     .await?;
    /// println!("{purged} failed runs purged");
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: [`StoreError::NotTerminal`] for a live status, [`StoreError::Limit`] for a
    /// batch size or cutoff past the limits (nothing deleted); a database error after some
    /// batches committed (those runs stay deleted: purging again continues where it
    /// stopped).
    pub async fn purge(&self, params: PurgeRuns) -> Result<u64, StoreError> {
        let (purged, result) = purge_batches(self.store.contract(), &params, None).await;
        result.map(|()| purged)
    }
}

/// Transactional start (Postgres only).
///
/// A run started with [`Client::start_in`] is created inside the caller's own transaction on
/// the store's Postgres database: it exists if and only if that transaction commits, and
/// its wake-up (a `NOTIFY`, which Postgres delivers at commit and drops on rollback)
/// reaches the workers when it commits, not before. So "write my row and start the
/// workflow that processes it" is atomic: no run for a row that was rolled back, no row
/// without its run.
///
/// The transaction must be on the database of the client's store (the one its workers
/// use), with the `tasks` schema migrated; the run goes into the client's namespace. Only
/// the namespace is taken from the store: the statements run on the caller's connection.
/// The SQLite store has no equivalent (its single writer would have to be the caller's),
/// so a client on any store that is not Postgres gets [`ClientError::NotPostgres`].
///
/// ```no_run
/// # async fn demo(client: tasks_runtime::Client, pool: tasks_runtime::postgres::sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_runtime::StartOptions;
///
/// let mut tx = pool.begin().await?;
/// tasks_runtime::postgres::sqlx::query("INSERT INTO orders (id) VALUES ($1)")
///     .bind(7_i64)
///     .execute(&mut *tx)
///     .await?;
/// let handle = client
///     .start_json_in(&mut *tx, "checkout", serde_json::json!({ "order_id": 7 }), StartOptions::new())
///     .await?;
/// tx.commit().await?; // now the run exists, and a worker is woken
/// # let _ = handle; Ok(()) }
/// ```
#[cfg(feature = "postgres")]
impl Client {
    /// Starts a run of `W` inside the caller's transaction `conn` (pass `&mut *tx` of a
    /// `sqlx::Transaction<'_, Postgres>`): the run exists if and only if that transaction
    /// commits, and workers are woken when it does. Postgres only; the transaction must be
    /// on the database of the client's store. Like [`Client::start_in_with`] with
    /// [`StartOptions::new`], which lists the errors.
    pub async fn start_in<W: Workflow>(
        &self,
        conn: &mut sqlx::PgConnection,
        input: W::Input,
    ) -> Result<RunHandle<W::Output>, ClientError> {
        self.start_in_with::<W>(conn, input, StartOptions::new())
            .await
    }

    /// Starts a run of `W` with options inside the caller's transaction `conn`.
    ///
    /// The input and options are checked exactly as [`Client::start_with`] checks them
    /// (limits, the input type), and the client's store must be a Postgres store, all
    /// before the transaction is touched: on [`ClientError::InvalidInput`],
    /// [`ClientError::Limit`], [`ClientError::Json`] or [`ClientError::NotPostgres`] nothing
    /// was sent to the database and the transaction is still usable. A database error
    /// ([`ClientError::Store`]) happened inside the transaction, which Postgres then aborts:
    /// roll it back. An idempotency key behaves as with [`Client::start_with`]: when a run
    /// with the key exists (committed, or created earlier in this transaction), the handle
    /// is of that run and nothing is created; when another transaction holds a run with the
    /// key uncommitted, this call waits for it to commit or roll back.
    ///
    /// The returned handle names a run that no one else sees until the transaction commits
    /// (waiting on its result before then waits until then; after a rollback the run never
    /// exists: [`RunError::NotFound`]).
    pub async fn start_in_with<W: Workflow>(
        &self,
        conn: &mut sqlx::PgConnection,
        input: W::Input,
        options: StartOptions,
    ) -> Result<RunHandle<W::Output>, ClientError> {
        let definition = W::definition();
        check_finite_input(definition, &input)?;
        let input = serde_json::to_value(&input).map_err(ClientError::Json)?;
        check_type(definition, &input)?;
        let run = self.create_in(conn, definition, input, options).await?;
        Ok(self.handle(run.id))
    }

    /// Like [`Client::start_json`] (the same checks, by workflow name with JSON input),
    /// inside the caller's transaction `conn`, as [`Client::start_in_with`] describes.
    pub async fn start_json_in(
        &self,
        conn: &mut sqlx::PgConnection,
        name: &str,
        input: Value,
        options: StartOptions,
    ) -> Result<RunHandle<Value>, ClientError> {
        let (definition, input) = self.checked_json(name, input, &options)?;
        let run = self.create_in(conn, definition, input, options).await?;
        Ok(self.handle(run.id))
    }

    async fn create_in(
        &self,
        conn: &mut sqlx::PgConnection,
        definition: &'static WorkflowDefinition,
        input: Value,
        options: StartOptions,
    ) -> Result<WorkflowRun, ClientError> {
        let params = self.create_params(definition, input, options)?;
        if !self.store.contract().is_postgres() {
            return Err(ClientError::NotPostgres {
                namespace: self.store.namespace().to_owned(),
            });
        }
        let run = crate::postgres::create_run_in(conn, self.store.namespace(), &params).await?;
        crate::metrics::run_started(definition.name);
        tracing::debug!(run.id = %run.id, workflow.name = definition.name, "run started in the caller's transaction");
        Ok(run)
    }
}

/// Schedules: see [`crate::schedule`].
#[cfg(feature = "schedules")]
impl Client {
    /// Creates a schedule that starts `schedule.workflow_name` (at `schedule.version`, or the
    /// latest registered version when none is given, which is then stored) on its cron
    /// expression in its timezone, with its input. The input is checked like
    /// [`Client::start_json`] checks a start's; its first slot is the first after now by
    /// the store's clock.
    ///
    /// Errors: [`ClientError::InvalidSchedule`] for a cron expression or timezone that does
    /// not parse, [`ClientError::UnknownWorkflow`], [`ClientError::InvalidInput`],
    /// [`ClientError::Limit`], [`ClientError::ConcurrencyKey`] (the workflow derives a key
    /// from the input, and cannot from this one), and [`StoreError::ScheduleExists`] (as [`ClientError::Store`])
    /// when the name is taken. Nothing is stored on any of them.
    pub async fn create_schedule(
        &self,
        schedule: crate::schedule::NewSchedule,
    ) -> Result<crate::schedule::Schedule, ClientError> {
        let (schedule, cadence) = self.checked_schedule(schedule)?;
        let first_slot = move |now| cadence.next_after(now);
        Ok(self
            .store
            .contract()
            .schedules()?
            .create_schedule(schedule, &first_slot)
            .await?)
    }

    /// Like [`Client::create_schedule`], but replaces a schedule of the same name (keeping
    /// its next slot while its cron expression and timezone are unchanged, and whether it
    /// is paused); see [`ScheduleStore::put_schedule`](crate::ScheduleStore::put_schedule).
    pub async fn put_schedule(
        &self,
        schedule: crate::schedule::NewSchedule,
    ) -> Result<crate::schedule::Schedule, ClientError> {
        let (schedule, cadence) = self.checked_schedule(schedule)?;
        let first_slot = move |now| cadence.next_after(now);
        Ok(self
            .store
            .contract()
            .schedules()?
            .put_schedule(schedule, &first_slot)
            .await?)
    }

    fn checked_schedule(
        &self,
        mut schedule: crate::schedule::NewSchedule,
    ) -> Result<(crate::schedule::NewSchedule, crate::schedule::Cadence), ClientError> {
        schedule.check(self.store.namespace())?;
        let cadence = crate::schedule::Cadence::parse(&schedule.cron, &schedule.timezone)?;
        let definition = match schedule.version.as_deref() {
            Some(version) => self.registry.get(&schedule.workflow_name, Some(version)),
            None => self.registry.latest(&schedule.workflow_name),
        }
        .ok_or_else(|| ClientError::UnknownWorkflow {
            name: schedule.workflow_name.clone(),
            version: schedule.version.clone(),
        })?;
        schedule.version = definition.version.map(str::to_owned);
        schedule.input = unit_input(definition, schedule.input);
        self.registry
            .validate_input(definition.name, definition.version, &schedule.input)?;
        check_type(definition, &schedule.input)?;
        // Every slot's run derives its key from this input: a key function that fails on
        // it, or a key past the limits, is refused now rather than at every slot.
        if let Some(concurrency) = definition.derived_concurrency(&schedule.input)? {
            concurrency.check()?;
        }
        Ok((schedule, cadence))
    }

    /// The schedule with this name, or `None`.
    pub async fn get_schedule(
        &self,
        name: &str,
    ) -> Result<Option<crate::schedule::Schedule>, StoreError> {
        self.store.contract().schedules()?.get_schedule(name).await
    }

    /// Every schedule of the namespace, by name.
    pub async fn list_schedules(&self) -> Result<Vec<crate::schedule::Schedule>, StoreError> {
        self.store.contract().schedules()?.list_schedules().await
    }

    /// Pauses a schedule ([`StoreError::ScheduleNotFound`] when there is none).
    pub async fn pause_schedule(
        &self,
        name: &str,
    ) -> Result<crate::schedule::Schedule, StoreError> {
        self.store
            .contract()
            .schedules()?
            .pause_schedule(name)
            .await
    }

    /// Resumes a schedule; the slots missed while it was paused go to its catch-up policy
    /// ([`StoreError::ScheduleNotFound`] when there is none).
    pub async fn resume_schedule(
        &self,
        name: &str,
    ) -> Result<crate::schedule::Schedule, StoreError> {
        self.store
            .contract()
            .schedules()?
            .resume_schedule(name)
            .await
    }

    /// Deletes a schedule; the runs it started are kept ([`StoreError::ScheduleNotFound`]
    /// when there is none).
    pub async fn delete_schedule(&self, name: &str) -> Result<(), StoreError> {
        self.store
            .contract()
            .schedules()?
            .delete_schedule(name)
            .await
    }

    // ---- Named queues (see the `queue` module) ----

    /// Creates or replaces the configuration of a queue (its concurrency and rate limits),
    /// which every worker's claim applies from then on. A refused name or limit is a
    /// [`StoreError::Limit`], and nothing is written.
    ///
    /// ```no_run
    /// # async fn demo(client: tasks_runtime::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tasks_runtime::QueueOptions;
    ///
    /// client
    ///     .put_queue(QueueOptions::new("emails").concurrency(10).rate_limit(100, Duration::from_secs(60)))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn put_queue(
        &self,
        options: crate::queue::QueueOptions,
    ) -> Result<crate::queue::Queue, StoreError> {
        self.store.contract().queues()?.put_queue(&options).await
    }

    /// The configuration of a queue, or `None` when it has none (no limits).
    pub async fn get_queue(&self, name: &str) -> Result<Option<crate::queue::Queue>, StoreError> {
        self.store.contract().queues()?.get_queue(name).await
    }

    /// Every configured queue of the namespace, by name.
    pub async fn list_queues(&self) -> Result<Vec<crate::queue::Queue>, StoreError> {
        self.store.contract().queues()?.list_queues().await
    }

    /// Removes a queue's configuration: its runs are claimed without limits from then on
    /// ([`StoreError::QueueNotFound`] when it has none).
    pub async fn delete_queue(&self, name: &str) -> Result<(), StoreError> {
        self.store.contract().queues()?.delete_queue(name).await
    }
}

/// Refuses an input that would not decode into the workflow's input type when the run
/// executes.
fn check_type(definition: &WorkflowDefinition, input: &Value) -> Result<(), InvalidInput> {
    (definition.check_input)(input).map_err(|error| InvalidInput {
        workflow: definition.display_name(),
        violations: vec![Violation {
            path: String::new(),
            message: format!(
                "does not decode into the workflow's input type (a NaN or infinite float \
                 is stored as null): {error}"
            ),
        }],
    })
}

/// Refuses a typed input holding a NaN or infinite float anywhere (`Some(f64::NAN)` too,
/// which serializes as a `null` that decodes as `None`): it would not read back as itself.
fn check_finite_input<T: serde::Serialize + ?Sized>(
    definition: &WorkflowDefinition,
    input: &T,
) -> Result<(), InvalidInput> {
    limits::check_finite(input).map_err(|found| InvalidInput {
        workflow: definition.display_name(),
        violations: vec![Violation {
            message: format!(
                "is {}, which JSON cannot hold (it would be stored as null)",
                found.value
            ),
            path: found.path,
        }],
    })
}

/// A started run whose output is a `T`.
pub struct RunHandle<T> {
    run_id: Uuid,
    store: SharedStore,
    output: PhantomData<fn() -> T>,
}

/// The input of a workflow that takes none is `null`; an empty object, which is what a form
/// or a webhook sends for "nothing", means the same.
fn unit_input(definition: &WorkflowDefinition, input: Value) -> Value {
    let empty_object = matches!(&input, Value::Object(map) if map.is_empty());
    if empty_object && (definition.input_schema)().get("type") == Some(&Value::from("null")) {
        Value::Null
    } else {
        input
    }
}

impl<T> Clone for RunHandle<T> {
    fn clone(&self) -> Self {
        RunHandle {
            run_id: self.run_id,
            store: self.store.clone(),
            output: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for RunHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.run_id)
            .finish()
    }
}

/// How often a waiting handle re-checks the run even without a notification, in case one
/// was lost on the way.
const RESULT_SAFETY_POLL: Duration = Duration::from_secs(2);

impl<T: DeserializeOwned> RunHandle<T> {
    /// The run's id.
    pub fn id(&self) -> Uuid {
        self.run_id
    }

    /// The run as stored now.
    pub async fn run(&self) -> Result<WorkflowRun, RunError> {
        self.store
            .contract()
            .get_run(self.run_id)
            .await?
            .ok_or(RunError::NotFound {
                run_id: self.run_id,
            })
    }

    /// The run's current status.
    pub async fn status(&self) -> Result<RunStatus, RunError> {
        Ok(self.run().await?.status)
    }

    /// Waits for the run to finish and returns its output. It wakes on the store's
    /// completion notification, not by polling.
    pub async fn result(&self) -> Result<T, RunError> {
        let mut notifications = match self.store.contract().subscribe().await {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot subscribe to notifications; polling for the result");
                None
            }
        };
        loop {
            if let Some(result) = self.finished().await? {
                return result;
            }
            let wake = async {
                match notifications.as_mut() {
                    Some(stream) => loop {
                        match stream.next().await {
                            Some(Notification::RunFinished { run_id, .. })
                                if run_id == self.run_id =>
                            {
                                return;
                            }
                            Some(Notification::Missed { .. }) => return,
                            Some(_) => continue,
                            None => return std::future::pending().await,
                        }
                    },
                    None => std::future::pending().await,
                }
            };
            let _ = tokio::time::timeout(RESULT_SAFETY_POLL, wake).await;
        }
    }

    /// Like [`RunHandle::result`], giving up after `timeout`.
    pub async fn result_within(&self, timeout: Duration) -> Result<T, RunError> {
        match tokio::time::timeout(timeout, self.result()).await {
            Ok(result) => result,
            Err(_) => Err(RunError::Timeout {
                run_id: self.run_id,
                waited: timeout,
            }),
        }
    }

    async fn finished(&self) -> Result<Option<Result<T, RunError>>, RunError> {
        let run = self.run().await?;
        Ok(match run.status {
            RunStatus::Completed => Some(
                serde_json::from_value(run.output.unwrap_or(Value::Null)).map_err(|source| {
                    RunError::Output {
                        run_id: self.run_id,
                        source,
                    }
                }),
            ),
            RunStatus::Failed => Some(Err(RunError::Failed {
                run_id: self.run_id,
                error: run
                    .error
                    .as_ref()
                    .map(ErrorRecord::from_json)
                    .unwrap_or_else(|| ErrorRecord::new("unknown error")),
            })),
            RunStatus::Canceled => Some(Err(RunError::Canceled {
                run_id: self.run_id,
            })),
            _ => None,
        })
    }

    /// Cancels the run.
    pub async fn cancel(&self) -> Result<WorkflowRun, StoreError> {
        let run = self
            .store
            .contract()
            .lifecycle()?
            .cancel_run(self.run_id)
            .await?;
        crate::metrics::run_finished(run.workflow_name.clone(), "canceled");
        Ok(run)
    }

    /// Pauses the run.
    pub async fn pause(&self) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .pause_run(self.run_id)
            .await
    }

    /// Resumes the run.
    pub async fn resume(&self) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .resume_run(self.run_id)
            .await
    }

    /// Every step attempt of the run so far, oldest first.
    pub async fn steps(&self) -> Result<Vec<StepAttempt>, StoreError> {
        self.store.contract().step_history(self.run_id).await
    }
}
