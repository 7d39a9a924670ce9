//! A Postgres restart, on a cluster each test creates for itself (`tasks_tests::cluster`;
//! never the tests' shared server): what a store's callers see when the server ends every
//! session of a warm pool. Each test skips, saying why, where a cluster cannot be created
//! (no `pg_createcluster`, not root).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tasks::postgres::PgStore;
use tasks::store::{CreateRun, RunStore};
use tasks::{ListRuns, RunStatus};
use tasks_tests::cluster::Cluster;

/// A cluster of the test's own, or `None` (with the reason printed) where none can be made.
fn cluster() -> Option<Cluster> {
    match Cluster::create() {
        Ok(cluster) => Some(cluster),
        Err(reason) => {
            eprintln!("skipped: {reason}");
            None
        }
    }
}

/// What the store logged while a test ran (its own thread's events).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures the events of `tasks_postgres` (debug and up) on this thread until the
    /// guard is dropped.
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("tasks_postgres=debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that contain every one of `parts`.
    fn lines_with(&self, parts: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| parts.iter().all(|part| line.contains(part)))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A migrated store with the pool of `PgStore::connect` (16 connections) on `cluster`.
async fn store_on(cluster: &Cluster) -> PgStore {
    let store = PgStore::connect(&cluster.url())
        .await
        .expect("connect to the test's cluster");
    store.migrate().await.expect("migrate");
    store
}

/// Opens every connection of the store's pool (statements that hold them at once) and
/// waits until all are idle again (all but `held`, which the store holds: its `LISTEN`):
/// after a restart, each is stale.
async fn warm(store: &PgStore, held: usize) {
    let pool = store.pool();
    let size = pool.options().get_max_connections();
    let hold = (0..size).map(|_| async {
        sqlx::query("SELECT pg_sleep(0.2)")
            .execute(pool)
            .await
            .expect("a statement on the warm pool")
    });
    futures::future::join_all(hold).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let idle = size as usize - held;
    while pool.num_idle() < idle && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.num_idle(), idle, "every connection is open and idle");
}

fn keyed(workflow: &str, key: String) -> CreateRun {
    CreateRun {
        idempotency_key: Some(key),
        ..CreateRun::new(workflow)
    }
}

/// After a restart, a client whose pool of 16 connections was warm starts runs (with
/// idempotency keys) and reads them, one call after another: none fails, and each keyed
/// start made one run.
#[tokio::test]
async fn after_a_restart_keyed_starts_and_reads_do_not_fail() {
    let Some(cluster) = cluster() else { return };
    let store = store_on(&cluster).await;
    warm(&store, 0).await;
    cluster.restart();

    let started = Instant::now();
    let mut failures = Vec::new();
    let mut runs = Vec::new();
    for n in 0..20 {
        match store
            .create_run(keyed("restart-keyed", format!("key-{n}")))
            .await
        {
            Ok(run) => runs.push(run.id),
            Err(error) => failures.push(format!("start {n}: {error}")),
        }
        if let Some(&run_id) = runs.last()
            && let Err(error) = store.get_run(run_id).await
        {
            failures.push(format!("read {n}: {error}"));
        }
        if let Err(error) = store.list_runs(ListRuns::default()).await {
            failures.push(format!("list {n}: {error}"));
        }
    }
    let elapsed = started.elapsed();
    assert!(failures.is_empty(), "failed calls: {failures:#?}");
    assert_eq!(
        store.count_runs(&[RunStatus::Pending]).await.unwrap(),
        vec![(RunStatus::Pending, 20)]
    );
    eprintln!("60 calls after the restart in {elapsed:?}");
}

/// The first statement that finds its connection broken makes the pool replace every other
/// stale one: after one read through the store (tried again on a fresh connection), 16
/// plain statements at once on the pool, which nothing tries again, all succeed.
#[tokio::test]
async fn one_broken_connection_replaces_every_stale_one() {
    let Some(cluster) = cluster() else { return };
    let store = store_on(&cluster).await;
    warm(&store, 0).await;
    cluster.restart();
    let (logs, _guard) = Logs::capture();

    store
        .get_run(uuid::Uuid::now_v7())
        .await
        .expect("a read after the restart");
    let pool = store.pool();
    let plain = (0..16).map(|_| async {
        sqlx::query_scalar::<_, i32>("SELECT 1 FROM pg_sleep(0.1)")
            .fetch_one(pool)
            .await
    });
    let failed: Vec<String> = futures::future::join_all(plain)
        .await
        .into_iter()
        .filter_map(|outcome| outcome.err().map(|error| error.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 16 plain statements ran on a stale connection: {failed:#?}",
        failed.len()
    );
    // The read found one broken connection and was tried again once.
    let retries = logs.lines_with(&["trying again on a fresh connection"]);
    assert_eq!(retries.len(), 1, "{}", logs.text());
    assert_eq!(
        logs.lines_with(&["a database connection broke"]).len(),
        1,
        "one warning for the restart: {}",
        logs.text()
    );
}

/// A subscribed store (a worker's always is) learns of a restart from its `LISTEN`, which
/// is always reading: its pool replaces the stale connections before any statement fails
/// on one.
#[tokio::test]
async fn the_listener_tells_the_pool_of_a_restart() {
    let Some(cluster) = cluster() else { return };
    let store = store_on(&cluster).await;
    let _notifications = tasks::store::Store::subscribe(&store)
        .await
        .expect("subscribe");
    warm(&store, 1).await;
    cluster.restart();
    // The listener wakes at least once a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let pool = store.pool();
    let plain = (0..15).map(|_| async {
        sqlx::query_scalar::<_, i32>("SELECT 1 FROM pg_sleep(0.1)")
            .fetch_one(pool)
            .await
    });
    let failed: Vec<String> = futures::future::join_all(plain)
        .await
        .into_iter()
        .filter_map(|outcome| outcome.err().map(|error| error.to_string()))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 15 plain statements ran on a stale connection: {failed:#?}",
        failed.len()
    );
}

/// `PgStore::connect` called while the server is stopped waits for it: started 2 s later,
/// the call succeeds, and the wait was logged once.
#[tokio::test]
async fn connect_waits_for_a_server_that_starts_later() {
    let Some(cluster) = cluster() else { return };
    cluster.stop();
    let (logs, _guard) = Logs::capture();
    let cluster = Arc::new(cluster);
    let starter = {
        let cluster = cluster.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            cluster.start();
        })
    };

    let started = Instant::now();
    let connected = PgStore::connect(&cluster.url()).await;
    let elapsed = started.elapsed();
    starter.join().expect("the server started");
    let store = connected.expect("connect waited for the server");
    store.migrate().await.expect("migrate");
    assert!(
        elapsed > Duration::from_millis(1500),
        "connect returned after {elapsed:?}, before the server started"
    );
    let waits = logs.lines_with(&["not accepting connections; waiting for it"]);
    assert_eq!(waits.len(), 1, "{}", logs.text());
    assert!(waits[0].contains("WARN"), "{}", waits[0]);
    store.pool().close().await;
    drop(store);
    // The guard drops the cluster when the last handle goes.
    drop(Arc::try_unwrap(cluster).expect("one handle left"));
}

/// A start without an idempotency key that meets a broken connection is not tried again (a
/// second try could make a second run if the first had committed): it fails with a
/// transient error, and no run was made; the caller's own second start makes one.
#[tokio::test]
async fn a_start_without_a_key_is_not_tried_again() {
    let Some(cluster) = cluster() else { return };
    let store = store_on(&cluster).await;
    warm(&store, 0).await;
    cluster.restart();
    let (logs, _guard) = Logs::capture();

    let count = async || {
        store
            .count_runs(&[RunStatus::Pending])
            .await
            .expect("count")
    };
    // The pool's connections are all stale, so the start meets one. (Where tests share a
    // process, as under `cargo test`, another test's restart may have had them replaced
    // already: then the start succeeds on a fresh one, and made one run.)
    let made = match store.create_run(CreateRun::new("restart-unkeyed")).await {
        Err(error) => {
            assert!(error.is_transient(), "{error}");
            0
        }
        Ok(_) => 1,
    };
    assert!(
        logs.lines_with(&["trying again", "creating a workflow run"])
            .is_empty(),
        "{}",
        logs.text()
    );
    assert_eq!(
        count().await,
        vec![(RunStatus::Pending, made)],
        "a failed start made no run"
    );

    store
        .create_run(CreateRun::new("restart-unkeyed"))
        .await
        .expect("the caller's second start");
    assert_eq!(count().await, vec![(RunStatus::Pending, made + 1)]);
}
