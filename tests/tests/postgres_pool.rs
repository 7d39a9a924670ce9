//! The pool of the Postgres store: what `PgStore::connect` opens, and a store on a pool of
//! two connections (one of them held by its `LISTEN`) running workflows to completion, so no
//! path of the engine holds one connection while it waits for another.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::postgres::{MAX_CONNECTIONS, PgStore};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};
use tasks_tests::{database_url, unique_namespace};

/// `PgStore::connect` opens the pool `PgStore::pool_options` describes.
#[tokio::test]
async fn connect_opens_the_documented_pool() {
    let store = PgStore::connect(&database_url())
        .await
        .expect("connect to the test database");
    let options = store.pool().options();
    assert_eq!(options.get_max_connections(), MAX_CONNECTIONS);
    assert_eq!(MAX_CONNECTIONS, 16);
    assert!(
        !options.get_test_before_acquire(),
        "no ping before every statement"
    );
    let custom = PgStore::pool_options().max_connections(3);
    assert_eq!(custom.get_max_connections(), 3);
    assert!(!custom.get_test_before_acquire());
    store.pool().close().await;
}

/// Every connection of the store's pool has the server end a transaction left idle for
/// `IDLE_IN_TRANSACTION_TIMEOUT` (a frozen process's, which would otherwise hold its
/// snapshot and locks), and runs without JIT.
#[tokio::test]
async fn connections_end_transactions_left_idle() {
    let store = PgStore::connect(&database_url())
        .await
        .expect("connect to the test database");
    assert_eq!(
        tasks::postgres::IDLE_IN_TRANSACTION_TIMEOUT,
        Duration::from_secs(60)
    );
    let mut connection = store.pool().acquire().await.unwrap();
    let (idle, jit): (String, String) = sqlx::query_as(
        "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('jit')",
    )
    .fetch_one(&mut *connection)
    .await
    .unwrap();
    assert_eq!((idle.as_str(), jit.as_str()), ("1min", "off"));
    drop(connection);
    store.pool().close().await;
}

/// On the runtime that opened them, the pool's connections are kept: the check that hands a
/// runtime no connection opened before it used the pool (see `a_store_outlives_the_runtime_
/// that_first_used_it`) never replaces one of its own. Every statement after the first burst
/// runs on a connection the burst opened (`pg_backend_pid`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_the_runtime_in_use_are_kept() {
    let store = PgStore::connect(&database_url())
        .await
        .expect("connect to the test database");
    let pool = store.pool().clone();
    let pid = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let opened: std::collections::HashSet<i32> =
        futures::future::join_all((0..8).map(|_| pid(pool.clone())))
            .await
            .into_iter()
            .collect();
    // A released connection goes back to the pool from a task of its own: wait until all
    // are back (on a loaded machine that took longer than any fixed pause), or a statement
    // would find none idle and open one.
    let back = tokio::time::Instant::now() + Duration::from_secs(30);
    while pool.num_idle() < opened.len() && tokio::time::Instant::now() < back {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..20 {
        let used = pid(pool.clone()).await;
        assert!(
            opened.contains(&used),
            "a statement ran on a new connection ({used}, opened: {opened:?})"
        );
    }
    pool.close().await;
}

/// A server where nothing listens may be one that is restarting: `connect` waits for it as
/// long as it is told (`connect_waiting`), then fails with a database error that says why,
/// instead of after the pool's 30 s of retries.
#[tokio::test]
async fn connect_to_a_refusing_server_fails_after_its_wait() {
    let started = std::time::Instant::now();
    // Port 1 on loopback: nothing listens there.
    let error = PgStore::connect_waiting(
        "postgres://postgres@127.0.0.1:1/test",
        Duration::from_secs(1),
    )
    .await
    .expect_err("nothing listens on port 1");
    let elapsed = started.elapsed();
    assert!(
        matches!(error, tasks::StoreError::Database { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().to_lowercase().contains("refused"),
        "the error says why: {error}"
    );
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed < Duration::from_secs(10),
        "failed after {elapsed:?}, for a wait of 1 s"
    );
}

/// A server that refuses the connection for a reason that a wait does not change (here a
/// database that does not exist) fails `connect` at once, saying why.
#[tokio::test]
async fn connect_to_a_missing_database_fails_at_once() {
    // The test database's URL with another database name (and the same credentials).
    let test_url = database_url();
    let (server, database) = test_url.rsplit_once('/').expect("a URL with a database");
    let query = database
        .split_once('?')
        .map(|(_, query)| format!("?{query}"))
        .unwrap_or_default();
    let url = format!("{server}/tasks_no_such_database{query}");
    let started = std::time::Instant::now();
    let error = PgStore::connect(&url)
        .await
        .expect_err("the database does not exist");
    let elapsed = started.elapsed();
    assert!(
        error.to_string().contains("does not exist"),
        "the error says why: {error}"
    );
    assert!(
        elapsed < Duration::from_secs(5),
        "failed after {elapsed:?}: it waited for a refusal that does not pass"
    );
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Number {
    n: u32,
}

#[step]
async fn double(n: u32) -> Result<u32, std::io::Error> {
    Ok(n * 2)
}

/// Two steps around a durable sleep (which parks the run and resumes it by replay).
#[workflow(name = "pool-double-twice")]
async fn double_twice(ctx: WorkflowContext, input: Number) -> Result<u32, WorkflowError> {
    let once = double(input.n).await?;
    ctx.sleep("nap", Duration::from_millis(50)).await?;
    Ok(double(once).await?)
}

/// With two connections, one held by the store's `LISTEN`, a worker and a client still run
/// several workflows at once to completion: claims, step records, sleeps, completions,
/// heartbeats and result reads all take turns on the one connection left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_two_connections_runs_workflows() {
    let pool = PgStore::pool_options()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&database_url())
        .await
        .expect("connect to the test database");
    let store = PgStore::new(pool)
        .with_namespace(unique_namespace("test"))
        .unwrap();
    store.migrate().await.expect("migrate");
    let worker = Worker::builder(store.clone())
        .concurrency(8)
        .build()
        .unwrap()
        .spawn();
    let client = Client::new(store.clone()).unwrap();

    // A start must not wait on the pool for a connection it holds itself: with the pool's
    // 30 s acquire timeout, that would stall each start by 30 s (it once did: the wake-up
    // after the insert took a second connection while the first was still held).
    let mut runs = Vec::new();
    let starts = async {
        for n in 0..8 {
            runs.push((n, double_twice::start(&client, Number { n }).await.unwrap()));
        }
    };
    tokio::time::timeout(Duration::from_secs(20), starts)
        .await
        .expect("8 starts on a 2-connection pool take well under 20 s");
    for (n, run) in runs {
        let output = run.result_within(Duration::from_secs(30)).await.unwrap();
        assert_eq!(output, n * 4);
    }
    worker.shutdown().await;
}

/// The store's claims run on the generic plan of their prepared statement, planned once per
/// connection, never with each claim's values: on a pool of one connection, every claim is
/// counted in `pg_prepared_statements.generic_plans` of the claim statement and none in
/// `custom_plans` (Postgres's default would plan the claim with its values at every
/// execution, most of an idle claim's time). And the setting is the claim's alone: the
/// connection's own plan mode is still the default.
#[tokio::test]
async fn claims_run_on_a_generic_plan() {
    let pool = PgStore::pool_options()
        .max_connections(1)
        .connect(&database_url())
        .await
        .expect("connect to the test database");
    let store = PgStore::new(pool.clone())
        .with_namespace(unique_namespace("plan-mode"))
        .unwrap();
    use tasks::store::LeaseStore;
    for n in 0..8 {
        let claimed = store
            .claim_runs(&format!("plan-mode-{n}"), Duration::from_secs(60), 4)
            .await
            .unwrap();
        assert!(claimed.is_empty());
    }
    let mut connection = pool.acquire().await.unwrap();
    // The plain claim: no queue of the namespace has a limit.
    let plans: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
    )
    .bind(tasks::postgres::__bench::plain_claim_runs_sql())
    .fetch_all(&mut *connection)
    .await
    .unwrap();
    assert_eq!(plans.len(), 1, "one claim statement prepared: {plans:?}");
    assert_eq!(plans[0], (8, 0), "generic and custom plans");
    let mode: String = sqlx::query_scalar("SELECT current_setting('plan_cache_mode')")
        .fetch_one(&mut *connection)
        .await
        .unwrap();
    assert_eq!(mode, "auto");
    drop(connection);
    pool.close().await;
}
