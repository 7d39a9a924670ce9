//! The Postgres store: the production backend, shared by workers on many machines.

mod background;
mod children;
mod claim;
mod events;
mod lifecycle;
mod migrate;
mod notify;
mod queues;
mod recorder;
mod retention;
mod rows;
mod runtimes;
mod schedules;
mod start_in;
mod state;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tasks_core::store::{
    ChildStore, EventStore, LeaseStore, LifecycleStore, QueueStore, RetentionStore, RunStore,
    ScheduleStore, StateStore, StepStore,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection as _, PgConnection, PgPool, Postgres, QueryBuilder};
use uuid::Uuid;

pub use migrate::{MIGRATIONS, MigrateError, Migration, SCHEMA, migrate};
/// The `sqlx` this store is built on: name its types (`sqlx::Transaction`,
/// `sqlx::PgConnection`) through this re-export, so that a transaction given to
/// `Client::start_in` is of the same version.
pub use sqlx;
pub use start_in::create_run_in;

use background::Background;
use notify::{Batcher, Hub};
use recorder::{Completer, Recorder, SKIP_STORED};
use rows::{RUN_COLUMNS, RunRow, STEP_COLUMNS, StepRow, decode_claimed, decode_run};
use tasks_core::children::{ChildWait, StartChild, StartedChild, WaitForChildren};
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::events::{EventWait, RunEvent, SendEvent, SentEvent, WaitForEvent};
use tasks_core::limits::{self, Field};
use tasks_core::model::{RunStatus, StepAttempt, StepStatus, WorkflowRun};
use tasks_core::queue::{ClaimFilter, Queue, QueueOptions};
use tasks_core::retention::PurgeRuns;
use tasks_core::schedule::{DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule};
use tasks_core::state::{PublishedState, SetState, StateSet};
use tasks_core::store::{
    ClaimedRun, CreateRun, CreateStepAttempt, Cursor, DEFAULT_NAMESPACE, FailRun, ListRuns,
    ListStepAttempts, Notification, NotificationStream, Page, PageQuery, RecordStepAttempt,
    SharedStore, StepUpdate, Store, complete_separately,
};
use tasks_core::transition::{
    CANCEL, CLAIM_PENDING, COMPLETE, COMPLETE_STEP, CREATE_STEP, EXPIRE, EXTEND_LEASE, FAIL,
    JSON_COLUMNS, MARKABLE_STEP, PAUSE, QUARANTINE, RECORD_STEP, RELEASE, RESUME, SLEEP,
    Transition, deadline_error, explain_step_miss, forgettable_workers, interrupted,
    keyed_candidates, quarantine_error, retry_after, status_in, step_status_in, stored_again,
};

/// Connections in the pool of [`PgStore::connect`]; see [`PgStore::pool_options`] to choose
/// another size.
pub const MAX_CONNECTIONS: u32 = 16;

/// How long [`PgStore::connect`] waits for the server to accept its first connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The store on Postgres.
///
/// Cloning is cheap and shares the pool. [`PgStore::with_namespace`] gives a store on the
/// same pool that sees another namespace.
///
/// # Background tasks
///
/// A worker's store runs a few tasks beside its callers: the `LISTEN` pump behind
/// [`Store::subscribe`], and the batch writers that put the step
/// records, run completions and wake-ups of many runs into one statement each. They start
/// when first needed, belong to the store (every clone and namespace shares them), and stop
/// with [`PgStore::close`]; [`PgStore::background_tasks`] counts them. A process that only
/// starts, reads and operates on runs starts none: it sends its wake-ups itself, each in a
/// statement of its own after the write committed (one more round trip per start; a store
/// whose wake-up sender already runs queues a new run's wake-up there instead).
///
/// A pool's connections, and these tasks, live on the Tokio runtime that made them. Open one
/// store per runtime (give each `#[tokio::test]` its own). A task whose runtime shut down is
/// noticed on the next use and started again on the caller's runtime, with a warning; the
/// pool replaces the connections that runtime took with it as they fail.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_postgres::PgStore;
///
/// let store = PgStore::connect("postgres://postgres@127.0.0.1/app").await?;
/// store.migrate().await?;
/// let tenant = store.with_namespace("tenant-a")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    namespace: Arc<str>,
    background: Arc<Background>,
    hub: Arc<Hub>,
    batcher: Arc<Batcher>,
    recorder: Arc<Recorder>,
    completer: Arc<Completer>,
    /// Whether this namespace's last claim found a queue with a limit: which claim
    /// statement to try first (see [`claim`]). Shared by the clones of a store, one per
    /// namespace.
    queues_limited: Arc<AtomicBool>,
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
        let background = Arc::new(Background::default());
        PgStore {
            hub: Arc::new(Hub::new(pool.clone(), background.clone())),
            batcher: Arc::new(Batcher::new(pool.clone(), background.clone())),
            recorder: Arc::new(Recorder::new(pool.clone(), background.clone())),
            completer: Arc::new(Completer::new(pool.clone(), background.clone())),
            queues_limited: Arc::default(),
            background,
            pool,
            namespace: Arc::from(DEFAULT_NAMESPACE),
        }
    }

    /// The settings of the pool [`PgStore::connect`] opens: [`MAX_CONNECTIONS`]
    /// connections, a ping only for a connection that sat idle for 30 s (sqlx's default
    /// pings every connection before every statement, one more round trip each), and
    /// `jit = off` on every connection (compiling the claim statement with LLVM can take
    /// seconds once the planner's estimate passes `jit_above_cost`; a pool built otherwise
    /// should turn JIT off too). Adjust them and pass the pool to [`PgStore::new`]:
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use tasks_postgres::PgStore;
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
    ///
    /// A connection belongs to the Tokio runtime that opened it. The pool hands a runtime
    /// none of the connections opened before that runtime first used the pool: each is
    /// closed once and replaced, so a store kept past its runtime works on the next one
    /// without a statement failing on a dead runtime's connection.
    pub fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            // The store's statements are short transactions, and the claim is a large
            // statement: where the planner's estimate passes `jit_above_cost` (a backlog of
            // 100,000 keyed runs does), compiling it with LLVM took 9 s per claim, for a
            // statement that runs in 10 ms. JIT is off on the store's connections.
            .after_connect(|conn, meta| {
                runtimes::opened_connection(meta.age);
                Box::pin(async move {
                    sqlx::Executor::execute(&mut *conn, "SET jit = off").await?;
                    Ok(())
                })
            })
            .before_acquire(|conn, meta| {
                // Opened before this runtime used the pool: perhaps on a runtime that has
                // shut down, which would fail its next statement. Replaced.
                let stale = runtimes::predates_current_runtime(meta.age);
                Box::pin(async move {
                    if stale {
                        return Ok(false);
                    }
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
    ///
    /// A server that refuses the connection, or does not answer within
    /// [`CONNECT_TIMEOUT`], fails the call at once with [`StoreError::Database`] saying why
    /// (the pool alone would keep retrying the first connection for its whole acquire
    /// timeout, 30 s).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let options: PgConnectOptions = url.parse().map_err(db(Operation::Connect))?;
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options)).await {
            Ok(Ok(first)) => {
                // Only a probe: the pool opens its own connections.
                let _ = first.close().await;
            }
            Ok(Err(error)) => return Err(db(Operation::Connect)(error)),
            Err(_) => {
                return Err(StoreError::database(
                    Operation::Connect,
                    format!("the server did not answer within {CONNECT_TIMEOUT:?}"),
                ));
            }
        }
        let pool = PgStore::pool_options()
            .connect_with(options)
            .await
            .map_err(db(Operation::Connect))?;
        Ok(PgStore::new(pool))
    }

    /// The same store, seeing only `namespace`.
    ///
    /// Errors: a [`LimitError`](tasks_core::LimitError) for a namespace past the
    /// [`limits`] (longer than
    /// [`MAX_NAMESPACE_BYTES`](tasks_core::limits::MAX_NAMESPACE_BYTES), or with NUL): a store
    /// never holds a namespace that the database could not take.
    pub fn with_namespace(
        &self,
        namespace: impl Into<String>,
    ) -> Result<Self, tasks_core::LimitError> {
        let namespace = namespace.into();
        limits::check_namespace(&namespace)?;
        Ok(PgStore {
            pool: self.pool.clone(),
            namespace: Arc::from(namespace),
            background: self.background.clone(),
            hub: self.hub.clone(),
            batcher: self.batcher.clone(),
            recorder: self.recorder.clone(),
            completer: self.completer.clone(),
            queues_limited: Arc::default(),
        })
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the schema migrations; see [`migrate()`].
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        migrate(&self.pool).await
    }

    /// How many of the store's background tasks are running now (see the type's docs):
    /// none until a worker (or a wait for a result) needs them.
    pub fn background_tasks(&self) -> usize {
        self.background.running()
    }

    /// Stops the store's background tasks and waits for them to end. They are shared by
    /// every clone and namespace of the store, so close it when nothing uses it any more:
    /// afterwards its batched writes and subscriptions fail with
    /// [`StoreError::Database`] and it sends no wake-ups.
    /// The pool stays open (see [`PgPool::close`]).
    pub async fn close(&self) {
        self.background.close().await;
    }

    async fn fetch_run(
        &self,
        run_id: Uuid,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2"
        );
        sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?
            .map(|row| decode_run(&row, operation))
            .transpose()
    }

    /// Applies `transition` to a run in one fenced statement:
    /// `UPDATE .. SET {set}, updated_at = now() WHERE <run> AND <fence> RETURNING <run>`,
    /// with `$1` the namespace, `$2` the run, `$3` the worker (referenced by the fence of a
    /// leased transition only); `bind` binds the `SET` list's values from `$4` on. A miss is
    /// settled by the transition (already done, or why not); a change is announced.
    async fn transition(
        &self,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        worker_id: Option<&str>,
        bind: impl for<'q> FnOnce(RunQuery<'q>) -> RunQuery<'q>,
    ) -> StoreResult<WorkflowRun> {
        // A transition that may finish the run wakes its parent in the same statement, and
        // locks the parent first; a cancel also cancels the descendants that cascade (see
        // `children.rs`).
        let finishing = transition.wakes_parent();
        let cascade = transition.operation == Operation::CancelRun;
        let update = format!(
            "UPDATE tasks.workflow_runs SET {set}, updated_at = now()
              WHERE namespace = $1 AND id = $2 AND {fence}{parent_first}
          RETURNING {RUN_COLUMNS}",
            fence = transition.fence("", "$3"),
            parent_first = if finishing {
                format!(" AND {}", children::PARENT_FIRST)
            } else {
                String::new()
            },
        );
        let sql = match (finishing, cascade) {
            (false, _) => update,
            (true, false) => format!(
                "WITH {parent_lock}, done AS ({update}), {woken}
                 SELECT done.*, ARRAY[]::uuid[] AS cascaded FROM done",
                parent_lock = children::PARENT_LOCK,
                woken = children::wake_parent_cte(),
            ),
            (true, true) => format!(
                "WITH RECURSIVE {parent_lock}, done AS ({update}), {woken}, {cascade}
                 SELECT done.*, ARRAY(SELECT id FROM cascaded) AS cascaded FROM done",
                parent_lock = children::PARENT_LOCK,
                woken = children::wake_parent_cte(),
                cascade = children::cascade_ctes(),
            ),
        };
        let query = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(worker_id.map(str::to_owned));
        let updated = bind(query)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(transition.operation))?;
        match updated {
            Some(row) => {
                let run = decode_run(&row, transition.operation)?;
                self.announce_now(transition, &run).await;
                if finishing {
                    let cascaded: Vec<Uuid> =
                        sqlx::Row::try_get(&row, "cascaded").map_err(db(transition.operation))?;
                    self.announce_family(&run, &cascaded).await;
                }
                Ok(run)
            }
            None => {
                tracing::debug!(%run_id, worker_id, operation = %transition.operation, "fenced update matched no run");
                let current = self.fetch_run(run_id, transition.operation).await?;
                transition.settle(run_id, worker_id, current)
            }
        }
    }

    /// Sends what `transition` announces about `run` (after its write committed), and
    /// returns the run.
    /// The batched path: the wake-up joins the next batch of the store's wake-up sender.
    fn announce(&self, transition: &Transition, run: WorkflowRun) -> WorkflowRun {
        for notification in transition.announcements(&run) {
            self.batcher.send(&notification);
        }
        run
    }

    /// Sends what `transition` announces about `run` after the transition committed (see
    /// [`PgStore::notify_now`]): the path of single writes (an operator's cancel, pause or
    /// resume, a failure), which starts no background task. A wake-up that cannot be sent
    /// is logged: the run changed, and pollers find it.
    async fn announce_now(&self, transition: &Transition, run: &WorkflowRun) {
        let notifications: Vec<Notification> = transition.announcements(run).collect();
        self.notify_now(&notifications).await;
    }

    /// Sends `notifications` now: into the store's wake-up sender when a worker already runs
    /// it, else in one statement of their own.
    async fn notify_now(&self, notifications: &[Notification]) {
        if notifications.is_empty() || self.batcher.try_send(notifications) {
            return;
        }
        let payloads: Vec<String> = notifications.iter().map(notify::payload).collect();
        let sent = sqlx::query(notify::NOTIFY_ALL)
            .bind(notify::CHANNEL)
            .bind(payloads)
            .execute(&self.pool)
            .await;
        if let Err(error) = sent {
            tracing::warn!(%error, "could not send a wake-up; workers and waiters will find the run by polling");
        }
    }

    /// Fails for good run `run_id`, just claimed by `worker_id`, whose row did not decode
    /// ([`QUARANTINE`]): its undecodable JSON `columns` are moved into the error record as
    /// text and reset, so the row reads again. Like every finishing transition, it wakes the
    /// run's parent when the run is a child. A failure is logged, not returned: the claim
    /// goes on with the other runs, and the run's lease brings it back.
    async fn quarantine(&self, run_id: Uuid, worker_id: &str, reason: &str, columns: &[&str]) {
        tracing::error!(run.id = %run_id, reason, "a claimed run's stored row cannot be decoded; failing it");
        // Every right-hand side reads the row as it was; `error` is replaced in any case.
        let mut moved = Vec::new();
        let mut set = String::from(
            "status = 'failed', worker_id = NULL, available_at = NULL, finished_at = now()",
        );
        for (column, empty) in JSON_COLUMNS {
            if columns.contains(column) {
                moved.push(format!("'{column}', {column}::text"));
                if *column != "error" {
                    set.push_str(&format!(", {column} = {empty}"));
                }
            }
        }
        set.push_str(&format!(
            ", error = $4::jsonb || jsonb_build_object('quarantined', jsonb_build_object({}))",
            moved.join(", ")
        ));
        let error = quarantine_error(run_id, reason);
        let failed = self
            .transition(&QUARANTINE, &set, run_id, Some(worker_id), |q| {
                q.bind(error)
            })
            .await;
        match failed {
            Ok(_) => {}
            Err(StoreError::LeaseLost { .. } | StoreError::WrongState { .. }) => {
                tracing::warn!(run.id = %run_id, "the corrupt run changed before it could be failed")
            }
            Err(error) => {
                tracing::warn!(run.id = %run_id, %error, "could not fail a corrupt run; its lease will bring it back")
            }
        }
    }

    /// Announces run `row`, failed by the claim's deadline sweep ([`EXPIRE`]): its finish,
    /// and its parent's wake-up when it is a child. A row that does not decode is still
    /// announced finished, by its id.
    async fn announce_expired(&self, row: &sqlx::postgres::PgRow) {
        match decode_run(row, Operation::ClaimRuns) {
            Ok(run) => {
                self.announce_now(&EXPIRE, &run).await;
                self.announce_family(&run, &[]).await;
            }
            Err(error) => {
                tracing::warn!(%error, "a run failed by its deadline does not decode");
                if let Ok(run_id) = sqlx::Row::try_get::<Uuid, _>(row, "id") {
                    let parent: Option<Uuid> =
                        sqlx::Row::try_get(row, "parent_run_id").unwrap_or(None);
                    let mut notifications = vec![Notification::RunFinished {
                        namespace: self.namespace.to_string(),
                        run_id,
                    }];
                    if parent.is_some() {
                        notifications.push(Notification::RunAvailable {
                            namespace: self.namespace.to_string(),
                        });
                    }
                    self.notify_now(&notifications).await;
                }
            }
        }
    }

    /// A step attempt of `run_id` could not be written because the run is not running under
    /// `worker_id`. When it was paused or canceled meanwhile, `interrupt` writes the attempt
    /// marked like the run (returning whether it could) and the outcome is an interruption;
    /// otherwise the miss is explained.
    async fn step_refused<'a, F>(
        &'a self,
        transition: &Transition,
        run_id: Uuid,
        step_id: Option<Uuid>,
        worker_id: &str,
        interrupt: impl FnOnce(StepStatus) -> F,
    ) -> StoreResult<StepUpdate>
    where
        F: std::future::Future<Output = StoreResult<bool>> + 'a,
    {
        let operation = transition.operation;
        let run = self.fetch_run(run_id, operation).await?;
        if let Some(run) = &run
            && let Some(mark) = interrupted(run.status)
            && interrupt(mark).await?
        {
            return Ok(StepUpdate::Interrupted {
                run_status: run.status,
            });
        }
        let Some(step_id) = step_id else {
            return Err(transition.miss(run_id, Some(worker_id), run.as_ref()));
        };
        let step = self.get_step_attempt(step_id).await?;
        Err(explain_step_miss(
            transition,
            run_id,
            step_id,
            worker_id,
            run.as_ref(),
            step.as_ref(),
        ))
    }
}

impl PgStore {
    /// One claim statement ([`claim::claim_runs_sql`]): the full claim when `limited`, else
    /// the plain one.
    async fn claim_with(
        &self,
        limited: bool,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<sqlx::postgres::PgRow>> {
        sqlx::query(claim::claim_runs_sql(filter.queues.is_some(), limited))
            .bind(&*self.namespace)
            .bind(worker_id)
            .bind(millis(lease))
            .bind(i64::from(limit))
            .bind(deadline_error())
            .bind(keyed_candidates(limit))
            .bind(filter.queues.as_deref())
            .bind(filter.workflows.as_deref())
            .fetch_all(&self.pool)
            .await
            .map_err(db(Operation::ClaimRuns))
    }
}

/// Whether a row of a claim statement is a run it failed by its deadline, not a claimed one
/// (a row that does not say counts as claimed: its decoding reports it).
fn is_expired_row(row: &sqlx::postgres::PgRow) -> bool {
    sqlx::Row::try_get::<bool, _>(row, "expired").unwrap_or(false)
}

/// The texts of the Postgres store's batch statements, for the benchmark, which measures
/// the database's ceiling with exactly this SQL. Not an API: compiled only with the
/// internal `__bench` feature, and free to change in any release.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub mod __bench {
    /// The claim statement of a worker that serves every queue. Binds, after the six
    /// documented on the store's statement, the served queues and workflows (`text[]`,
    /// NULL for all).
    pub fn claim_runs_sql() -> &'static str {
        super::claim::claim_runs_sql(false, true)
    }

    /// The claim statement of a worker that serves chosen queues (bound as a `text[]`).
    pub fn claim_runs_by_queue_sql() -> &'static str {
        super::claim::claim_runs_sql(true, true)
    }

    /// The plain claim statement (no queue of the namespace has a limit), which a store
    /// uses until it finds such a queue; binds like [`claim_runs_sql`].
    pub fn plain_claim_runs_sql() -> &'static str {
        super::claim::claim_runs_sql(false, false)
    }

    /// The plain claim statement of a worker that serves chosen queues.
    pub fn plain_claim_runs_by_queue_sql() -> &'static str {
        super::claim::claim_runs_sql(true, false)
    }

    /// The claim statement's last parameter for a claim of `limit` runs: how many candidates
    /// with a concurrency key it looks at.
    pub fn claim_keyed_candidates(limit: u32) -> i64 {
        super::keyed_candidates(limit)
    }

    /// The statement that writes finished step attempts of many runs.
    pub fn record_steps_sql() -> &'static str {
        super::recorder::record_steps_sql()
    }

    /// The statement that completes many runs with their last step attempts.
    pub fn complete_runs_sql() -> &'static str {
        super::recorder::complete_runs_sql()
    }
}

type RunQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// `a.x, a.y, ...` for a column list.
/// Inserts a pending run (the statement of [`RunStore::create_run`]) on `conn`: `None` when
/// a run holds its idempotency key already. A key whose holder's scope has lapsed is
/// released first (see [`tasks_core::idempotency`]). Announces nothing.
async fn insert_run(
    conn: &mut sqlx::PgConnection,
    namespace: &str,
    params: &CreateRun,
) -> StoreResult<Option<RunRow>> {
    const OPERATION: Operation = Operation::CreateRun;
    let config = params.stored_config()?;
    if let Some(key) = &params.idempotency_key {
        let release =
            tasks_core::idempotency::release_sql("tasks.workflow_runs", "$1", "$2", "$3", "now()");
        sqlx::query(&release)
            .bind(namespace)
            .bind(&params.workflow_name)
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(db(OPERATION))?;
    }
    let (scope, ttl) = params.stored_scope();
    // A run with a concurrency key brings its key's row (see the claim) in the same
    // statement, so a claim that sees the run sees the row.
    let key_row = match params.concurrency {
        Some(_) => {
            "WITH key_row AS (
                INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
                VALUES ($1, $13) ON CONFLICT DO NOTHING
             ) "
        }
        None => "",
    };
    let sql = format!(
        "{key_row}INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, version, status, idempotency_key, config, context,
              input, attempts, available_at, deadline_at, created_at, updated_at,
              priority, concurrency_key, concurrency_limit,
              idempotency_scope, idempotency_expires_at, traceparent, tracestate, queue)
         VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, 0,
                 COALESCE($9, now() + $11 * INTERVAL '1 millisecond', now()), $10, now(), now(),
                 $12, $13, $14, $15, now() + $16 * INTERVAL '1 millisecond', $17, $18, $19)
         ON CONFLICT (namespace, workflow_name, idempotency_key) WHERE idempotency_key IS NOT NULL
         DO NOTHING
         RETURNING {RUN_COLUMNS}"
    );
    sqlx::query_as::<_, RunRow>(&sql)
        .bind(namespace)
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
        .bind(params.priority)
        .bind(params.concurrency.as_ref().map(|c| c.key().to_owned()))
        .bind(params.concurrency.as_ref().map(|c| c.stored_limit()))
        .bind(scope)
        .bind(ttl)
        .bind(params.trace_context.as_ref().map(|t| t.traceparent()))
        .bind(params.trace_context.as_ref().and_then(|t| t.tracestate()))
        .bind(params.stored_queue())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db(OPERATION))
}

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

    fn is_postgres(&self) -> bool {
        true
    }

    fn scoped(&self, namespace: &str) -> Result<SharedStore, tasks_core::LimitError> {
        Ok(SharedStore::new(self.with_namespace(namespace)?))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        self.hub.subscribe(self.namespace.to_string()).await
    }

    fn lifecycle(&self) -> StoreResult<&dyn LifecycleStore> {
        Ok(self)
    }

    fn events(&self) -> StoreResult<&dyn EventStore> {
        Ok(self)
    }

    fn children(&self) -> StoreResult<&dyn ChildStore> {
        Ok(self)
    }

    fn published_state(&self) -> StoreResult<&dyn StateStore> {
        Ok(self)
    }

    fn schedules(&self) -> StoreResult<&dyn ScheduleStore> {
        Ok(self)
    }

    fn queues(&self) -> StoreResult<&dyn QueueStore> {
        Ok(self)
    }

    fn retention(&self) -> StoreResult<&dyn RetentionStore> {
        Ok(self)
    }
}

#[async_trait]
impl RunStore for PgStore {
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        const OPERATION: Operation = Operation::CreateRun;
        params.check(&self.namespace)?;
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        // The holder found by a refused insert can lose the key before it is read (its scope
        // lapsed and another start released it): then the insert is tried again.
        let mut tries = 0;
        loop {
            tries += 1;
            let inserted = insert_run(&mut conn, &self.namespace, &params).await?;
            let Some(row) = inserted else {
                // Lost the idempotency race (or a plain repeat): hand back the first run.
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                      WHERE namespace = $1 AND workflow_name = $2 AND idempotency_key = $3"
                );
                let holder = sqlx::query_as::<_, RunRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.workflow_name)
                    .bind(&params.idempotency_key)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db(OPERATION))?;
                match holder {
                    Some(holder) => return holder.into_run(OPERATION),
                    None if tries < 3 => continue,
                    // Three lapses in a row during one start: give up as a database error.
                    None => return Err(db(OPERATION)(sqlx::Error::RowNotFound)),
                }
            };
            {
                let run = row.into_run(OPERATION)?;
                // The connection goes back to the pool first: the wake-up takes one of its
                // own, and a small pool must not wait on itself.
                drop(conn);
                // After the insert committed: a NOTIFY in the insert's own transaction would
                // serialize every start on Postgres's notify queue lock at its commit.
                let wake_up = Notification::RunAvailable {
                    namespace: run.namespace.clone(),
                };
                self.notify_now(&[wake_up]).await;
                return Ok(run);
            }
        }
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        self.fetch_run(run_id, Operation::GetRun).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        const OPERATION: Operation = Operation::ListRuns;
        params.check(&self.namespace)?;
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
                .push_bind(cursor.created_at())
                .push(", ")
                .push_bind(cursor.id())
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
        if let Some(parent) = params.parent_run_id {
            query.push(" AND parent_run_id = ").push_bind(parent);
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
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let runs = rows::runs(&rows, OPERATION)?;
        Ok(page.finish(runs, |run| Cursor::new(run.created_at, run.id)))
    }

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT status, count(*) FROM tasks.workflow_runs
              WHERE namespace = $1 AND {} GROUP BY status",
            status_in("", statuses)
        );
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql)
            .bind(&*self.namespace)
            .fetch_all(&self.pool)
            .await
            .map_err(db(Operation::CountRuns))?;
        Ok(tasks_core::store::counts_in_order(statuses, rows))
    }
}

#[async_trait]
impl LeaseStore for PgStore {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        const OPERATION: Operation = Operation::ClaimRuns;
        limits::check_lease(worker_id, lease)?;
        filter.check()?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The statement of the namespace's last known configuration (see [`claim`]). A
        // claim that took no run re-reads the configuration: when it changed, the other
        // statement claims at once (the plain one claims nothing once a queue has a limit).
        let limited = self.queues_limited.load(Ordering::Relaxed);
        let mut rows = self
            .claim_with(limited, worker_id, lease, limit, filter)
            .await?;
        if !rows.iter().any(|row| !is_expired_row(row)) {
            let now_limited: bool = sqlx::query_scalar(claim::limited_queue_exists())
                .bind(&*self.namespace)
                .fetch_one(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            self.queues_limited.store(now_limited, Ordering::Relaxed);
            if now_limited && !limited {
                rows.extend(
                    self.claim_with(true, worker_id, lease, limit, filter)
                        .await?,
                );
            }
        }
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let expired: bool = sqlx::Row::try_get(row, "expired").map_err(db(OPERATION))?;
            if expired {
                self.announce_expired(row).await;
                continue;
            }
            match decode_claimed(row, OPERATION) {
                Ok(claimed) => runs.push(claimed),
                // A poison row must not strand the batch: fail it and go on with the others.
                Err(StoreError::CorruptRun { id, reason, .. }) => {
                    self.quarantine(id, worker_id, &reason, &rows::undecodable_json(row))
                        .await;
                }
                Err(error) => return Err(error),
            }
        }
        // For waiters on a status: batched with the claimer's other announcements (the
        // worker's wake-up sender), never a statement per claim.
        for claimed in &runs {
            for notification in CLAIM_PENDING.announcements(&claimed.run) {
                self.batcher.send(&notification);
            }
        }
        // Oldest first, so callers start work in the order it was queued.
        runs.sort_by_key(|claimed| (claimed.run.created_at, claimed.run.id));
        Ok(runs)
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        limits::check_lease(worker_id, lease)?;
        let set = "available_at = now() + $4 * INTERVAL '1 millisecond'";
        self.transition(&EXTEND_LEASE, set, run_id, Some(worker_id), |q| {
            q.bind(millis(lease))
        })
        .await
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        limits::check_worker_id(worker_id)?;
        limits::check_time(Field::Sleep, until)?;
        let set = "status = 'sleeping', available_at = $4, worker_id = NULL";
        self.transition(&SLEEP, set, run_id, Some(worker_id), |q| q.bind(until))
            .await
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        limits::check_worker_id(worker_id)?;
        limits::check_json(Field::WorkflowOutput, &output)?;
        // Completions of many runs share one statement and one commit (see `Completer`).
        let batched = self
            .completer
            .complete(&self.namespace, run_id, worker_id, &output, Vec::new())
            .await?;
        if let Ok(run) = batched {
            return Ok(self.announce(&COMPLETE, run));
        }
        // The batch refuses a run that changed while it ran (a heartbeat extending the
        // lease, say); this statement re-checks the fence on the run's newest version.
        let set = "status = 'completed', output = $4, error = NULL, available_at = NULL, \
                   finished_at = now()";
        self.transition(&COMPLETE, set, run_id, Some(worker_id), |q| q.bind(output))
            .await
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        RecordStepAttempt::check_last_steps(&steps, run_id, worker_id, &output)?;
        if steps.is_empty() {
            return self.complete_run(run_id, worker_id, output).await;
        }
        // The steps and the completion in the completion's statement: one commit.
        match self
            .completer
            .complete(&self.namespace, run_id, worker_id, &output, steps)
            .await?
        {
            Ok(run) => Ok(self.announce(&COMPLETE, run)),
            // Refused: nothing was written. The separate writes say why (or succeed, if the
            // run was only being changed at that moment and is still ours).
            Err(steps) => complete_separately(self, run_id, worker_id, output, steps).await,
        }
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        params.check()?;
        let (run_id, worker_id) = (params.run_id, params.worker_id.as_str());
        let current = self.fetch_run(run_id, FAIL.operation).await?;
        let run = match current {
            Some(run) if FAIL.admits(&run, Some(worker_id)) => run,
            current => return Err(FAIL.miss(run_id, Some(worker_id), current.as_ref())),
        };
        // The decision was made on the attempt just read: the write applies only to it.
        let retry = retry_after(&run, params.force).map(millis);
        let set = "status = CASE WHEN d.give_up THEN 'failed' ELSE 'pending' END,
                   available_at = CASE WHEN d.give_up THEN NULL
                                       ELSE now() + $5 * INTERVAL '1 millisecond' END,
                   finished_at = CASE WHEN d.give_up THEN now() ELSE NULL END,
                   error = $4, worker_id = NULL, started_at = NULL";
        let sql = format!(
            "WITH {parent_lock}, d AS (
                SELECT ($5::bigint IS NULL
                        OR (deadline_at IS NOT NULL
                            AND now() + $5 * INTERVAL '1 millisecond' >= deadline_at)) AS give_up
                  FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2
             ), done AS (
             UPDATE tasks.workflow_runs wr SET {set}, updated_at = now()
               FROM d
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.attempts = $6 AND {fence}
                AND {parent_first}
          RETURNING {returning}
             ), {woken}
             SELECT * FROM done",
            parent_lock = children::PARENT_LOCK,
            parent_first = children::PARENT_FIRST,
            fence = FAIL.fence("wr.", "$3"),
            returning = prefixed("wr", RUN_COLUMNS),
            woken = children::wake_parent_cte(),
        );
        let updated = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(worker_id)
            .bind(&params.error)
            .bind(retry)
            .bind(run.attempts)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(FAIL.operation))?;
        match updated {
            Some(row) => {
                let run = decode_run(&row, FAIL.operation)?;
                self.announce_now(&FAIL, &run).await;
                self.announce_family(&run, &[]).await;
                Ok(run)
            }
            None => {
                let current = self.fetch_run(run_id, FAIL.operation).await?;
                Err(FAIL.miss(run_id, Some(worker_id), current.as_ref()))
            }
        }
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        limits::check_worker_id(worker_id)?;
        limits::check_duration(Field::Delay, delay)?;
        limits::check_json(Field::Error, &reason)?;
        let set = "status = 'pending', attempts = GREATEST(attempts - 1, 0), worker_id = NULL,
                   available_at = now() + $4 * INTERVAL '1 millisecond', error = $5";
        self.transition(&RELEASE, set, run_id, Some(worker_id), |q| {
            q.bind(millis(delay)).bind(reason)
        })
        .await
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        const OPERATION: Operation = Operation::Heartbeat;
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                // One statement: forget the namespace's dead workers whose runs were all
                // claimed, then write this one's row.
                "WITH forgotten AS (
                    DELETE FROM tasks.workers w
                     WHERE w.namespace = $1 AND w.worker_id <> $2 AND {forgettable}
                 )
                 INSERT INTO tasks.workers (namespace, worker_id, beat_at, stale_at)
                 VALUES ($1, $2, now(), now() + $3 * INTERVAL '1 millisecond')
                 ON CONFLICT (namespace, worker_id)
                 DO UPDATE SET beat_at = EXCLUDED.beat_at, stale_at = EXCLUDED.stale_at",
                forgettable = forgettable_workers("tasks.workflow_runs", "now()"),
            )
        });
        sqlx::query(&SQL)
            .bind(&*self.namespace)
            .bind(worker_id)
            .bind(millis(stale_after))
            .execute(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        Ok(())
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM tasks.workers WHERE namespace = $1 AND worker_id = $2")
            .bind(&*self.namespace)
            .bind(worker_id)
            .execute(&self.pool)
            .await
            .map_err(db(Operation::RemoveWorker))?;
        Ok(())
    }
}

#[async_trait]
impl StepStore for PgStore {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        let operation = CREATE_STEP.operation;
        params.check()?;
        // clock_timestamp(), not now(): attempts created in one transaction still get
        // increasing timestamps; `id` (UUIDv7) breaks any remaining tie.
        let sql = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, 'running', $7, $8, now(), clock_timestamp(), now()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND {fence}
             {SKIP_STORED}
          RETURNING {STEP_COLUMNS}",
            fence = CREATE_STEP.fence("wr.", "$4"),
        );
        let inserted = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(params.id)
            .bind(&params.worker_id)
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(&params.config)
            .bind(&params.context)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        match inserted {
            Some(row) => row.into_step(operation),
            None => {
                let stored = self.get_step_attempt(params.id).await?;
                if let Some(step) = stored_again(params.run_id, stored, false)? {
                    return Ok(step);
                }
                let current = self.fetch_run(params.run_id, operation).await?;
                Err(CREATE_STEP.miss(params.run_id, Some(&params.worker_id), current.as_ref()))
            }
        }
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: Operation = Operation::GetStepAttempt;
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
        const OPERATION: Operation = Operation::ListStepAttempts;
        params.check(&self.namespace)?;
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
                .push_bind(cursor.created_at())
                .push(", ")
                .push_bind(cursor.id())
                .push(")");
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let steps = rows::steps(&rows, OPERATION)?;
        Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        const OPERATION: Operation = Operation::StepHistory;
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2
              ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        rows::steps(&rows, OPERATION)
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        let operation = COMPLETE_STEP.operation;
        limits::check_worker_id(worker_id)?;
        limits::check_json(Field::StepOutput, &output)?;
        let sql = format!(
            "UPDATE tasks.step_attempts sa
                SET status = 'completed', output = $4, finished_at = now(), updated_at = now()
               FROM tasks.workflow_runs wr
              WHERE sa.namespace = $1 AND sa.workflow_run_id = $2 AND sa.id = $3
                AND sa.status = 'running'
                AND wr.namespace = sa.namespace AND wr.id = sa.workflow_run_id AND {fence}
          RETURNING {returning}",
            fence = COMPLETE_STEP.fence("wr.", "$5"),
            returning = prefixed("sa", STEP_COLUMNS)
        );
        let updated = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(step_attempt_id)
            .bind(&output)
            .bind(worker_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        if let Some(row) = updated {
            return Ok(StepUpdate::Recorded(row.into_step(operation)?));
        }
        let marked = |mark: StepStatus| async move {
            let sql = format!(
                "UPDATE tasks.step_attempts SET status = $4, updated_at = now()
                  WHERE namespace = $1 AND workflow_run_id = $2 AND id = $3 AND {}",
                step_status_in("", MARKABLE_STEP)
            );
            let marked = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .bind(step_attempt_id)
                .bind(mark.as_str())
                .execute(&self.pool)
                .await
                .map_err(db(operation))?;
            Ok(marked.rows_affected() > 0)
        };
        self.step_refused(
            &COMPLETE_STEP,
            run_id,
            Some(step_attempt_id),
            worker_id,
            marked,
        )
        .await
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        let operation = RECORD_STEP.operation;
        params.check_finished()?;
        // The common case goes through the shared recorder: one statement (and commit) for
        // every step of every run that finished meanwhile.
        let params = match self.recorder.record(&self.namespace, params).await? {
            Ok(attempt) => return Ok(StepUpdate::Recorded(attempt)),
            Err(refused) => refused,
        };
        // The fence refused it: try once more on the single-row path (the run may have
        // been changed by its own heartbeat), then find out why.
        let elapsed = i64::try_from(params.elapsed.as_micros()).unwrap_or(i64::MAX);
        let sql = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                  args, started_at, finished_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, $7, $8, $9, $10, $12,
                    clock_timestamp() - $11 * INTERVAL '1 microsecond',
                    clock_timestamp(), clock_timestamp(), clock_timestamp()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND {fence}
             {SKIP_STORED}
          RETURNING {STEP_COLUMNS}",
            fence = RECORD_STEP.fence("wr.", "$4"),
        );
        let inserted = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(params.id)
            .bind(&params.worker_id)
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(params.status.as_str())
            .bind(&params.config)
            .bind(&params.output)
            .bind(&params.error)
            .bind(elapsed)
            .bind(&params.args)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        if let Some(row) = inserted {
            return Ok(StepUpdate::Recorded(row.into_step(operation)?));
        }
        let stored = self.get_step_attempt(params.id).await?;
        if let Some(step) = stored_again(params.run_id, stored, true)? {
            return Ok(StepUpdate::Recorded(step));
        }
        let params = &params;
        let trace = |mark: StepStatus| async move {
            let sql = format!(
                "INSERT INTO tasks.step_attempts
                     (namespace, id, workflow_run_id, step_name, kind, status, config, args,
                      started_at, created_at, updated_at)
                 VALUES ($1, $3, $2, $4, $5, $6, $7, $9,
                         clock_timestamp() - $8 * INTERVAL '1 microsecond',
                         clock_timestamp(), clock_timestamp())
                 {SKIP_STORED}"
            );
            sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(params.run_id)
                .bind(params.id)
                .bind(&params.step_name)
                .bind(params.kind.as_str())
                .bind(mark.as_str())
                .bind(&params.config)
                .bind(elapsed)
                .bind(&params.args)
                .execute(&self.pool)
                .await
                .map_err(db(operation))?;
            Ok(true)
        };
        self.step_refused(&RECORD_STEP, params.run_id, None, &params.worker_id, trace)
            .await
    }
}

#[async_trait]
impl LifecycleStore for PgStore {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = "status = 'canceled', worker_id = NULL, available_at = NULL, finished_at = now()";
        self.transition(&CANCEL, set, run_id, None, |q| q).await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = "status = 'paused', worker_id = NULL, available_at = NULL";
        self.transition(&PAUSE, set, run_id, None, |q| q).await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = "status = 'pending', available_at = now()";
        self.transition(&RESUME, set, run_id, None, |q| q).await
    }

    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.retry_run_impl(run_id).await
    }

    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        self.fork_run_impl(run_id, from_step).await
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        self.send_event_impl(params).await
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        self.wait_for_event_impl(params).await
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        self.list_events_impl(run_id).await
    }
}

#[async_trait]
impl ChildStore for PgStore {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        self.start_child_impl(params).await
    }

    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait> {
        self.wait_for_children_impl(params).await
    }
}

#[async_trait]
impl StateStore for PgStore {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        self.set_state_impl(params).await
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        self.get_state_impl(run_id, key).await
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        self.list_state_impl(run_id).await
    }
}

#[async_trait]
impl ScheduleStore for PgStore {
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.create_schedule_impl(params, first_slot, false).await
    }

    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.create_schedule_impl(params, first_slot, true).await
    }

    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        self.get_schedule_impl(name).await
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        self.list_schedules_impl().await
    }

    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.set_schedule_paused(name, true).await
    }

    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.set_schedule_paused(name, false).await
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<()> {
        self.delete_schedule_impl(name).await
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        self.due_schedules_impl(limit).await
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        self.fire_schedule_impl(params).await
    }
}

#[async_trait]
impl QueueStore for PgStore {
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        self.put_queue_impl(options).await
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        self.get_queue_impl(name).await
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        self.list_queues_impl().await
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        self.delete_queue_impl(name).await
    }
}

#[async_trait]
impl RetentionStore for PgStore {
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        self.purge_runs_impl(params).await
    }

    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        self.take_retention_turn_impl(worker_id, every).await
    }
}
