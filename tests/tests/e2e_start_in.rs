//! End to end: transactional start, Postgres only. `StartBuilder::in_transaction` creates a
//! run inside the caller's transaction: on commit the run exists and a worker that sleeps
//! between polls for a minute runs it at once (woken by the NOTIFY delivered at commit); on
//! rollback there is no run, and a row the caller wrote in the same transaction shares its
//! fate. Refused starts leave the transaction usable, and idempotency keys work inside it.

use std::time::{Duration, Instant};

use tasks::postgres::{PgStore, sqlx};
use tasks::{
    Client, ClientError, ListRuns, RunError, SharedStore, StartOptions, Worker, WorkflowError,
    workflow,
};
use uuid::Uuid;

/// Doubles its input.
#[workflow(name = "e2e-start-in-double")]
async fn double(_ctx: tasks::WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    Ok(n * 2)
}

/// The caller's own table, beside the runs.
const ORDERS: &str = "CREATE TABLE IF NOT EXISTS public.start_in_orders (id uuid PRIMARY KEY)";

async fn orders_table(pool: &sqlx::PgPool) {
    // Test processes race on CREATE TABLE IF NOT EXISTS (a unique violation in pg_type):
    // the loser finds the table the next time.
    for _ in 0..5 {
        if sqlx::query(ORDERS).execute(pool).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not create public.start_in_orders");
}

async fn order_exists(pool: &sqlx::PgPool, id: Uuid) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM public.start_in_orders WHERE id = $1)",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A store on the test database, its pool, and a worker that polls once a minute: it only
/// picks a new run up promptly when a notification wakes it.
async fn setup() -> (PgStore, sqlx::PgPool) {
    let store = tasks_tests::pg_store().await;
    let pool = tasks_tests::pg_store().await.pool().clone();
    orders_table(&pool).await;
    (store, pool)
}

fn client(store: &PgStore) -> Client {
    Client::new(store.clone()).unwrap()
}

fn sleepy_worker(store: &PgStore) -> Worker {
    Worker::builder(SharedStore::new(store.clone()))
        .concurrency(4)
        .lease(Duration::from_secs(5))
        .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
        .shutdown_grace(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn runs(client: &tasks::Client) -> usize {
    client
        .list_runs(ListRuns::default())
        .await
        .unwrap()
        .data
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_start_runs_woken_at_commit() {
    let (store, pool) = setup().await;
    let client = client(&store);
    let worker = sleepy_worker(&store).spawn();
    // Let the worker make its first (empty) poll and go to sleep for a minute.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let order = Uuid::new_v4();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO public.start_in_orders (id) VALUES ($1)")
        .bind(order)
        .execute(&mut *tx)
        .await
        .unwrap();
    let handle = client
        .start::<double>(21)
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    // Before the commit, nobody else sees the run: the worker cannot run it.
    assert_eq!(runs(&client).await, 0);
    assert!(client.get_run(handle.id()).await.unwrap().is_none());
    assert!(!order_exists(&pool, order).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(client.get_run(handle.id()).await.unwrap().is_none());

    let committed = Instant::now();
    tx.commit().await.unwrap();
    assert!(order_exists(&pool, order).await);
    assert_eq!(
        handle.result_within(Duration::from_secs(20)).await.unwrap(),
        42
    );
    // Far sooner than the worker's minute of polling: the NOTIFY at commit woke it.
    let took = committed.elapsed();
    assert!(took < Duration::from_secs(20), "took {took:?}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_start_leaves_no_run_and_no_row() {
    let (store, pool) = setup().await;
    let client = client(&store);
    let worker = sleepy_worker(&store).spawn();

    let order = Uuid::new_v4();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO public.start_in_orders (id) VALUES ($1)")
        .bind(order)
        .execute(&mut *tx)
        .await
        .unwrap();
    let handle = client
        .start::<double>(1)
        .idempotency_key("once")
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert!(!order_exists(&pool, order).await);
    assert!(client.get_run(handle.id()).await.unwrap().is_none());
    assert_eq!(runs(&client).await, 0);
    assert!(matches!(
        handle.status().await,
        Err(RunError::NotFound { .. })
    ));
    // The key was never taken: a later start with it creates a run.
    let again = client
        .start::<double>(2)
        .idempotency_key("once")
        .await
        .unwrap();
    assert_ne!(again.id(), handle.id());
    assert_eq!(
        again.result_within(Duration::from_secs(20)).await.unwrap(),
        4
    );
    assert_eq!(runs(&client).await, 1);
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_starts_leave_the_transaction_usable() {
    let (store, pool) = setup().await;
    let client = client(&store);

    let order = Uuid::new_v4();
    let mut tx = pool.begin().await.unwrap();
    // Past the idempotency key limit: refused before the transaction is touched.
    let too_long = StartOptions::new().idempotency_key("k".repeat(100_000));
    let refused = client
        .start::<double>(1)
        .options(too_long)
        .in_transaction(&store, &mut tx)
        .await
        .unwrap_err();
    assert!(matches!(refused, ClientError::Limit(_)), "{refused:?}");
    // Input that does not match the workflow's schema.
    let refused = client
        .start_by_name("e2e-start-in-double", serde_json::json!("nope"))
        .in_transaction(&store, &mut tx)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::InvalidInput(_)),
        "{refused:?}"
    );
    let refused = client
        .start_by_name("e2e-start-in-missing", serde_json::json!(1))
        .in_transaction(&store, &mut tx)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ClientError::UnknownWorkflow { .. }),
        "{refused:?}"
    );

    // The transaction is not aborted: the caller's write and a valid start commit.
    sqlx::query("INSERT INTO public.start_in_orders (id) VALUES ($1)")
        .bind(order)
        .execute(&mut *tx)
        .await
        .unwrap();
    let handle = client
        .start_by_name("e2e-start-in-double", serde_json::json!(5))
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(order_exists(&pool, order).await);
    assert_eq!(runs(&client).await, 1);
    assert_eq!(
        handle.run().await.unwrap().input,
        Some(serde_json::json!(5))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_work_inside_the_transaction() {
    let (store, pool) = setup().await;
    let client = client(&store);
    let key = StartOptions::new().idempotency_key("order-7");

    // Twice in one transaction: one run.
    let mut tx = pool.begin().await.unwrap();
    let first = client
        .start::<double>(7)
        .options(key.clone())
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    let second = client
        .start::<double>(8)
        .options(key.clone())
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    assert_eq!(first.id(), second.id());
    tx.commit().await.unwrap();
    assert_eq!(runs(&client).await, 1);

    // In a later transaction, the committed run is returned and nothing is created.
    let mut tx = pool.begin().await.unwrap();
    let third = client
        .start::<double>(9)
        .options(key.clone())
        .in_transaction(&store, &mut tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(third.id(), first.id());
    // And a plain start agrees.
    let plain = client.start::<double>(10).options(key).await.unwrap();
    assert_eq!(plain.id(), first.id());
    assert_eq!(runs(&client).await, 1);
    assert_eq!(first.run().await.unwrap().input, Some(serde_json::json!(7)));

    let worker = sleepy_worker(&store).spawn();
    assert_eq!(
        first.result_within(Duration::from_secs(20)).await.unwrap(),
        14
    );
    worker.shutdown().await;
}
