//! Starting runs: typed or by name with JSON input, with [`StartOptions`], and inside the
//! caller's own Postgres transaction; the checks every start makes before the store sees it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

#[cfg(all(doc, feature = "postgres"))]
use super::RunError;
use super::{Client, ClientError, RunHandle};
use crate::definition::{Workflow, WorkflowDefinition};
use crate::flow::Concurrency;
#[cfg(doc)]
use crate::limits::LimitError;
use crate::limits::{self, Field};
use crate::model::WorkflowRun;
use crate::registry::{InvalidInput, Violation};
use crate::store::CreateRun;
use crate::trace::TraceContext;

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

impl Client {
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

/// Refuses an input that would not decode into the workflow's input type when the run
/// executes.
pub(super) fn check_type(
    definition: &WorkflowDefinition,
    input: &Value,
) -> Result<(), InvalidInput> {
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
pub(super) fn check_finite_input<T: serde::Serialize + ?Sized>(
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

/// The input of a workflow that takes none is `null`; an empty object, which is what a form
/// or a webhook sends for "nothing", means the same.
pub(super) fn unit_input(definition: &WorkflowDefinition, input: Value) -> Value {
    let empty_object = matches!(&input, Value::Object(map) if map.is_empty());
    if empty_object && (definition.input_schema)().get("type") == Some(&Value::from("null")) {
        Value::Null
    } else {
        input
    }
}
