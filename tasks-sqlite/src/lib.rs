//! The SQLite store: an embedded backend for development, tests and single-machine
//! deployments, with the same behaviour as the Postgres store (`tasks-postgres`).
//!
//! # How it keeps the contract
//!
//! * **Transactions.** Every write runs in a `BEGIN IMMEDIATE` transaction, which takes
//!   SQLite's single write lock up front, so a fenced transition (check the status and the
//!   lease holder, then change the row) cannot interleave with another writer, in this
//!   process or another one. Writers of this process first queue on an in-process gate;
//!   across processes they wait on the lock for up to the [busy timeout](BUSY_TIMEOUT).
//!   Reads run without a transaction and, in WAL mode, never wait for writers.
//! * **Clock.** SQLite's own clock has only millisecond precision, so timestamps are taken
//!   from the store's [`Clock`] (the process clock by default, truncated to the microsecond)
//!   *after* the write lock is held. All writers of a database file run on one machine and
//!   share its clock, and because the time is read under the lock, `created_at` follows
//!   commit order (as long as the system clock does not step back). A test can give the
//!   store a [manual clock](Clock::manual) with [`SqliteStore::with_clock`] and skip ahead
//!   in time; see `tasks::testing` (feature `testing`).
//! * **Storage.** Ids, timestamps and JSON are stored as text; see the migration
//!   `tasks-runtime/migrations/sqlite/0001_initial.sql` for the exact encodings. Tables carry a `tasks_`
//!   prefix, since SQLite has no schemas.
//! * **Wake-ups.** Notifications travel over an in-process channel shared by every store on
//!   the same database file in this process. Other processes do not hear them: their workers
//!   find runs by polling.

mod children;
mod continuation;
mod events;
mod leases;
mod lifecycle;
mod migrate;
mod notify;
mod overview;
mod queues;
mod retention;
mod rows;
mod runs;
mod schedules;
mod select;
mod state;
mod steps;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use notify::Shared;
use rows::{RUN_COLUMNS, RunRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tasks_core::clock::Clock;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{DEFAULT_NAMESPACE, Notification, NotificationStream, SharedStore, Store};
use uuid::Uuid;

pub use migrate::{MIGRATIONS, MigrateError, Migration, migrate};

/// How long a write waits for another process to release SQLite's write lock before it
/// fails with a "database is locked" [`StoreError::Database`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections of a pool on a database file. Writes are serialized anyway; more connections
/// let reads proceed next to a write.
pub const MAX_CONNECTIONS: u32 = 8;

/// The store on SQLite.
///
/// Cloning is cheap and shares the pool. [`SqliteStore::with_namespace`] gives a store on the
/// same pool that sees another namespace.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_sqlite::SqliteStore;
///
/// // Creates `app.sqlite` in the current directory if it does not exist.
/// let store = SqliteStore::connect("sqlite://app.sqlite").await?;
/// store.migrate().await?;
/// let tenant = store.with_namespace("tenant-a")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    namespace: Arc<str>,
    shared: Arc<Shared>,
    clock: Clock,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("database", &self.pool.connect_options().get_filename())
            .field("namespace", &self.namespace)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Whether `options` open an in-memory database (`sqlite::memory:` or `mode=memory`).
fn is_in_memory(options: &SqliteConnectOptions) -> bool {
    let name = options.get_filename().to_string_lossy();
    name == ":memory:" || name.starts_with("file:sqlx-in-memory-")
}

impl SqliteStore {
    /// A store on an existing pool, in the [default namespace](DEFAULT_NAMESPACE).
    ///
    /// The pool's options are used as they are; [`SqliteStore::options`] lists the settings
    /// the store relies on (WAL, a busy timeout, foreign keys).
    pub fn new(pool: SqlitePool) -> Self {
        let options = pool.connect_options();
        let shared = notify::shared(database_key(options.get_filename(), is_in_memory(&options)));
        SqliteStore {
            pool,
            namespace: Arc::from(DEFAULT_NAMESPACE),
            shared,
            clock: Clock::system(),
        }
    }

    /// The connection options the store recommends for `url`: the database file is created
    /// if missing, and opened in WAL mode (readers never wait for the writer) with
    /// synchronous `FULL` (a committed transition survives a power loss), foreign keys on and
    /// a [busy timeout](BUSY_TIMEOUT).
    ///
    /// `url` is `sqlite://relative/path.sqlite`, `sqlite:///absolute/path.sqlite` or
    /// `sqlite::memory:` (an in-memory database, private to one store and its clones).
    pub fn options(url: &str) -> StoreResult<SqliteConnectOptions> {
        let options: SqliteConnectOptions = url.parse().map_err(db(Operation::Connect))?;
        Ok(recommended(options))
    }

    /// Opens the database file at `path` (created if missing) with
    /// [the recommended options](SqliteStore::options). Unlike a URL, the path is taken
    /// literally: no percent-decoding, no query parameters. Does not migrate.
    pub async fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let options = SqliteConnectOptions::new().filename(path);
        SqliteStore::connect_with(recommended(options)).await
    }

    /// Opens a pool on `url` with [the recommended options](SqliteStore::options) and
    /// returns a store on it. Does not migrate: call [`SqliteStore::migrate`].
    pub async fn connect(url: &str) -> StoreResult<Self> {
        SqliteStore::connect_with(SqliteStore::options(url)?).await
    }

    /// Opens a pool with `options` and returns a store on it.
    ///
    /// An in-memory database lives in a pool of exactly one connection that is never
    /// closed, since the database disappears with its last connection. Opening a file that
    /// another store is switching to WAL mode at the same moment (several processes or
    /// stores starting on a new file) is retried for up to the [busy timeout](BUSY_TIMEOUT).
    pub async fn connect_with(options: SqliteConnectOptions) -> StoreResult<Self> {
        let pool = if is_in_memory(&options) {
            SqlitePoolOptions::new()
                .min_connections(1)
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS)
        };
        // Connect one connection right away: it creates the file (and switches it to WAL)
        // before the store derives the file's identity from its canonical path.
        //
        // Switching a file to WAL needs exclusive access, and SQLite answers "database is
        // locked" at once there instead of waiting out the busy timeout. When several stores
        // open a new file together, the ones that lose that race try again: by then the file
        // is in WAL mode (a persistent property of the file) and the switch takes no lock.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(1);
        let pool = loop {
            match pool.clone().connect_with(options.clone()).await {
                Err(error) if is_busy(&error) && started.elapsed() < BUSY_TIMEOUT => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => break other.map_err(db(Operation::Connect))?,
            }
        };
        Ok(SqliteStore::new(pool))
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
        Ok(SqliteStore {
            pool: self.pool.clone(),
            namespace: Arc::from(namespace),
            shared: self.shared.clone(),
            clock: self.clock.clone(),
        })
    }

    /// The same store, reading the time from `clock` instead of the system clock (the
    /// default). Every instant the store writes or compares (creation and update times,
    /// the end of a sleep, of an event wait, of a retry backoff, of a lease, of a worker's
    /// heartbeat; whether a deadline passed or a schedule's slot is due) comes from it.
    ///
    /// Every store on the same database should use the same clock (clones of a
    /// [manual clock](Clock::manual) share it); two stores on one file with clocks that
    /// disagree see each other's instants as past or future. Meant for tests: see
    /// `tasks::testing` (feature `testing`), which sets this up.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tasks_core::clock::Clock;
    /// use tasks_sqlite::SqliteStore;
    ///
    /// let clock = Clock::manual();
    /// let store = SqliteStore::connect("sqlite::memory:").await?.with_clock(clock.clone());
    /// store.migrate().await?;
    /// clock.advance(Duration::from_secs(3600))?; // the store is now an hour ahead
    /// # Ok(()) }
    /// ```
    pub fn with_clock(&self, clock: Clock) -> Self {
        SqliteStore {
            clock,
            ..self.clone()
        }
    }

    /// The clock this store reads the time from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Tells this process's workers and waiters on the database to look at the store again
    /// (after a [manual clock](Clock::manual) moved: runs may have become due).
    pub fn announce_time_moved(&self) {
        self.notify(Notification::Missed {
            namespace: self.namespace.to_string(),
        });
    }

    /// The underlying pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Applies the schema migrations; see [`migrate()`].
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        let _gate = self.shared.write_gate.lock().await;
        migrate(&self.pool).await
    }

    /// Starts a write: queues on this process's gate, then takes SQLite's write lock with
    /// `BEGIN IMMEDIATE`, then reads the clock.
    ///
    /// The `BEGIN` runs in a task of its own, so that it completes whatever becomes of the
    /// caller: a write cancelled while its `BEGIN` was answered but not yet taken (a lease
    /// extension aborted with its execution, say) would otherwise return its connection to
    /// the pool inside the transaction, holding SQLite's write lock for good. The task's
    /// transaction, taken or dropped, is committed or rolled back like any other.
    pub(crate) async fn begin_write(&self, operation: Operation) -> StoreResult<Write<'_>> {
        let gate = self.shared.write_gate.lock().await;
        let pool = self.pool.clone();
        let tx = tokio::spawn(async move { pool.begin_with("BEGIN IMMEDIATE").await })
            .await
            .map_err(|error| StoreError::database(operation, error))?
            .map_err(db(operation))?;
        Ok(Write {
            tx,
            now: self.clock.now().trunc_subsecs(6),
            operation,
            _gate: gate,
        })
    }

    /// Sends a notification of this store's namespace to the subscribers in this process.
    fn notify(&self, notification: Notification) {
        self.shared.publish(notification);
    }
}

/// Whether `error` is SQLite's "database is locked" (`SQLITE_BUSY`, with any extended code).
fn is_busy(error: &sqlx::Error) -> bool {
    const SQLITE_BUSY: i32 = 5;
    match error {
        sqlx::Error::Database(error) => error
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| code & 0xff == SQLITE_BUSY),
        _ => false,
    }
}

/// `options` with the settings the store relies on; see [`SqliteStore::options`].
fn recommended(options: SqliteConnectOptions) -> SqliteConnectOptions {
    let options = options
        .create_if_missing(true)
        .foreign_keys(true)
        .busy_timeout(BUSY_TIMEOUT);
    if is_in_memory(&options) {
        options
    } else {
        options
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
    }
}

/// The identity of a database in the process-global registry: the canonical path of its file
/// (so that `./a.sqlite` and `/abs/a.sqlite` meet), or the name of an in-memory database.
fn database_key(filename: &Path, in_memory: bool) -> PathBuf {
    if in_memory {
        return Path::new("memory:").join(filename);
    }
    std::fs::canonicalize(filename)
        .or_else(|_| std::path::absolute(filename))
        .unwrap_or_else(|_| filename.to_path_buf())
}

/// A write transaction, holding the in-process gate and SQLite's write lock.
pub(crate) struct Write<'a> {
    pub(crate) tx: Transaction<'static, Sqlite>,
    /// The time of this transaction, read after the write lock was taken.
    pub(crate) now: DateTime<Utc>,
    operation: Operation,
    _gate: tokio::sync::MutexGuard<'a, ()>,
}

impl Write<'_> {
    /// The transaction time as stored text.
    pub(crate) fn now(&self) -> String {
        rows::ts_bound(self.now)
    }

    /// The transaction time.
    pub(crate) fn instant(&self) -> chrono::DateTime<chrono::Utc> {
        self.now
    }

    /// The transaction time minus `elapsed`, as stored text: when a step that took
    /// `elapsed` started.
    pub(crate) fn now_minus(&self, elapsed: Duration) -> StoreResult<String> {
        let earlier = chrono::TimeDelta::from_std(elapsed)
            .ok()
            .and_then(|delta| self.now.checked_sub_signed(delta))
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!("a duration of {elapsed:?} is out of range"))
            })?;
        rows::ts(earlier)
    }

    /// The transaction time plus `delay` (at millisecond precision, like the Postgres
    /// store's intervals), as stored text.
    pub(crate) fn now_plus(&self, delay: Duration) -> StoreResult<String> {
        let later = chrono::TimeDelta::try_milliseconds(millis(delay))
            .and_then(|delta| self.now.checked_add_signed(delta))
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!("a delay of {delay:?} is out of range"))
            })?;
        rows::ts(later)
    }

    /// The connection of the transaction.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }

    /// Commits.
    pub(crate) async fn commit(self) -> StoreResult<()> {
        self.tx.commit().await.map_err(db(self.operation))
    }
}

pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Reads a run on `conn` (a pooled connection or a write transaction).
pub(crate) async fn fetch_run(
    conn: &mut SqliteConnection,
    namespace: &str,
    run_id: Uuid,
    operation: Operation,
) -> StoreResult<Option<WorkflowRun>> {
    let sql =
        format!("SELECT {RUN_COLUMNS} FROM tasks_workflow_runs WHERE namespace = ?1 AND id = ?2");
    sqlx::query_as::<_, RunRow>(&sql)
        .bind(namespace)
        .bind(rows::id(run_id))
        .fetch_optional(conn)
        .await
        .map_err(db(operation))?
        .map(|row| row.into_run(operation))
        .transpose()
}

#[async_trait]
impl Store for SqliteStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn scoped(&self, namespace: &str) -> Result<SharedStore, tasks_core::LimitError> {
        Ok(SharedStore::new(self.with_namespace(namespace)?))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        Ok(self.shared.subscribe(self.namespace.to_string()))
    }

    tasks_core::every_capability!();
}
