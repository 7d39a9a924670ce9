//! Retry from the failure, and fork from a step: a run that failed on a bug is fixed and
//! retried (its completed steps are not run again), then forked from a step to run that
//! step and the rest once more.
//!
//! ```sh
//! cargo run --example retry_and_fork
//! ```

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tasks::{Client, RunError, Worker, WorkflowContext, WorkflowError, step, workflow};

/// Whether the "bug" in `transform` is fixed (a deployment, in real life).
static FIXED: AtomicBool = AtomicBool::new(false);
/// How often `fetch` ran: an expensive download that must not run again.
static FETCHES: AtomicU32 = AtomicU32::new(0);

#[step]
async fn fetch() -> Result<Vec<u32>, WorkflowError> {
    FETCHES.fetch_add(1, Ordering::SeqCst);
    println!("  fetch: downloading");
    Ok(vec![1, 2, 3])
}

#[step(retry(max_attempts = 2, initial_interval = "50ms"))]
async fn transform(rows: Vec<u32>) -> Result<u32, WorkflowError> {
    if !FIXED.load(Ordering::SeqCst) {
        println!("  transform: bug!");
        return Err(WorkflowError::msg("division by zero in transform"));
    }
    println!("  transform: ok");
    Ok(rows.iter().map(|row| row * 10).sum())
}

#[workflow(name = "import", retry(max_attempts = 1))]
async fn import(_ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    let rows = fetch().await?;
    transform(rows).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-retry-fork")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    println!("first run:");
    let run = import::start(&client, ()).await?;
    match run.result().await {
        Err(RunError::Failed { error, .. }) => println!("failed: {}", error.message),
        other => panic!("expected the bug to fail the run, got {other:?}"),
    }

    FIXED.store(true, Ordering::SeqCst);
    println!("bug fixed, retrying the same run:");
    client.retry(run.id()).await?;
    let total = run.result().await?;
    println!("result: {total}");
    assert_eq!(total, 60);
    assert_eq!(FETCHES.load(Ordering::SeqCst), 1, "fetch did not run again");

    println!("forking it from transform:");
    let forked = client.fork(run.id(), "transform").await?;
    let again = client.handle::<u32>(forked.id).result().await?;
    println!("fork {} result: {again}", forked.id);
    assert_eq!(again, 60);
    assert_eq!(FETCHES.load(Ordering::SeqCst), 1, "the fork replayed fetch");
    worker.shutdown().await;
    Ok(())
}
