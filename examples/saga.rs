//! A trip booked in three steps, where the payment fails: the bookings already made are
//! cancelled, the last one first, by compensations that are recorded steps themselves (a
//! crash in the middle of compensating cancels nothing twice).
//!
//! ```sh
//! cargo run --example saga
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, RunError, Saga, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Trip {
    traveller: String,
    card: String,
}

#[step]
async fn book(what: String, traveller: String) -> Result<String, WorkflowError> {
    println!("  booked the {what} for {traveller}");
    Ok(format!("{what}-{traveller}"))
}

#[step]
async fn cancel(booking: String) -> Result<(), WorkflowError> {
    println!("  cancelled {booking}");
    Ok(())
}

#[step(retry(max_attempts = 1))]
async fn charge(card: String) -> Result<u32, WorkflowError> {
    Err(WorkflowError::msg(format!("card {card} declined")))
}

#[workflow(name = "book-trip")]
async fn book_trip(_ctx: WorkflowContext, trip: Trip) -> Result<u32, WorkflowError> {
    let mut saga = Saga::new();
    for what in ["flight", "hotel", "car"] {
        let booking = book(what.to_owned(), trip.traveller.clone()).await?;
        saga.add(move || cancel(booking));
    }
    // On an error, every booking is cancelled (car, hotel, flight) before the error is
    // returned.
    saga.or_compensate(charge(trip.card).await).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-saga")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let trip = Trip {
        traveller: "grace".into(),
        card: "4242".into(),
    };
    let run = book_trip::start(&client, trip).await?;
    match run.result().await {
        Err(RunError::Failed { error, .. }) => println!("result: failed ({})", error.message),
        other => println!("result: {other:?}"),
    }
    let cancelled: Vec<String> = run
        .steps()
        .await?
        .into_iter()
        .filter(|step| step.step_name.starts_with("cancel"))
        .map(|step| step.step_name)
        .collect();
    println!("compensation steps: {cancelled:?}");
    worker.shutdown().await;
    Ok(())
}
