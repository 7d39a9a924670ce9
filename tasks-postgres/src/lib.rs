//! The Postgres store: the production backend, shared by workers on many machines.

mod background;
mod children;
mod claim;
mod continuation;
mod db;
mod events;
mod leases;
mod lifecycle;
mod migrate;
mod notify;
mod overview;
mod pooling;
mod queues;
mod reconnect;
mod recorder;
mod retention;
mod rows;
mod runs;
mod schedules;
mod select;
mod stale;
mod start_in;
mod state;
mod steps;
mod transition;

use crate::reconnect::db;
use async_trait::async_trait;
use background::Background;
use db::Db;
use notify::{Batcher, Hub};
use recorder::{Completer, Recorder};
use rows::{RUN_COLUMNS, decode_run};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
#[cfg(doc)]
use tasks_core::RunStore;
#[cfg(doc)]
use tasks_core::StoreError;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{DEFAULT_NAMESPACE, NotificationStream, SharedStore, Store};
use uuid::Uuid;

pub use migrate::{MIGRATIONS, MigrateError, Migration, SCHEMA, migrate};
pub use pooling::{LISTEN_URL_PARAMETER, POOLING_PARAMETER, PgOptions, Pooling};
/// The `sqlx` this store is built on: name its types (`sqlx::Transaction`,
/// `sqlx::PgConnection`) through this re-export, so that a transaction given to
/// the engine's transactional start (`StartBuilder::in_transaction`) is of the same version.
pub use sqlx;
pub use start_in::create_run_in;

/// Connections in the pool of [`PgStore::connect`]; see [`PgStore::pool_options`] to choose
/// another size.
pub const MAX_CONNECTIONS: u32 = 16;

/// How long [`PgStore::connect`] waits for the server to answer one try of its first
/// connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`PgStore::connect`] waits for a server that is not accepting connections for
/// now (stopped, starting up, shutting down: a restart); see
/// [`PgStore::connect_waiting`] for another bound.
pub const CONNECT_WAIT: Duration = Duration::from_secs(30);

/// How long a transaction of the store's own connections may stay idle before the server
/// ends it (see [`PgStore::pool_options`]). The store's transactions wait on nothing but
/// their own statements: only a process that stopped in the middle of one reaches this.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

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
    /// The pool, and how statements may use it (see the `db` module).
    pool: Db,
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
    /// A store on an existing pool, in the [default namespace](DEFAULT_NAMESPACE), with
    /// [`Pooling::Session`].
    pub fn new(pool: PgPool) -> Self {
        PgStore::new_with(pool, PgOptions::default())
    }

    /// A store on an existing pool, with `options`. A pool for [`Pooling::Transaction`] is
    /// built with [`PgStore::pool_options_for`] and [`Pooling::connect_options`] (the
    /// settings of a session pool would set session state through the pooler).
    pub fn new_with(pool: PgPool, options: PgOptions) -> Self {
        let background = Arc::new(Background::default());
        let pool = Db::new(pool, options.get_pooling());
        PgStore {
            hub: Arc::new(Hub::new(
                pool.clone(),
                options.get_listen_url().map(str::to_owned),
                background.clone(),
            )),
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
    /// `RunHandle::result`), its `LISTEN` holds one of the pool's connections (unless it
    /// listens on its own [listen URL](PgOptions::listen_url)).
    ///
    /// A connection belongs to the Tokio runtime that opened it. The pool hands a runtime
    /// none of the connections opened before that runtime first used the pool: each is
    /// closed once and replaced, so a store kept past its runtime works on the next one
    /// without a statement failing on a dead runtime's connection.
    ///
    /// When a statement finds its connection broken (the server restarted, crashed or
    /// closed it), the pool hands out none of the connections opened before that moment:
    /// after a restart, one statement fails on a stale connection instead of one per
    /// pooled connection, and a store method that is safe to run twice (a read, or a write
    /// idempotent by construction) runs again on a fresh connection instead of failing
    /// (see the guide's chapter on stores for which). The pool waits for a restarting
    /// server within its acquire timeout (30 s by default).
    ///
    /// A transaction of the store's own left idle for [`IDLE_IN_TRANSACTION_TIMEOUT`] (its
    /// process stopped in the middle of it) is ended by the server
    /// (`idle_in_transaction_session_timeout`, set on each connection), so that it holds
    /// no snapshot and no lock past that: the next statement of that process finds its
    /// connection closed, and its write is refused by the fence if another worker took
    /// its run over meanwhile.
    pub fn pool_options() -> PgPoolOptions {
        PgStore::pool_options_for(Pooling::Session)
    }

    /// The settings of the pool [`PgStore::connect_with`] opens for `pooling`: those of
    /// [`PgStore::pool_options`], except that with [`Pooling::Transaction`] a new
    /// connection gets no session settings (each transaction of the store sets them for
    /// itself, see [`Pooling::Transaction`]).
    pub fn pool_options_for(pooling: Pooling) -> PgPoolOptions {
        let session_settings = pooling == Pooling::Session;
        PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .test_before_acquire(false)
            // The store's statements are short transactions, and the claim is a large
            // statement: where the planner's estimate passes `jit_above_cost` (a backlog of
            // 100,000 keyed runs does), compiling it with LLVM took 9 s per claim, for a
            // statement that runs in 10 ms. JIT is off on the store's connections.
            //
            // A transaction of the store never waits on anything but its own statements,
            // so one left idle for long belongs to a process that stopped (frozen, or
            // stalled past any lease): the server ends it, rather than let it keep its
            // snapshot, which stops vacuum from removing any row that died after it, and
            // its row locks.
            .after_connect(move |conn, meta| {
                stale::opened_connection(meta.age);
                Box::pin(async move {
                    if !session_settings {
                        return Ok(());
                    }
                    sqlx::Executor::execute(&mut *conn, "SET jit = off").await?;
                    sqlx::query(
                        "SELECT set_config('idle_in_transaction_session_timeout', $1, false)",
                    )
                    .bind(format!("{}ms", IDLE_IN_TRANSACTION_TIMEOUT.as_millis()))
                    .execute(&mut *conn)
                    .await?;
                    Ok(())
                })
            })
            .before_acquire(|conn, meta| {
                // Opened before this runtime used the pool (perhaps on a runtime that has
                // shut down), or before a statement found its connection broken (a server
                // restart ended them all): its next statement would fail. Replaced.
                let stale = stale::is_stale(meta.age);
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
    /// A server that is not accepting connections for now (nothing listens at its address,
    /// or it answers that it is starting up or shutting down, as during a restart) is
    /// waited for, for up to [`CONNECT_WAIT`], trying again with a growing pause (up to
    /// 1 s); the wait is logged with a warning naming the error, once, when it begins.
    /// [`PgStore::connect_waiting`] chooses another bound. A server that refuses the
    /// connection for another reason (a wrong password, a database that does not exist),
    /// or does not answer a try within [`CONNECT_TIMEOUT`], fails the call at once with
    /// [`StoreError::Database`] saying why (the pool alone would keep retrying the first
    /// connection for its whole acquire timeout, 30 s, and fail with a timeout).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        PgStore::connect_waiting(url, CONNECT_WAIT).await
    }

    /// [`PgStore::connect`], waiting at most `wait` for a server that is not accepting
    /// connections for now (`Duration::ZERO`: not at all). After the wait, the call fails
    /// with the last try's error.
    pub async fn connect_waiting(url: &str, wait: Duration) -> StoreResult<Self> {
        PgStore::connect_with_waiting(url, PgOptions::default(), wait).await
    }

    /// [`PgStore::connect`] with `options`: a [`Pooling`] and a listen URL. The URL
    /// parameters [`POOLING_PARAMETER`] and [`LISTEN_URL_PARAMETER`], which
    /// [`PgStore::connect`] reads too, win over `options`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use tasks_postgres::{PgOptions, PgStore, Pooling};
    ///
    /// // Statements through PgBouncer in transaction mode, LISTEN on the server itself.
    /// let options = PgOptions::new()
    ///     .pooling(Pooling::Transaction)
    ///     .listen_url("postgres://app@db.internal:5432/app");
    /// let store = PgStore::connect_with("postgres://app@pgbouncer:6432/app", options).await?;
    /// // The same, from one URL (the listen URL percent-encoded).
    /// let store = PgStore::connect(
    ///     "postgres://app@pgbouncer:6432/app?tasks_pooling=transaction\
    ///      &tasks_listen_url=postgres%3A%2F%2Fapp%40db.internal%3A5432%2Fapp",
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: [`StoreError::InvalidArgument`] for an unknown [`POOLING_PARAMETER`] value;
    /// otherwise those of [`PgStore::connect`].
    pub async fn connect_with(url: &str, options: PgOptions) -> StoreResult<Self> {
        PgStore::connect_with_waiting(url, options, CONNECT_WAIT).await
    }

    async fn connect_with_waiting(
        url: &str,
        mut options: PgOptions,
        wait: Duration,
    ) -> StoreResult<Self> {
        let url = options.take_from_url(url)?;
        let connect: PgConnectOptions = url.parse().map_err(db(Operation::Connect))?;
        let connect = options.get_pooling().connect_options(connect);
        reconnect::wait_for_server(&connect, wait).await?;
        // A connection that could not be opened broke none of the pooled ones: the core's
        // error mapping, which tells no pool.
        let pool = PgStore::pool_options_for(options.get_pooling())
            .connect_with(connect)
            .await
            .map_err(tasks_core::error::db(Operation::Connect))?;
        Ok(PgStore::new_with(pool, options))
    }

    /// The same store, seeing only `namespace`.
    ///
    /// Errors: a [`LimitError`](tasks_core::LimitError) for a namespace past the
    /// [`limits`](tasks_core::limits) (longer than
    /// [`MAX_NAMESPACE_BYTES`](tasks_core::limits::MAX_NAMESPACE_BYTES), or with NUL): a store
    /// never holds a namespace that the database could not take.
    pub fn with_namespace(
        &self,
        namespace: impl Into<String>,
    ) -> Result<Self, tasks_core::LimitError> {
        let namespace = namespace.into();
        tasks_core::store::check::namespace(&namespace)?;
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
    ///
    /// With [`Pooling::Transaction`], a statement run on the pool directly meets the
    /// pooler's limits: run it in a transaction begun with [`PgStore::begin`] instead.
    pub fn pool(&self) -> &PgPool {
        self.pool.pool()
    }

    /// How the store's connections reach the server.
    pub fn pooling(&self) -> Pooling {
        self.pool.pooling()
    }

    /// Begins a transaction on the store's pool, as the store begins its own: with
    /// [`Pooling::Transaction`], with the store's settings for the transaction. For a
    /// caller's transaction that starts runs (`StartBuilder::in_transaction`); its own
    /// statements there must follow the pooler's rules too (with PgBouncer before 1.21, or
    /// without `max_prepared_statements`: `.persistent(false)` on each).
    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
        match self.pooling() {
            Pooling::Session => self.pool().begin().await,
            Pooling::Transaction => self.pool().begin_with(db::POOLED_BEGIN).await,
        }
    }

    /// Applies the schema migrations; see [`migrate()`]. Works through a pooler in
    /// transaction mode too (all migrations run in one transaction, under a
    /// transaction-level advisory lock).
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        migrate::migrate_on(&self.pool).await
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

    /// Reads run `run_id` (for `operation`), trying again while its connection breaks
    /// (see [`reconnect`]).
    async fn fetch_run(
        &self,
        run_id: Uuid,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        reconnect::retrying(operation, || self.fetch_run_once(run_id, operation)).await
    }

    async fn fetch_run_once(
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

    /// How the store begins a claim's transaction (a `BEGIN` and the plan mode, sent as one
    /// simple query with `sqlx::Pool::begin_with`); the claim statement follows in it.
    pub fn claim_begin() -> &'static str {
        super::claim::GENERIC_PLAN
    }

    /// The claim statement's last parameter for a claim of `limit` runs: how many candidates
    /// with a concurrency key it looks at.
    pub fn claim_keyed_candidates(limit: u32) -> i64 {
        tasks_core::transition::keyed_candidates(limit)
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

    fn scoped(&self, namespace: &str) -> Result<SharedStore, tasks_core::LimitError> {
        Ok(SharedStore::new(self.with_namespace(namespace)?))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        self.hub.subscribe(self.namespace.to_string()).await
    }

    tasks_core::every_capability!();
}
