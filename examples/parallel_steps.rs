//! Steps that run concurrently inside one workflow with `try_join!`.
//!
//! ```sh
//! cargo run --example parallel_steps
//! ```
//!
//! Step names resolve in the order the futures are first polled, which `try_join!` makes
//! deterministic, so replay finds every result again.

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Cities {
    names: Vec<String>,
}

/// Pretends to call a slow weather API.
#[step]
async fn fetch_temperature(city: String) -> Result<f64, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(10.0 + city.len() as f64)
}

/// Fetches three cities at once; each call is its own memoized step
/// (`fetch_temperature`, `fetch_temperature:1`, `fetch_temperature:2`).
#[workflow(name = "weather-report")]
async fn weather_report(
    _ctx: WorkflowContext,
    input: Cities,
) -> Result<Vec<(String, f64)>, WorkflowError> {
    let [a, b, c] = match input.names.as_slice() {
        [a, b, c] => [a.clone(), b.clone(), c.clone()],
        _ => return Err(WorkflowError::msg("expected exactly three cities").non_retryable()),
    };
    let (ta, tb, tc) = tokio::try_join!(
        fetch_temperature(a.clone()),
        fetch_temperature(b.clone()),
        fetch_temperature(c.clone()),
    )?;
    Ok(vec![(a, ta), (b, tb), (c, tc)])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-parallel")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let started = Instant::now();
    let input = Cities {
        names: vec!["Oslo".into(), "Lima".into(), "Nairobi".into()],
    };
    let run = weather_report::start(&client, input).await?;
    let report = run.result().await?;
    println!(
        "report: {report:?} in {:?} (three 300 ms steps, run concurrently)",
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
