//! Quickstart: a three-step checkout workflow, executed by an in-process worker.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! With no `DATABASE_URL` it keeps everything in a SQLite file, `tasks.sqlite`, in the
//! current directory: no database server needed. Set `DATABASE_URL=postgres://...` to use
//! Postgres (tables go in the `tasks` schema, created on first run).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

/// The workflow input. `JsonSchema` lets the client reject bad input before a run is stored.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Order {
    id: u64,
    customer: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Receipt {
    order_id: u64,
    charge_id: String,
    emailed_to: String,
}

/// A step's error. When a step's retries run out, its last error is stored and a replay hands
/// it back without running the step again: `Serialize + Deserialize` let it come back equal.
#[derive(Debug, Serialize, Deserialize)]
struct PaymentError(String);

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "payment declined: {}", self.0)
    }
}

impl std::error::Error for PaymentError {}

/// A step is an ordinary async fn. Inside a run its output is stored once it completes;
/// when the run is replayed (after a crash, a sleep, a pause...) it is not executed again.
#[step]
async fn reserve_stock(order: &Order) -> Result<u32, std::io::Error> {
    println!("  reserving stock for order {}", order.id);
    Ok(1)
}

#[step(retry(max_attempts = 5, initial_interval = "200ms"))]
async fn charge_card(order: &Order) -> Result<String, PaymentError> {
    if order.amount_cents == 0 {
        return Err(PaymentError("nothing to charge".into()));
    }
    println!("  charging {} cents", order.amount_cents);
    Ok(format!("ch_{}", order.id))
}

#[step]
async fn email_receipt(customer: &str, charge_id: &str) -> Result<String, std::io::Error> {
    println!("  emailing receipt for {charge_id} to {customer}");
    Ok(format!("{customer}@example.com"))
}

/// Checks out an order: reserve, charge, then email a receipt.
#[workflow(name = "checkout", version = "1")]
async fn checkout(ctx: WorkflowContext, order: Order) -> Result<Receipt, WorkflowError> {
    reserve_stock(&order).await?;
    let charge_id = charge_card(&order).await?;
    // A durable timer: the run is parked in Postgres, not in this process's memory.
    ctx.sleep("settle", Duration::from_millis(200)).await?;
    let emailed_to = email_receipt(&order.customer, &charge_id).await?;
    Ok(Receipt {
        order_id: order.id,
        charge_id,
        emailed_to,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .init();

    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("quickstart")?;

    // The worker knows every #[workflow] linked into this binary; no registration code.
    let worker = Worker::builder(store.clone())
        .concurrency(4)
        .build()?
        .spawn();

    let client = Client::new(store)?;
    let order = Order {
        id: 42,
        customer: "ada".into(),
        amount_cents: 1999,
    };
    let run = checkout::start(&client, order).await?;
    println!("started run {}", run.id());

    let receipt = run.result().await?;
    println!("result: {receipt:?}");

    println!("step log:");
    for step in run.steps().await? {
        println!(
            "  {:<16} {:<9} {}",
            step.step_name,
            step.status,
            step.output.unwrap_or_default()
        );
    }

    worker.shutdown().await;
    Ok(())
}
