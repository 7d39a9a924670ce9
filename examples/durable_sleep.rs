//! A durable timer: the run is parked in the database while it sleeps, its worker slot is
//! freed, and any worker resumes it when the time has come — even after a restart. The
//! client waits for the run to park with `wait_for_status`, without polling.
//!
//! ```sh
//! cargo run --example durable_sleep
//! ```

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, RunStatus, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Reminder {
    to: String,
    after_seconds: u64,
}

#[step]
async fn send(to: &str, text: &str) -> Result<String, std::io::Error> {
    println!("  -> {to}: {text}");
    Ok(format!("sent to {to}"))
}

#[workflow(name = "reminder")]
async fn reminder(ctx: WorkflowContext, input: Reminder) -> Result<String, WorkflowError> {
    send(&input.to, "your trial started").await?;
    ctx.sleep(
        "wait-for-reminder",
        Duration::from_secs(input.after_seconds),
    )
    .await?;
    let sent = send(&input.to, "your trial ends soon").await?;
    Ok(sent)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-sleep")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let started = Instant::now();
    let run = reminder::start(
        &client,
        Reminder {
            to: "grace".into(),
            after_seconds: 2,
        },
    )
    .await?;
    // Woken by the store's announcement that the run parked, not by polling.
    let parked = run
        .wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(10))
        .await?;
    println!(
        "while sleeping the run is {} (worker: {:?}) until {:?}",
        parked.status, parked.worker_id, parked.available_at
    );
    println!(
        "result: {} after {:?}",
        run.result().await?,
        started.elapsed()
    );
    worker.shutdown().await;
    Ok(())
}
