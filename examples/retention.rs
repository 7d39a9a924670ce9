//! Retention: finished runs are deleted with their steps and events, once on demand with
//! `Client::purge`, and continuously by a worker built with `WorkerBuilder::retention`.
//! Live runs are never touched.
//!
//! ```sh
//! cargo run --example retention                  # a SQLite file, tasks.sqlite
//! DATABASE_URL=postgres://... cargo run --example retention
//! ```

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tasks::{
    Client, ListRuns, PurgeRuns, RunStatus, Worker, WorkflowContext, WorkflowError, step, workflow,
};

#[step]
async fn issue(number: u32) -> Result<String, std::io::Error> {
    Ok(format!("receipt #{number}"))
}

#[workflow(name = "receipt")]
async fn receipt(_ctx: WorkflowContext, number: u32) -> Result<String, WorkflowError> {
    Ok(issue(number).await?)
}

/// A run that stays live (sleeping) for an hour: retention never deletes it.
#[workflow(name = "subscription")]
async fn subscription(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    ctx.sleep("renewal", Duration::from_secs(3600)).await?;
    Ok(())
}

async fn count(client: &Client, status: RunStatus) -> Result<usize, Box<dyn std::error::Error>> {
    let page = client
        .list_runs(ListRuns {
            statuses: vec![status],
            ..ListRuns::default()
        })
        .await?;
    Ok(page.data.len())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A namespace of its own for each run of the example, so that earlier runs of it (in
    // the same database file) do not change the counts below.
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped(&format!("example-retention-{stamp}"))?;
    let client = Client::new(store.clone())?;

    // Four runs complete, one is canceled before any worker sees it, one stays live.
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let mut receipts = Vec::new();
    for number in 1..=4 {
        receipts.push(receipt::start(&client, number).await?);
    }
    for run in &receipts {
        run.result_within(Duration::from_secs(10)).await?;
    }
    let canceled = receipt::start(&client, 5).await?;
    client.cancel(canceled.id()).await?;
    let live = subscription::start(&client, ()).await?;
    live.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(10))
        .await?;
    worker.shutdown().await;
    println!(
        "before: {} completed, {} canceled, {} sleeping",
        count(&client, RunStatus::Completed).await?,
        count(&client, RunStatus::Canceled).await?,
        count(&client, RunStatus::Sleeping).await?,
    );

    // On demand: the canceled runs, whatever their age (batches of short transactions).
    let purged = client
        .purge(PurgeRuns::older_than(Duration::ZERO).statuses([RunStatus::Canceled]))
        .await?;
    println!("Client::purge deleted {purged} canceled run(s)");
    assert_eq!(purged, 1);
    assert_eq!(client.get_run(canceled.id()).await?, None);
    assert_eq!(count(&client, RunStatus::Completed).await?, 4);

    // Continuously: a worker that deletes runs finished more than a second ago, checking
    // every 200 ms (in production: days, and the default interval of a minute).
    let started = Instant::now();
    let worker = Worker::builder(store.clone())
        .retention(Duration::from_secs(1))
        .retention_interval(Duration::from_millis(200))
        .build()?
        .spawn();
    while count(&client, RunStatus::Completed).await? > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the worker's retention did not purge the completed runs"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "the worker's retention deleted the 4 completed runs (and their steps) after {:.1?}",
        started.elapsed()
    );
    assert!(receipts[0].steps().await?.is_empty());

    // The live run is untouched.
    let still = client
        .get_run(live.id())
        .await?
        .expect("a live run is never purged");
    assert_eq!(still.status, RunStatus::Sleeping);
    println!("the sleeping run is still there: {}", still.status);
    worker.shutdown().await;

    // Leave nothing behind: cancel the live run and purge everything finished.
    client.cancel(live.id()).await?;
    let rest = client.purge(PurgeRuns::older_than(Duration::ZERO)).await?;
    println!("cleaned up {rest} run(s)");
    Ok(())
}
