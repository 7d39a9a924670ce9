//! Concurrent branches of a workflow on other tokio tasks, with `ctx.spawn`.
//!
//! ```sh
//! cargo run --example branches
//! ```
//!
//! Each branch's steps are named after the branch (`europe/fetch_temperature`,
//! `europe/fetch_temperature:1`, `africa/fetch_temperature`, ...), so a replay finds every
//! result again however the branches interleave. A plain `tokio::spawn` would leave the
//! workflow: its steps would run as plain calls, never recorded.

use std::time::{Duration, Instant};

use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

/// Pretends to call a slow weather API.
#[step]
async fn fetch_temperature(city: String) -> Result<f64, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(10.0 + city.len() as f64)
}

/// The mean temperature of `cities`, one after the other (one branch).
async fn mean(cities: &[&str]) -> Result<f64, WorkflowError> {
    let mut sum = 0.0;
    for city in cities {
        sum += fetch_temperature((*city).to_owned()).await?;
    }
    Ok(sum / cities.len() as f64)
}

/// Two regions at once, each on its own task; each region's cities in order.
#[workflow(name = "regional-report")]
async fn regional_report(ctx: WorkflowContext) -> Result<Vec<(String, f64)>, WorkflowError> {
    let europe = ctx.spawn("europe", mean(&["Oslo", "Lisbon"]))?;
    let africa = ctx.spawn("africa", mean(&["Nairobi", "Accra"]))?;
    Ok(vec![
        ("europe".into(), europe.await?),
        ("africa".into(), africa.await?),
    ])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-branches")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let started = Instant::now();
    let run = regional_report::start(&client, ()).await?;
    let report = run.result().await?;
    println!(
        "report: {report:?} in {:?} (two branches of two 300 ms steps each)",
        started.elapsed()
    );
    for step in run.steps().await? {
        println!(
            "  {} -> {}",
            step.step_name,
            step.output.unwrap_or_default()
        );
    }
    worker.shutdown().await;
    Ok(())
}
