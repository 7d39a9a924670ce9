//! Recorded values: a clock read, a random number, a fresh id or a seeded generator taken
//! in workflow code would change from one replay to the next. `ctx.now()`, `ctx.uuid()`,
//! `ctx.random_u64()` and `ctx.rng()` record what the first execution drew and hand it back
//! on every replay, so the run takes the same path and sends the outside world the same ids.
//!
//! The workflow below draws its values, confirms the order with a step, sleeps durably
//! (the run leaves its worker) and is replayed from the top when it wakes: both executions
//! print the same values.
//!
//! ```sh
//! cargo run --example recorded_values
//! ```

use std::sync::Mutex;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::rand::Rng as _;
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Order {
    /// A version 7 UUID (schemars knows no `Uuid` without a feature: kept as text).
    id: String,
    placed_at: String,
    ticket: u64,
    discount_percent: u32,
}

/// What each execution of the workflow drew, in order.
static EXECUTIONS: Mutex<Vec<Order>> = Mutex::new(Vec::new());

#[step]
async fn confirm(order: &Order) -> Result<(), std::io::Error> {
    println!(
        "  step: order {} confirmed with {}% off",
        order.id, order.discount_percent
    );
    Ok(())
}

#[workflow(name = "place-order")]
async fn place_order(ctx: WorkflowContext, customer: String) -> Result<Order, WorkflowError> {
    // Never `Uuid::new_v4()`, `Utc::now()` or `rand::random()` here: a replay would draw
    // others. These are recorded on the first execution and replayed after.
    let id = ctx.uuid().await?;
    let placed_at = ctx.now().await?;
    let ticket = ctx.random_u64().await?;
    let mut rng = ctx.rng().await?;
    let discount_percent = rng.random_range(0..=20);
    let order = Order {
        id: id.to_string(),
        placed_at: placed_at.to_rfc3339(),
        ticket,
        discount_percent,
    };
    let execution = {
        let mut executions = EXECUTIONS.lock().expect("not poisoned");
        executions.push(order.clone());
        executions.len()
    };
    println!("execution {execution} for {customer}: {order:?}");
    confirm(&order).await?;
    // The run is parked here; when it wakes, it replays from the top.
    ctx.sleep("before-shipping", Duration::from_secs(1)).await?;
    Ok(order)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-recorded")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let run = place_order::start(&client, "grace".to_owned()).await?;
    let order = run.result_within(Duration::from_secs(30)).await?;
    worker.shutdown().await;

    let executions = EXECUTIONS.lock().expect("not poisoned").clone();
    println!("result: {order:?}");
    println!(
        "{} executions, same values in every execution: {}",
        executions.len(),
        executions.len() >= 2 && executions.iter().all(|seen| *seen == order)
    );
    Ok(())
}
