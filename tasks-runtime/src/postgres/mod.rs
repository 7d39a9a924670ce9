//! The Postgres store: the production backend, shared by workers on many machines.

mod migrate;
mod notify;
mod recorder;
mod rows;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

pub use migrate::{migrate, MigrateError, Migration, MIGRATIONS, SCHEMA};
#[doc(hidden)]
pub use recorder::{complete_runs_sql, record_steps_sql};

use crate::error::{db, StoreError, StoreResult};
use crate::model::{RunStatus, StepAttempt, StepStatus, WorkflowRun};
use crate::retry::RetryPolicy;
use crate::store::{complete_separately, operation_verb};
use crate::store::{
    CreateRun, CreateStepAttempt, Cursor, FailRun, ListRuns, ListStepAttempts, Notification,
    NotificationStream, Page, PageQuery, RecordStepAttempt, StepUpdate, Store, DEFAULT_NAMESPACE,
};
use notify::{Batcher, Hub};
use recorder::{Completer, Recorder};
use rows::{RunRow, StepRow, RUN_COLUMNS, STEP_COLUMNS};

/// Connections in the pool of [`PgStore::connect`]; see [`PgStore::pool_options`] to choose
/// another size.
pub const MAX_CONNECTIONS: u32 = 16;

/// The store on Postgres.
///
/// Cloning is cheap and shares the pool. [`PgStore::with_namespace`] gives a store on the
/// same pool that sees another namespace.
///
/// A store belongs to the Tokio runtime it is first used on: its pool's connections and its
/// background tasks (the `LISTEN` connection, the batched writers of step records, run
/// completions and wake-ups) live there, and stop with that runtime. Open one store per
/// runtime; in particular, give each `#[tokio::test]` its own store rather than sharing a
/// `static` one, since every such test runs on a runtime of its own.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_runtime::postgres::PgStore;
///
/// let store = PgStore::connect("postgres://postgres@127.0.0.1/app").await?;
/// store.migrate().await?;
/// let tenant = store.with_namespace("tenant-a");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    namespace: Arc<str>,
    hub: Arc<Hub>,
    batcher: Arc<Batcher>,
    recorder: Arc<Recorder>,
    completer: Arc<Completer>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// A store on an existing pool, in the [default namespace](DEFAULT_NAMESPACE).
    pub fn new(pool: PgPool) -> Self {
        PgStore {
            hub: Arc::new(Hub::new(pool.clone())),
            batcher: Arc::new(Batcher::new(pool.clone())),
            recorder: Arc::new(Recorder::new(pool.clone())),
            completer: Arc::new(Completer::new(pool.clone())),
            pool,
            namespace: Arc::from(DEFAULT_NAMESPACE),
        }
    }

    /// The settings of the pool [`PgStore::connect`] opens: [`MAX_CONNECTIONS`]
    /// connections, and a ping only for a connection that sat idle for 30 s (sqlx's default
    /// pings every connection before every statement, one more round trip each). Adjust them
    /// and pass the pool to [`PgStore::new`]:
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use tasks_runtime::postgres::PgStore;
    ///
    /// let pool = PgStore::pool_options()
    ///     .max_connections(40)
    ///     .connect("postgres://postgres@127.0.0.1/app")
    ///     .await?;
    /// let store = PgStore::new(pool);
    /// # Ok(()) }
    /// ```
    ///
    /// While the store is subscribed to notifications (a worker always is; so is
    /// `RunHandle::result`), its `LISTEN` holds one of the pool's connections.
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for < Duration::from_secs(30) {
                        return Ok(true);
                    }
                    sqlx::Connection::ping(conn).await.map(|()| true)
                })
            })
    }

    /// Connects a pool with [the store's settings](PgStore::pool_options) to `url` (a
    /// `postgres://` URL) and returns a store on it. Does not migrate: call
    /// [`PgStore::migrate`].
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options: PgConnectOptions = url.parse().map_err(db("parsing the database URL"))?;
        let pool = PgStore::pool_options()
            .connect_with(options)
            .await
            .map_err(db("connecting to the database"))?;
        Ok(PgStore::new(pool))
    }

    /// The same store, seeing only `namespace`.
    pub fn with_namespace(&self, namespace: impl Into<String>) -> Self {
        PgStore {
            pool: self.pool.clone(),
            namespace: Arc::from(namespace.into()),
            hub: self.hub.clone(),
            batcher: self.batcher.clone(),
            recorder: self.recorder.clone(),
            completer: self.completer.clone(),
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the schema migrations; see [`migrate`].
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        migrate(&self.pool).await
    }

    async fn fetch_run(
        &self,
        run_id: Uuid,
        operation: &'static str,
    ) -> StoreResult<Option<WorkflowRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2"
        );
        sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?
            .map(|row| row.into_run(operation))
            .transpose()
    }

    /// After an operator's update matched no row: the run as it is when `done` says its
    /// status already is the outcome (idempotent repeat), else why it cannot be changed.
    async fn settle(
        &self,
        run_id: Uuid,
        operation: &'static str,
        done: impl Fn(RunStatus) -> bool,
    ) -> StoreResult<WorkflowRun> {
        match self.fetch_run(run_id, operation).await? {
            None => Err(StoreError::RunNotFound { id: run_id }),
            Some(run) if done(run.status) => Ok(run),
            Some(run) => Err(StoreError::WrongState {
                id: run_id,
                operation: operation_verb(operation),
                status: run.status,
            }),
        }
    }

    /// Explains why a fenced update of `run_id` matched no row.
    async fn miss(
        &self,
        run_id: Uuid,
        worker_id: Option<&str>,
        operation: &'static str,
    ) -> StoreError {
        match self.fetch_run(run_id, operation).await {
            Err(error) => error,
            Ok(None) => StoreError::RunNotFound { id: run_id },
            Ok(Some(run)) => match worker_id {
                Some(worker)
                    if run.status == RunStatus::Running
                        && run.worker_id.as_deref() != Some(worker) =>
                {
                    StoreError::LeaseLost {
                        id: run_id,
                        worker_id: worker.to_owned(),
                    }
                }
                _ => StoreError::WrongState {
                    id: run_id,
                    operation: operation_verb(operation),
                    status: run.status,
                },
            },
        }
    }

    async fn update_run<'q>(
        &'q self,
        sql: &'q str,
        run_id: Uuid,
        worker_id: Option<&str>,
        operation: &'static str,
        bind: impl FnOnce(RunQuery<'q>) -> RunQuery<'q>,
    ) -> StoreResult<Option<WorkflowRun>> {
        let query = sqlx::query_as::<_, RunRow>(sql)
            .bind(&*self.namespace)
            .bind(run_id);
        bind(query)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?
            .map(|row| row.into_run(operation))
            .transpose()
            .inspect(|run| {
                if run.is_none() {
                    tracing::debug!(%run_id, worker_id, operation, "fenced update matched no run");
                }
            })
    }

    /// Tells waiters that `run` finished (after its write committed) and returns it.
    async fn announce_finished(&self, run: WorkflowRun) -> WorkflowRun {
        self.notify(Notification::RunFinished {
            namespace: self.namespace.to_string(),
            run_id: run.id,
        })
        .await;
        run
    }

    /// Queues a wake-up for this namespace; it is sent after the caller's statement
    /// committed, batched with others (see [`notify::Batcher`]).
    async fn notify(&self, notification: Notification) {
        self.batcher.send(&notification);
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_step(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        status: StepStatus,
        output: Option<Value>,
        error: Option<Value>,
        operation: &'static str,
    ) -> StoreResult<StepUpdate> {
        let sql = format!(
            "UPDATE tasks.step_attempts sa
                SET status = $4, output = $5, error = $6, finished_at = now(), updated_at = now()
               FROM tasks.workflow_runs wr
              WHERE sa.namespace = $1 AND sa.workflow_run_id = $2 AND sa.id = $3
                AND sa.status = 'running'
                AND wr.namespace = sa.namespace AND wr.id = sa.workflow_run_id
                AND wr.status = 'running' AND wr.worker_id = $7
          RETURNING {}",
            prefixed("sa", STEP_COLUMNS)
        );
        let updated = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(step_attempt_id)
            .bind(status.as_str())
            .bind(output)
            .bind(error)
            .bind(worker_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        if let Some(row) = updated {
            return Ok(StepUpdate::Recorded(row.into_step(operation)?));
        }

        // The fence missed. Paused or canceled runs interrupt the step: mark it so and
        // report the interruption. Anything else is an error the caller must see.
        let run = self
            .fetch_run(run_id, operation)
            .await?
            .ok_or(StoreError::RunNotFound { id: run_id })?;
        if matches!(run.status, RunStatus::Paused | RunStatus::Canceled) {
            let mark = sqlx::query(
                "UPDATE tasks.step_attempts SET status = $4, updated_at = now()
                  WHERE namespace = $1 AND workflow_run_id = $2 AND id = $3
                    AND status IN ('running', 'paused')",
            )
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(step_attempt_id)
            .bind(run.status.as_str())
            .execute(&self.pool)
            .await
            .map_err(db(operation))?;
            if mark.rows_affected() > 0 {
                return Ok(StepUpdate::Interrupted {
                    run_status: run.status,
                });
            }
        }
        let step = self.get_step_attempt(step_attempt_id).await?;
        match step {
            Some(step) if step.workflow_run_id == run_id && step.status != StepStatus::Running => {
                Err(StoreError::StepAlreadyFinished {
                    id: step_attempt_id,
                    status: step.status,
                })
            }
            Some(step) if step.workflow_run_id == run_id => {
                Err(self.miss(run_id, Some(worker_id), operation).await)
            }
            _ => Err(StoreError::StepNotFound {
                id: step_attempt_id,
            }),
        }
    }
}

/// The claim statement: fails runs past their deadline, then claims runs for a worker.
/// Binds: namespace, worker id, lease in ms, most runs to claim, the deadline error (JSON).
/// Public (hidden) so that the benchmark's ceiling issues exactly this text.
#[doc(hidden)]
pub fn claim_runs_sql() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH expired AS (
                UPDATE tasks.workflow_runs
                   SET status = 'failed', error = $5, worker_id = NULL, available_at = NULL,
                       finished_at = now(), updated_at = now()
                 WHERE namespace = $1 AND status IN ('pending', 'running', 'sleeping')
                   AND deadline_at IS NOT NULL AND deadline_at <= now()
             RETURNING id
             ),
             -- Pending runs first, then runs whose lease or sleep is over; each group in
             -- the order of its index, so a claim reads only the rows it takes.
             pending AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND status = 'pending' AND available_at <= now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                 ORDER BY available_at, created_at
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED
             ), due AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND status IN ('running', 'sleeping')
                   AND available_at <= now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                 ORDER BY available_at, created_at
                 LIMIT GREATEST($4 - (SELECT count(*) FROM pending), 0)
                 FOR UPDATE SKIP LOCKED
             )
             UPDATE tasks.workflow_runs wr
                SET status = 'running', worker_id = $2,
                    -- Waking from a durable sleep continues the same attempt.
                    attempts = wr.attempts + CASE WHEN wr.status = 'sleeping' THEN 0 ELSE 1 END,
                    available_at = now() + $3 * INTERVAL '1 millisecond',
                    started_at = COALESCE(wr.started_at, now()), updated_at = now()
              -- The locked rows by their physical address (stable: we hold their locks), so
              -- the update visits exactly them whatever the planner believes about the
              -- namespace. A join on the key could scan every run of a namespace whose
              -- statistics are stale, once per claimed row. A row a concurrent writer
              -- changed after this statement's snapshot is locked but not updated: it is
              -- simply not claimed this time.
              WHERE wr.ctid = ANY(ARRAY(SELECT ctid FROM pending UNION ALL SELECT ctid FROM due))
          RETURNING {}",
            prefixed("wr", RUN_COLUMNS)
        )
    });
    &SQL
}

type RunQuery<'q> = sqlx::query::QueryAs<'q, Postgres, RunRow, sqlx::postgres::PgArguments>;

/// `a.x, a.y, ...` for a column list.
fn prefixed(alias: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|column| format!("{alias}.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PgStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn scoped(&self, namespace: &str) -> Arc<dyn Store> {
        Arc::new(self.with_namespace(namespace))
    }

    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "creating a workflow run";
        let config = params.stored_config()?;
        let sql = format!(
            "INSERT INTO tasks.workflow_runs
                 (namespace, id, workflow_name, version, status, idempotency_key, config, context,
                  input, attempts, available_at, deadline_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, 0,
                     COALESCE($9, now() + $11 * INTERVAL '1 millisecond', now()), $10, now(), now())
             ON CONFLICT (namespace, workflow_name, idempotency_key) WHERE idempotency_key IS NOT NULL
             DO NOTHING
             RETURNING {RUN_COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(Uuid::now_v7())
            .bind(&params.workflow_name)
            .bind(&params.version)
            .bind(&params.idempotency_key)
            .bind(&config)
            .bind(&params.context)
            .bind(&params.input)
            .bind(params.available_at)
            .bind(params.deadline_at)
            .bind(params.delay.map(millis))
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        match inserted {
            Some(row) => {
                let run = row.into_run(OPERATION)?;
                self.notify(Notification::RunAvailable {
                    namespace: self.namespace.to_string(),
                })
                .await;
                Ok(run)
            }
            None => {
                // Lost the idempotency race (or a plain repeat): hand back the first run.
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                      WHERE namespace = $1 AND workflow_name = $2 AND idempotency_key = $3"
                );
                sqlx::query_as::<_, RunRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.workflow_name)
                    .bind(&params.idempotency_key)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db(OPERATION))?
                    .into_run(OPERATION)
            }
        }
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        self.fetch_run(run_id, "getting a workflow run").await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        const OPERATION: &str = "listing workflow runs";
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut query = QueryBuilder::<Postgres>::new(format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs WHERE namespace = "
        ));
        query.push_bind(&*self.namespace);
        if let Some(cursor) = page.cursor {
            query.push(format_args!(
                " AND (created_at, id) {} (",
                page.cursor_operator()
            ));
            query
                .push_bind(cursor.created_at)
                .push(", ")
                .push_bind(cursor.id)
                .push(")");
        }
        if !params.statuses.is_empty() {
            let statuses: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
            query
                .push(" AND status = ANY(")
                .push_bind(statuses)
                .push(")");
        }
        if let Some(name) = &params.workflow_name {
            query.push(" AND workflow_name = ").push_bind(name);
        }
        if let Some(after) = params.created_after {
            query.push(" AND created_at >= ").push_bind(after);
        }
        if let Some(before) = params.created_before {
            query.push(" AND created_at <= ").push_bind(before);
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build_query_as::<RunRow>()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let runs = rows::runs(rows, OPERATION)?;
        Ok(page.finish(runs, |run| Cursor::new(run.created_at, run.id)))
    }

    async fn claim_runs(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowRun>> {
        const OPERATION: &str = "claiming workflow runs";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query_as::<_, RunRow>(claim_runs_sql())
            .bind(&*self.namespace)
            .bind(worker_id)
            .bind(millis(lease))
            .bind(i64::from(limit))
            .bind(serde_json::json!({ "message": "Workflow run deadline exceeded", "kind": "deadline", "retryable": false }))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let mut runs = rows::runs(rows, OPERATION)?;
        // Oldest first, so callers start work in the order it was queued.
        runs.sort_by_key(|run| (run.created_at, run.id));
        Ok(runs)
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "extending a lease";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET available_at = now() + $4 * INTERVAL '1 millisecond', updated_at = now()
              WHERE namespace = $1 AND id = $2 AND status = 'running' AND worker_id = $3
          RETURNING {RUN_COLUMNS}"
        );
        match self
            .update_run(&sql, run_id, Some(worker_id), OPERATION, |q| {
                q.bind(worker_id).bind(millis(lease))
            })
            .await?
        {
            Some(run) => Ok(run),
            None => Err(self.miss(run_id, Some(worker_id), OPERATION).await),
        }
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "sleeping a workflow run";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET status = 'sleeping', available_at = $4, worker_id = NULL, updated_at = now()
              WHERE namespace = $1 AND id = $2 AND status = 'running' AND worker_id = $3
          RETURNING {RUN_COLUMNS}"
        );
        match self
            .update_run(&sql, run_id, Some(worker_id), OPERATION, |q| {
                q.bind(worker_id).bind(until)
            })
            .await?
        {
            // No wake-up: the run is not available before `until`.
            Some(run) => Ok(run),
            None => Err(self.miss(run_id, Some(worker_id), OPERATION).await),
        }
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "completing a workflow run";
        // Completions of many runs share one statement and one commit (see `Completer`).
        let mut completed = self
            .completer
            .complete(&self.namespace, run_id, worker_id, &output, Vec::new())
            .await?
            .ok();
        if completed.is_none() {
            // The batch refuses a run that changed while it ran (a heartbeat extending the
            // lease, say); this statement re-checks the fence on the run's newest version.
            let sql = format!(
                "UPDATE tasks.workflow_runs
                    SET status = 'completed', output = $4, error = NULL, available_at = NULL,
                        finished_at = now(), updated_at = now()
                  WHERE namespace = $1 AND id = $2 AND status = 'running' AND worker_id = $3
              RETURNING {RUN_COLUMNS}"
            );
            completed = self
                .update_run(&sql, run_id, Some(worker_id), OPERATION, |q| {
                    q.bind(worker_id).bind(&output)
                })
                .await?;
        }
        match completed {
            Some(run) => Ok(self.announce_finished(run).await),
            None => Err(self.miss(run_id, Some(worker_id), OPERATION).await),
        }
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        RecordStepAttempt::check_last_steps(&steps, run_id, worker_id)?;
        if steps.is_empty() {
            return self.complete_run(run_id, worker_id, output).await;
        }
        // The steps and the completion in the completion's statement: one commit.
        match self
            .completer
            .complete(&self.namespace, run_id, worker_id, &output, steps)
            .await?
        {
            Ok(run) => Ok(self.announce_finished(run).await),
            // Refused: nothing was written. The separate writes say why (or succeed, if the
            // run was only being changed at that moment and is still ours).
            Err(steps) => complete_separately(self, run_id, worker_id, output, steps).await,
        }
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "failing a workflow run";
        let defaults = RetryPolicy::DEFAULT_RUN;
        let sql = format!(
            "WITH policy AS (
                SELECT id, attempts, deadline_at,
                       COALESCE((config #>> '{{retryPolicy,maxAttempts}}')::int, $7) AS max_attempts,
                       COALESCE((config #>> '{{retryPolicy,initialIntervalMs}}')::float8, $8) AS initial_ms,
                       COALESCE((config #>> '{{retryPolicy,backoffCoefficient}}')::float8, $9) AS coefficient,
                       COALESCE((config #>> '{{retryPolicy,maximumIntervalMs}}')::float8, $10) AS maximum_ms
                  FROM tasks.workflow_runs
                 WHERE namespace = $1 AND id = $2
             ), delay AS (
                SELECT id, deadline_at, ($5 OR attempts >= max_attempts) AS exhausted,
                       COALESCE($6::float8,
                                LEAST(initial_ms * power(coefficient, GREATEST(attempts - 1, 0)), maximum_ms))
                           * INTERVAL '1 millisecond' AS wait
                  FROM policy
             ), decision AS (
                SELECT id, wait,
                       exhausted OR (deadline_at IS NOT NULL AND now() + wait >= deadline_at) AS give_up
                  FROM delay
             )
             UPDATE tasks.workflow_runs wr
                SET status = CASE WHEN d.give_up THEN 'failed' ELSE 'pending' END,
                    available_at = CASE WHEN d.give_up THEN NULL ELSE now() + d.wait END,
                    finished_at = CASE WHEN d.give_up THEN now() ELSE NULL END,
                    error = $4, worker_id = NULL, started_at = NULL, updated_at = now()
               FROM decision d
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.id = d.id
                AND wr.status = 'running' AND wr.worker_id = $3
          RETURNING {}",
            prefixed("wr", RUN_COLUMNS)
        );
        let worker_id = params.worker_id.clone();
        let custom_delay = params.custom_delay.map(|d| millis(d) as f64);
        let run = self
            .update_run(&sql, params.run_id, Some(&worker_id), OPERATION, |q| {
                q.bind(params.worker_id)
                    .bind(params.error)
                    .bind(params.force)
                    .bind(custom_delay)
                    .bind(i32::try_from(defaults.max_attempts).unwrap_or(i32::MAX))
                    .bind(millis(defaults.initial_interval) as f64)
                    .bind(defaults.backoff_coefficient)
                    .bind(millis(defaults.max_interval) as f64)
            })
            .await?;
        match run {
            Some(run) if run.status == RunStatus::Failed => Ok(self.announce_finished(run).await),
            Some(run) => Ok(run),
            None => Err(self.miss(params.run_id, Some(&worker_id), OPERATION).await),
        }
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "releasing a workflow run";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET status = 'pending', attempts = GREATEST(attempts - 1, 0), worker_id = NULL,
                    available_at = now() + $4 * INTERVAL '1 millisecond', error = $5,
                    updated_at = now()
              WHERE namespace = $1 AND id = $2 AND status = 'running' AND worker_id = $3
          RETURNING {RUN_COLUMNS}"
        );
        match self
            .update_run(&sql, run_id, Some(worker_id), OPERATION, |q| {
                q.bind(worker_id).bind(millis(delay)).bind(reason)
            })
            .await?
        {
            Some(run) => Ok(run),
            None => Err(self.miss(run_id, Some(worker_id), OPERATION).await),
        }
    }

    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "canceling a workflow run";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET status = 'canceled', worker_id = NULL, available_at = NULL,
                    finished_at = now(), updated_at = now()
              WHERE namespace = $1 AND id = $2
                AND status IN ('pending', 'running', 'sleeping', 'paused')
          RETURNING {RUN_COLUMNS}"
        );
        if let Some(run) = self
            .update_run(&sql, run_id, None, OPERATION, |q| q)
            .await?
        {
            return Ok(self.announce_finished(run).await);
        }
        self.settle(run_id, OPERATION, |status| status == RunStatus::Canceled)
            .await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "pausing a workflow run";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET status = 'paused', worker_id = NULL, available_at = NULL, updated_at = now()
              WHERE namespace = $1 AND id = $2 AND status IN ('pending', 'running', 'sleeping')
          RETURNING {RUN_COLUMNS}"
        );
        if let Some(run) = self
            .update_run(&sql, run_id, None, OPERATION, |q| q)
            .await?
        {
            return Ok(run);
        }
        self.settle(run_id, OPERATION, |status| status == RunStatus::Paused)
            .await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "resuming a workflow run";
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET status = 'pending', available_at = now(), updated_at = now()
              WHERE namespace = $1 AND id = $2 AND status = 'paused'
          RETURNING {RUN_COLUMNS}"
        );
        if let Some(run) = self
            .update_run(&sql, run_id, None, OPERATION, |q| q)
            .await?
        {
            self.notify(Notification::RunAvailable {
                namespace: self.namespace.to_string(),
            })
            .await;
            return Ok(run);
        }
        self.settle(run_id, OPERATION, |status| {
            matches!(status, RunStatus::Pending | RunStatus::Running)
        })
        .await
    }

    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        const OPERATION: &str = "creating a step attempt";
        // clock_timestamp(), not now(): attempts created in one transaction still get
        // increasing timestamps; `id` (UUIDv7) breaks any remaining tie.
        let sql = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, 'running', $7, $8, now(), clock_timestamp(), now()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.status = 'running' AND wr.worker_id = $4
          RETURNING {STEP_COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(Uuid::now_v7())
            .bind(&params.worker_id)
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(&params.config)
            .bind(&params.context)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        match inserted {
            Some(row) => row.into_step(OPERATION),
            None => Err(self
                .miss(params.run_id, Some(&params.worker_id), OPERATION)
                .await),
        }
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: &str = "getting a step attempt";
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts WHERE namespace = $1 AND id = $2"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(step_attempt_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_step(OPERATION))
            .transpose()
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        const OPERATION: &str = "listing step attempts";
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut query = QueryBuilder::<Postgres>::new(format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts WHERE namespace = "
        ));
        query.push_bind(&*self.namespace);
        query
            .push(" AND workflow_run_id = ")
            .push_bind(params.workflow_run_id);
        if let Some(cursor) = page.cursor {
            query.push(format_args!(
                " AND (created_at, id) {} (",
                page.cursor_operator()
            ));
            query
                .push_bind(cursor.created_at)
                .push(", ")
                .push_bind(cursor.id)
                .push(")");
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build_query_as::<StepRow>()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let steps = rows::steps(rows, OPERATION)?;
        Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        const OPERATION: &str = "loading step history";
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2
              ORDER BY created_at, id"
        );
        let rows = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        rows::steps(rows, OPERATION)
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        self.finish_step(
            run_id,
            step_attempt_id,
            worker_id,
            StepStatus::Completed,
            Some(output),
            None,
            "completing a step attempt",
        )
        .await
    }

    async fn fail_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        error: Value,
    ) -> StoreResult<StepUpdate> {
        self.finish_step(
            run_id,
            step_attempt_id,
            worker_id,
            StepStatus::Failed,
            None,
            Some(error),
            "failing a step attempt",
        )
        .await
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        const OPERATION: &str = "recording a step attempt";
        params.check_finished()?;
        // The common case goes through the shared recorder: one statement (and commit) for
        // every step of every run that finished meanwhile.
        let params = match self.recorder.record(&self.namespace, params).await? {
            Ok(attempt) => return Ok(StepUpdate::Recorded(attempt)),
            Err(refused) => refused,
        };
        // The fence refused it: find out why on the single-row path, which marks an
        // interrupted attempt and reports anything else as an error.
        // One statement: insert the finished attempt only while the run is ours. Its times
        // come from the database clock; `started_at` goes back by the measured duration.
        let sql = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                  started_at, finished_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, $7, $8, $9, $10,
                    clock_timestamp() - $11 * INTERVAL '1 microsecond',
                    clock_timestamp(), clock_timestamp(), clock_timestamp()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.status = 'running' AND wr.worker_id = $4
          RETURNING {STEP_COLUMNS}"
        );
        let elapsed = i64::try_from(params.elapsed.as_micros()).unwrap_or(i64::MAX);
        let inserted = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(Uuid::now_v7())
            .bind(&params.worker_id)
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(params.status.as_str())
            .bind(&params.config)
            .bind(&params.output)
            .bind(&params.error)
            .bind(elapsed)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        if let Some(row) = inserted {
            return Ok(StepUpdate::Recorded(row.into_step(OPERATION)?));
        }
        let run = self
            .fetch_run(params.run_id, OPERATION)
            .await?
            .ok_or(StoreError::RunNotFound { id: params.run_id })?;
        if !matches!(run.status, RunStatus::Paused | RunStatus::Canceled) {
            return Err(self
                .miss(params.run_id, Some(&params.worker_id), OPERATION)
                .await);
        }
        // Interrupted: keep a trace of the attempt, marked like its run, without its result.
        sqlx::query(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config,
                  started_at, created_at, updated_at)
             VALUES ($1, $3, $2, $4, $5, $6, $7,
                     clock_timestamp() - $8 * INTERVAL '1 microsecond',
                     clock_timestamp(), clock_timestamp())",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .bind(Uuid::now_v7())
        .bind(&params.step_name)
        .bind(params.kind.as_str())
        .bind(run.status.as_str())
        .bind(&params.config)
        .bind(elapsed)
        .execute(&self.pool)
        .await
        .map_err(db(OPERATION))?;
        Ok(StepUpdate::Interrupted {
            run_status: run.status,
        })
    }

    async fn publish(&self, notification: Notification) -> StoreResult<()> {
        // A store only ever speaks for its own namespace, whatever the notification says.
        let namespace = self.namespace.to_string();
        let notification = match notification {
            Notification::RunAvailable { .. } => Notification::RunAvailable { namespace },
            Notification::RunFinished { run_id, .. } => {
                Notification::RunFinished { namespace, run_id }
            }
            Notification::Missed { .. } => Notification::Missed { namespace },
        };
        notify::publish(&self.pool, &notification).await
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        self.hub.subscribe(self.namespace.to_string()).await
    }
}
