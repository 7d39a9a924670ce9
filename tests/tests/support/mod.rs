//! Helpers shared by the end-to-end test binaries.
//!
//! Every end-to-end test is an `async fn name(backend: Backend)`; [`every_store!`] turns a
//! list of them into one `#[tokio::test]` per store: `postgres::name`, `sqlite::name` and
//! `memory::name`. A test that reaches behind the store (raw SQL, another process on the
//! same database) runs on the two SQL stores only: it is listed after `sql:`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tasks::memory::MemoryStore;
use tasks::postgres::PgStore;
use tasks::sqlite::SqliteStore;
use tasks::store::Store;
use tasks::{Client, SharedStore, Worker, WorkerBuilder};
use uuid::Uuid;

/// The store an end-to-end test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// [`PgStore`] on the test database, on a fresh namespace.
    Postgres,
    /// [`SqliteStore`] on a fresh database file, on a fresh namespace.
    Sqlite,
    /// [`MemoryStore`] on a fresh namespace.
    Memory,
}

impl Backend {
    /// A fresh store of this backend on its own namespace (and, for SQLite, its own file).
    pub async fn store(self) -> TestStore {
        match self {
            Backend::Postgres => {
                let store = tasks_tests::pg_store().await;
                TestStore {
                    shared: SharedStore::new(store.clone()),
                    kind: Kind::Postgres(store),
                }
            }
            Backend::Sqlite => {
                let path = tasks_tests::sqlite::temp_database_path();
                let store = tasks_tests::sqlite::open(&path)
                    .await
                    .with_namespace(tasks_tests::unique_namespace("test"))
                    .unwrap();
                TestStore {
                    shared: SharedStore::new(store.clone()),
                    kind: Kind::Sqlite { store, path },
                }
            }
            Backend::Memory => {
                let store = tasks_test_support::memory::store();
                TestStore {
                    shared: SharedStore::new(store.clone()),
                    kind: Kind::Memory(store),
                }
            }
        }
    }
}

/// A store under test: the shared [`Store`] that workers and clients use (it derefs to it),
/// plus what a test needs to reach behind the `Store` API of its backend.
pub struct TestStore {
    shared: SharedStore,
    kind: Kind,
}

enum Kind {
    Postgres(PgStore),
    Sqlite { store: SqliteStore, path: PathBuf },
    Memory(MemoryStore),
}

/// The panic of a helper that reaches behind the store on the in-memory store, which has
/// no database to reach: the test belongs after `sql:` in its [`every_store!`] list.
#[track_caller]
fn sql_only(what: &str) -> ! {
    panic!("{what} reaches behind the store: list the test after `sql:` in `every_store!`")
}

impl Deref for TestStore {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        self.shared.contract()
    }
}

impl TestStore {
    /// The store as a trait object, for workers, clients and helpers that take one.
    pub fn shared(&self) -> SharedStore {
        self.shared.clone()
    }

    /// The backend of this store.
    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Postgres(_) => Backend::Postgres,
            Kind::Sqlite { .. } => Backend::Sqlite,
            Kind::Memory(_) => Backend::Memory,
        }
    }

    /// A URL that [`tasks::connect`] opens on the same database (in the default namespace:
    /// scope it to [`Store::namespace`]), for another process.
    pub fn url(&self) -> String {
        match &self.kind {
            Kind::Postgres(_) => tasks_tests::database_url(),
            Kind::Sqlite { path, .. } => format!("sqlite://{}", path.display()),
            Kind::Memory(_) => sql_only("a URL for another process"),
        }
    }

    /// Hands the lease of `run_id` to `worker_id` for an hour, by a new claim, behind the
    /// store's back, as if another worker had taken the run over while its current holder
    /// was stalled.
    pub async fn usurp_lease(&self, run_id: Uuid, worker_id: &str) {
        let updated = match &self.kind {
            Kind::Memory(_) => sql_only("`usurp_lease`"),
            Kind::Postgres(store) => sqlx::query(
                "UPDATE tasks.workflow_runs
                    SET worker_id = $3, available_at = now() + interval '1 hour',
                        claim_epoch = claim_epoch + 1
                  WHERE namespace = $1 AND id = $2",
            )
            .bind(store.namespace())
            .bind(run_id)
            .bind(worker_id)
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected(),
            // The SQLite store keeps ids and timestamps as text; see
            // `tasks-runtime/migrations/sqlite/0001_initial.sql` for the encodings.
            Kind::Sqlite { store, .. } => {
                let in_an_hour = (chrono::Utc::now() + chrono::Duration::hours(1))
                    .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string();
                sqlx::query(
                    "UPDATE tasks_workflow_runs
                        SET worker_id = ?3, available_at = ?4, claim_epoch = claim_epoch + 1
                      WHERE namespace = ?1 AND id = ?2",
                )
                .bind(store.namespace())
                .bind(run_id.hyphenated().to_string())
                .bind(worker_id)
                .bind(in_an_hour)
                .execute(store.pool())
                .await
                .unwrap()
                .rows_affected()
            }
        };
        assert_eq!(updated, 1, "run {run_id} not found to usurp");
    }
}

impl TestStore {
    /// The concurrency key and limit stored with a run, read behind the store's back (a
    /// [`tasks::WorkflowRun`] does not carry them). `None` for a run without a key.
    pub async fn concurrency_of(&self, run_id: Uuid) -> Option<(String, i32)> {
        let row: (Option<String>, Option<i32>) = match &self.kind {
            Kind::Memory(_) => sql_only("`concurrency_of`"),
            Kind::Postgres(store) => sqlx::query_as(
                "SELECT concurrency_key, concurrency_limit FROM tasks.workflow_runs
                  WHERE namespace = $1 AND id = $2",
            )
            .bind(store.namespace())
            .bind(run_id)
            .fetch_one(store.pool())
            .await
            .unwrap(),
            Kind::Sqlite { store, .. } => sqlx::query_as(
                "SELECT concurrency_key, concurrency_limit FROM tasks_workflow_runs
                  WHERE namespace = ?1 AND id = ?2",
            )
            .bind(store.namespace())
            .bind(run_id.hyphenated().to_string())
            .fetch_one(store.pool())
            .await
            .unwrap(),
        };
        match row {
            (Some(key), Some(limit)) => Some((key, limit)),
            (None, None) => None,
            other => panic!("run {run_id} has half a concurrency: {other:?}"),
        }
    }

    /// The namespace's retention lease row, read behind the store's back: how many periodic
    /// purges were taken (`turns`) and by which worker last. `None` before the first one.
    pub async fn retention_turns(&self) -> Option<(i64, String)> {
        match &self.kind {
            Kind::Memory(_) => sql_only("`retention_turns`"),
            Kind::Postgres(store) => sqlx::query_as(
                "SELECT turns, worker_id FROM tasks.retention_leases WHERE namespace = $1",
            )
            .bind(store.namespace())
            .fetch_optional(store.pool())
            .await
            .unwrap(),
            Kind::Sqlite { store, .. } => sqlx::query_as(
                "SELECT turns, worker_id FROM tasks_retention_leases WHERE namespace = ?1",
            )
            .bind(store.namespace())
            .fetch_optional(store.pool())
            .await
            .unwrap(),
        }
    }

    /// Corrupts the stored input of `run_id` behind the store's back so that it no longer
    /// decodes: on Postgres a JSON array nested 200 deep (valid `jsonb`, refused by
    /// serde_json's recursion limit of 128), on SQLite text that is not JSON.
    pub async fn poison_input(&self, run_id: Uuid) {
        let updated = match &self.kind {
            Kind::Memory(_) => sql_only("`poison_input`"),
            Kind::Postgres(store) => sqlx::query(
                "UPDATE tasks.workflow_runs SET input = (repeat('[', 200) || repeat(']', 200))::jsonb
                  WHERE namespace = $1 AND id = $2",
            )
            .bind(store.namespace())
            .bind(run_id)
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected(),
            Kind::Sqlite { store, .. } => sqlx::query(
                "UPDATE tasks_workflow_runs SET input = '{not json'
                  WHERE namespace = ?1 AND id = ?2",
            )
            .bind(store.namespace())
            .bind(run_id.hyphenated().to_string())
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected(),
        };
        assert_eq!(updated, 1, "run {run_id} not found to poison");
    }
}

/// The pool of a test store's backend, to read and write rows behind the store's back.
pub enum Pool<'a> {
    /// The Postgres store's pool (tables in the `tasks` schema).
    Postgres(&'a sqlx::PgPool),
    /// The SQLite store's pool (tables prefixed `tasks_`).
    Sqlite(&'a sqlx::SqlitePool),
}

impl TestStore {
    /// The backend's pool.
    pub fn pool(&self) -> Pool<'_> {
        match &self.kind {
            Kind::Postgres(store) => Pool::Postgres(store.pool()),
            Kind::Sqlite { store, .. } => Pool::Sqlite(store.pool()),
            Kind::Memory(_) => sql_only("`pool`"),
        }
    }

    /// The backend's own store (`PgStore` or `SqliteStore`) scoped with its
    /// `with_namespace`.
    pub fn with_namespace(&self, namespace: &str) -> Result<SharedStore, tasks::LimitError> {
        Ok(match &self.kind {
            Kind::Postgres(store) => SharedStore::new(store.with_namespace(namespace)?),
            Kind::Sqlite { store, .. } => SharedStore::new(store.with_namespace(namespace)?),
            Kind::Memory(store) => SharedStore::new(store.with_namespace(namespace)?),
        })
    }

    /// Corrupts by hand the output of every completed attempt of `run_id`'s step
    /// `step_name`, so that the row no longer decodes: JSON nested deeper than the decoder
    /// reads on Postgres, text that is not JSON on SQLite.
    pub async fn poison_step_output(&self, run_id: Uuid, step_name: &str) {
        let updated = match &self.kind {
            Kind::Memory(_) => sql_only("`poison_step_output`"),
            Kind::Postgres(store) => sqlx::query(
                "UPDATE tasks.step_attempts SET output = (repeat('[', 200) || repeat(']', 200))::jsonb
                  WHERE namespace = $1 AND workflow_run_id = $2 AND step_name = $3
                    AND status = 'completed'",
            )
            .bind(store.namespace())
            .bind(run_id)
            .bind(step_name)
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected(),
            Kind::Sqlite { store, .. } => sqlx::query(
                "UPDATE tasks_step_attempts SET output = '{not json'
                  WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3
                    AND status = 'completed'",
            )
            .bind(store.namespace())
            .bind(run_id.hyphenated().to_string())
            .bind(step_name)
            .execute(store.pool())
            .await
            .unwrap()
            .rows_affected(),
        };
        assert_eq!(
            updated, 1,
            "step {step_name} of run {run_id} not found to poison"
        );
    }
}

/// A worker builder tuned for tests: fast polling, and a lease (20 s) that a loaded machine
/// does not outlast between two heartbeats. With the 2 s lease of before, a CI machine that
/// stalled for a few seconds let a second worker take a run over legitimately, and tests that
/// count executions saw two. No test relies on this lease running out: those of lease expiry
/// and takeover set their own.
pub fn worker(store: &TestStore) -> WorkerBuilder {
    Worker::builder(store.shared())
        .concurrency(8)
        .lease(Duration::from_secs(20))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .shutdown_grace(Duration::from_secs(10))
}

/// A client on `store` knowing every workflow of this test binary.
pub fn client(store: &TestStore) -> Client {
    Client::new(store.shared()).expect("registry has no duplicates")
}

fn call_counts() -> &'static Mutex<HashMap<(Uuid, String), u32>> {
    static CALLS: OnceLock<Mutex<HashMap<(Uuid, String), u32>>> = OnceLock::new();
    CALLS.get_or_init(Default::default)
}

/// Counts one more call of `label` for `run_id` and returns the new count. Keyed by run, so
/// tests running in parallel do not see each other's calls.
pub fn bump(run_id: Uuid, label: &str) -> u32 {
    let mut calls = call_counts().lock().unwrap();
    let count = calls.entry((run_id, label.to_owned())).or_insert(0);
    *count += 1;
    *count
}

/// How often `label` ran for `run_id`.
pub fn calls(run_id: Uuid, label: &str) -> u32 {
    let calls = call_counts().lock().unwrap();
    calls.get(&(run_id, label.to_owned())).copied().unwrap_or(0)
}

/// Evaluates `$check` (an expression that may `.await`, giving an `Option`) every 20 ms
/// until it is `Some`, failing the test after `$within`.
#[macro_export]
macro_rules! eventually {
    ($within:expr, $check:expr) => {{
        let within: std::time::Duration = $within;
        let every = std::time::Duration::from_millis(20);
        let probe = async || Ok::<_, std::convert::Infallible>($check);
        match tasks_test_support::wait::poll(within, every, probe).await {
            Ok(value) => value,
            Err(_) => panic!(
                "condition not reached within {within:?}: {}",
                stringify!($check)
            ),
        }
    }};
}

/// Turns `async fn name(backend: Backend)` test bodies (defined at the root of the test
/// binary) into one test per store, each on a multi-threaded runtime: `postgres::name`,
/// `sqlite::name` and `memory::name`. The names after `sql:` run on the two SQL stores only
/// (they reach behind the store, which the in-memory store has no way for).
#[macro_export]
macro_rules! every_store {
    ($($name:ident),* $(,)? $(; sql: $($sql:ident),* $(,)?)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Postgres).await
                }
            )*
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $sql() {
                    super::$sql($crate::support::Backend::Postgres).await
                }
            )*)?
        }

        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Sqlite).await
                }
            )*
            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $sql() {
                    super::$sql($crate::support::Backend::Sqlite).await
                }
            )*)?
        }

        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Backend::Memory).await
                }
            )*
        }
    };
}

/// Whether two JSON values are the same, numbers compared as the floats they decode to:
/// Postgres keeps JSON numbers as `jsonb` numerics, so a float with an integral value past
/// 2^53 (`1.6681231895129702e18`) reads back written as an integer (`1668123189512970200`),
/// which decodes to the same `f64`.
pub fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| same_json(x, y)))
        }
        _ => a == b,
    }
}
