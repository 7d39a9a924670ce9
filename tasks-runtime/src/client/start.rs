//! Starting runs: one [`StartBuilder`], typed ([`Client::start`]) or by name with JSON input
//! ([`Client::start_by_name`]), with its options ([`StartOptions`]), sent by `.await` or
//! inside the caller's own Postgres transaction; the checks every start makes before the
//! store sees it.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
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

    /// For a start by name: the version to run (default: the latest registered). A typed
    /// start runs its own type's version and ignores it.
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

/// What a start runs: a workflow type with its input, or a workflow name with JSON input.
enum Target {
    /// A typed start: the input was encoded (or refused) when the start was made.
    Typed {
        definition: &'static WorkflowDefinition,
        input: Result<Value, ClientError>,
    },
    /// A start by name: the input is checked against the named workflow when it is sent.
    ByName { name: String, input: Value },
}

/// A run about to be started: made by [`Client::start`] (typed) or
/// [`Client::start_by_name`] (by name, with JSON input), given options by its methods, and
/// sent by `.await` (or, with the `postgres` feature, inside the caller's transaction by
/// [`StartBuilder::in_transaction`]).
///
/// ```no_run
/// # async fn demo(client: tasks_runtime::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// let handle = client
///     .start_by_name("checkout", serde_json::json!({ "order_id": 7 }))
///     .idempotency_key("order-7")
///     .delay(Duration::from_secs(60))
///     .await?;
/// # let _ = handle; Ok(()) }
/// ```
///
/// Every check (the workflow is registered, the input matches its schema and type, the
/// options are within the [`limits`]) runs when the start is sent, before the store sees
/// it; on any refusal nothing is stored. The errors are [`ClientError`]s:
/// [`UnknownWorkflow`](ClientError::UnknownWorkflow),
/// [`InvalidInput`](ClientError::InvalidInput), [`Limit`](ClientError::Limit),
/// [`Json`](ClientError::Json), [`ConcurrencyKey`](ClientError::ConcurrencyKey) and
/// [`Store`](ClientError::Store).
#[must_use = "a start does nothing until it is awaited"]
pub struct StartBuilder<'c, T> {
    client: &'c Client,
    target: Target,
    options: StartOptions,
    output: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for StartBuilder<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let workflow = match &self.target {
            Target::Typed { definition, .. } => definition.name,
            Target::ByName { name, .. } => name.as_str(),
        };
        f.debug_struct("StartBuilder")
            .field("workflow", &workflow)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<'c, T> StartBuilder<'c, T> {
    /// Replaces every option given so far with `options`: for a caller that builds its
    /// options apart from the start (from command-line flags, say).
    pub fn options(mut self, options: StartOptions) -> Self {
        self.options = options;
        self
    }

    /// See [`StartOptions::idempotency_key`].
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.options = self.options.idempotency_key(key);
        self
    }

    /// See [`StartOptions::idempotency_scope`].
    pub fn idempotency_scope(mut self, scope: crate::idempotency::IdempotencyScope) -> Self {
        self.options = self.options.idempotency_scope(scope);
        self
    }

    /// See [`StartOptions::start_at`].
    pub fn start_at(mut self, at: DateTime<Utc>) -> Self {
        self.options = self.options.start_at(at);
        self
    }

    /// See [`StartOptions::delay`].
    pub fn delay(mut self, delay: Duration) -> Self {
        self.options = self.options.delay(delay);
        self
    }

    /// See [`StartOptions::deadline`].
    pub fn deadline(mut self, at: DateTime<Utc>) -> Self {
        self.options = self.options.deadline(at);
        self
    }

    /// See [`StartOptions::version`].
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.options = self.options.version(version);
        self
    }

    /// See [`StartOptions::context`].
    pub fn context(mut self, context: Value) -> Self {
        self.options = self.options.context(context);
        self
    }

    /// See [`StartOptions::priority`].
    pub fn priority(mut self, priority: i32) -> Self {
        self.options = self.options.priority(priority);
        self
    }

    /// See [`StartOptions::concurrency_key`].
    pub fn concurrency_key(mut self, key: impl Into<String>, limit: u32) -> Self {
        self.options = self.options.concurrency_key(key, limit);
        self
    }

    /// See [`StartOptions::without_concurrency_key`].
    pub fn without_concurrency_key(mut self) -> Self {
        self.options = self.options.without_concurrency_key();
        self
    }

    /// See [`StartOptions::queue`].
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.options = self.options.queue(queue);
        self
    }

    /// See [`StartOptions::trace_context`].
    pub fn trace_context(mut self, trace: TraceContext) -> Self {
        self.options = self.options.trace_context(trace);
        self
    }

    /// The workflow to run and its checked input, then the checked parameters of the run.
    pub(super) fn checked(
        self,
    ) -> Result<(&'c Client, &'static WorkflowDefinition, CreateRun), ClientError> {
        let client = self.client;
        let (definition, input) = match self.target {
            Target::Typed { definition, input } => (definition, input?),
            Target::ByName { name, input } => client.checked_json(&name, input, &self.options)?,
        };
        let params = client.create_params(definition, input, self.options)?;
        Ok((client, definition, params))
    }

    async fn send(self) -> Result<RunHandle<T>, ClientError> {
        Ok(self.outcome().await?.handle)
    }

    /// Sends the start, like `.await`, and says whether it created the run or found the run
    /// that holds its idempotency key ([`Started::created`]): what an HTTP API answers 201
    /// or 200 by.
    ///
    /// Errors: those of `.await` (see [`StartBuilder`]).
    pub async fn outcome(self) -> Result<Started<T>, ClientError> {
        let (client, definition, params) = self.checked()?;
        let outcome = client.store.contract().create_or_get_run(params).await?;
        let run = outcome.run;
        crate::metrics::run_started(definition.name);
        tracing::debug!(
            run.id = %run.id,
            workflow.name = definition.name,
            created = outcome.created,
            "run started"
        );
        Ok(Started {
            handle: client.handle(run.id),
            run,
            created: outcome.created,
        })
    }
}

/// What [`StartBuilder::outcome`] returns: the run's handle, and whether this start created
/// the run.
#[derive(Debug)]
#[non_exhaustive]
pub struct Started<T> {
    /// The handle of the run.
    pub handle: RunHandle<T>,
    /// The run as the start left it: just created (pending), or the run that held the key,
    /// as it was then.
    pub run: crate::model::WorkflowRun,
    /// This start created the run; `false` when a run held its idempotency key already
    /// (the handle is that run's, and nothing was started).
    pub created: bool,
}

impl<'c, T: 'c> IntoFuture for StartBuilder<'c, T> {
    type Output = Result<RunHandle<T>, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl Client {
    /// A start of a run of `W`; the compiler checks the input type. Give it options with
    /// the [`StartBuilder`]'s methods and send it with `.await`:
    /// `client.start::<checkout>(order).idempotency_key("order-7").await?`.
    ///
    /// A typed input holding a NaN or infinite float anywhere is refused
    /// ([`ClientError::InvalidInput`]): JSON has neither, so it would not read back as itself.
    pub fn start<W: Workflow>(&self, input: W::Input) -> StartBuilder<'_, W::Output> {
        let definition = W::definition();
        let input = check_finite_input(definition, &input)
            .map_err(ClientError::from)
            .and_then(|()| serde_json::to_value(&input).map_err(ClientError::Json))
            .and_then(|input| {
                check_type(definition, &input)?;
                Ok(input)
            });
        StartBuilder {
            client: self,
            target: Target::Typed { definition, input },
            options: StartOptions::new(),
            output: PhantomData,
        }
    }

    /// A start of a run by workflow name with JSON input, as another service or the command
    /// line would make it; the version is the latest registered unless
    /// [`StartBuilder::version`] names one. When it is sent, the input is checked against
    /// the [`limits`], then validated against the workflow's JSON Schema, then decoded into
    /// the workflow's input type; on any violation nothing is stored and every violation is
    /// reported with its path. A workflow without input takes `null`, or `{}`.
    pub fn start_by_name(&self, name: &str, input: Value) -> StartBuilder<'_, Value> {
        StartBuilder {
            client: self,
            target: Target::ByName {
                name: name.to_owned(),
                input,
            },
            options: StartOptions::new(),
            output: PhantomData,
        }
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

/// Transactional start, on a Postgres store.
///
/// A run started with [`StartBuilder::in_transaction`] is created inside the caller's own
/// transaction on a Postgres store's database: it exists if and only if that transaction
/// commits, and its wake-up (a `NOTIFY`, which Postgres delivers at commit and drops on
/// rollback) reaches the workers when it commits, not before. So "write my row and start
/// the workflow that processes it" is atomic: no run for a row that was rolled back, no row
/// without its run.
///
/// It takes the [`PgStore`](crate::postgres::PgStore) itself, so it exists only for a
/// Postgres store: the SQLite store has no equivalent (its single writer would have to be
/// the caller's), and neither has the in-memory store.
///
/// ```no_run
/// # async fn demo(client: tasks_runtime::Client, store: tasks_runtime::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = store.pool().begin().await?;
/// tasks_runtime::postgres::sqlx::query("INSERT INTO orders (id) VALUES ($1)")
///     .bind(7_i64)
///     .execute(&mut *tx)
///     .await?;
/// let handle = client
///     .start_by_name("checkout", serde_json::json!({ "order_id": 7 }))
///     .in_transaction(&store, &mut tx)
///     .await?;
/// tx.commit().await?; // now the run exists, and a worker is woken
/// # let _ = handle; Ok(()) }
/// ```
#[cfg(feature = "postgres")]
impl<T> StartBuilder<'_, T> {
    /// Starts the run inside the caller's transaction `conn` (pass `&mut tx` of a
    /// `sqlx::Transaction<'_, Postgres>`, or `&mut *tx`) on `store`'s database, in `store`'s
    /// namespace: the run exists if and only if that transaction commits, and workers are
    /// woken when it does. The transaction must be on the database of `store` (the one its
    /// workers use), with the `tasks` schema migrated; only the namespace is taken from the
    /// store, the statements run on `conn`. The client contributes its registry and checks;
    /// the returned handle reads the run through `store`.
    ///
    /// The input and options are checked exactly as for `.await`, before the transaction
    /// is touched: on [`ClientError::UnknownWorkflow`], [`ClientError::InvalidInput`],
    /// [`ClientError::Limit`], [`ClientError::Json`] or [`ClientError::ConcurrencyKey`]
    /// nothing was sent to the database and the transaction is still usable. A database
    /// error ([`ClientError::Store`]) happened inside the transaction, which Postgres then
    /// aborts: roll it back. An idempotency key behaves as with `.await`: when a run with
    /// the key exists (committed, or created earlier in this transaction), the handle is of
    /// that run and nothing is created; when another transaction holds a run with the key
    /// uncommitted, this call waits for it to commit or roll back.
    ///
    /// The returned handle names a run that no one else sees until the transaction commits
    /// (waiting on its result before then waits until then; after a rollback the run never
    /// exists: [`RunError::NotFound`]).
    pub async fn in_transaction(
        self,
        store: &crate::postgres::PgStore,
        conn: &mut sqlx::PgConnection,
    ) -> Result<RunHandle<T>, ClientError> {
        let (_, definition, params) = self.checked()?;
        let namespace = crate::store::Store::namespace(store);
        params.check(namespace)?;
        let run = store.create_run_in(conn, &params).await?;
        crate::metrics::run_started(definition.name);
        tracing::debug!(run.id = %run.id, workflow.name = definition.name, "run started in the caller's transaction");
        Ok(RunHandle {
            run_id: run.id,
            store: crate::store::SharedStore::new(store.clone()),
            output: PhantomData,
        })
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
