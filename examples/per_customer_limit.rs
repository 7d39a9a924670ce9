//! Per-key concurrency limits and priorities: at most two exports per customer run at once,
//! across every worker, while a customer with a backlog does not hold up the others, and an
//! urgent run jumps the queue.
//!
//! ```sh
//! cargo run --example per_customer_limit
//! ```
//!
//! Two workers (as if on two machines) share the store. Customer `acme` queues eight
//! exports, customer `globex` two; each export takes 300 ms. The workflow derives each
//! run's key from its input (`concurrency(key = customer_of, limit = 2)`), so every start
//! gets it, typed or JSON, without repeating it. The limit is enforced by the claim, in the
//! database: the printout shows at most two `acme` exports at once, and `globex` finishing
//! long before `acme`'s backlog.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Export {
    customer: String,
    number: u32,
}

/// How many exports of each customer run right now, in this process (for the printout).
static RUNNING: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

#[step]
async fn build_export(export: &Export) -> Result<String, std::io::Error> {
    let running = {
        let mut running = RUNNING.lock().unwrap();
        running.push((export.customer.clone(), export.number));
        running
            .iter()
            .filter(|(customer, _)| *customer == export.customer)
            .count()
    };
    println!(
        "  start {} #{} ({running} of {} running)",
        export.customer, export.number, export.customer
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    RUNNING
        .lock()
        .unwrap()
        .retain(|entry| *entry != (export.customer.clone(), export.number));
    Ok(format!("{}-{}.csv", export.customer, export.number))
}

/// The concurrency key of an export: its customer.
fn customer_of(export: &Export) -> &str {
    &export.customer
}

/// At most two exports of one customer run at once, across every worker.
#[workflow(name = "export", concurrency(key = customer_of, limit = 2))]
async fn export(_ctx: WorkflowContext, input: Export) -> Result<String, WorkflowError> {
    Ok(build_export(&input).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-per-customer")?;
    let client = Client::new(store.clone())?;

    let mut runs = Vec::new();
    for (customer, count) in [("acme", 8), ("globex", 2)] {
        for number in 1..=count {
            let input = Export {
                customer: customer.into(),
                number,
            };
            // The run's key is the customer, derived by the workflow.
            runs.push((customer, export::start(&client, input).await?));
        }
    }
    // Started last, claimed first among acme's queued exports (when acme has a free slot).
    // The key is still derived; `concurrency_key(..)` here would replace it.
    let input = Export {
        customer: "acme".into(),
        number: 99,
    };
    runs.push(("acme", client.start::<export>(input).priority(10).await?));

    let started = Instant::now();
    let workers = [
        Worker::builder(store.clone())
            .concurrency(8)
            .build()?
            .spawn(),
        Worker::builder(store.clone())
            .concurrency(8)
            .build()?
            .spawn(),
    ];
    // Print each export as it finishes.
    let waits: Vec<_> = runs
        .into_iter()
        .map(|(customer, run)| {
            tokio::spawn(async move {
                let file = run.result().await?;
                println!("{customer}: {file} done after {:?}", started.elapsed());
                Ok::<_, tasks::RunError>(())
            })
        })
        .collect();
    for wait in waits {
        wait.await??;
    }
    for worker in workers {
        worker.shutdown().await;
    }
    Ok(())
}
