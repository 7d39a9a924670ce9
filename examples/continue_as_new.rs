//! A poller that runs for ever without growing its history: every `per_run` polls it
//! continues as new, handing its state to a successor run with an empty history, in the
//! same transaction that finishes it. The client awaits the whole lineage through the first
//! run's handle, and a "stop" event sent to that first run reaches whichever run of the
//! lineage is current.
//!
//! ```sh
//! cargo run --example continue_as_new
//! ```

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, Event, Worker, WorkflowContext, WorkflowError, step, workflow};

/// What one run hands to the next.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct PollState {
    /// The feed polled.
    feed: String,
    /// Polls done by the lineage so far.
    polls: u32,
    /// Items seen so far.
    seen: u64,
    /// Polls per run before it continues as new.
    per_run: u32,
}

/// Sent to stop the poller.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Stop {
    reason: String,
}

impl Event for Stop {
    const TOPIC: &'static str = "poller-stop";
}

#[step]
async fn poll(feed: &str, round: u32) -> Result<u64, std::io::Error> {
    // A real poller would call the feed here; this one "finds" a few items per round.
    Ok(u64::from(round % 3) + u64::from(!feed.is_empty()))
}

#[workflow(name = "feed-poller", events(Stop))]
async fn poller(ctx: WorkflowContext, state: PollState) -> Result<String, WorkflowError> {
    let mut state = state;
    for _ in 0..state.per_run {
        state.seen += poll(&state.feed, state.polls).await?;
        state.polls += 1;
        // Stop when told to; otherwise wait a little before the next poll.
        let stop = ctx
            .wait_for_event_timeout::<Stop>(Duration::from_millis(100))
            .await?;
        if let Some(stop) = stop.received() {
            return Ok(format!(
                "stopped ({}) after {} polls, {} items, in run {} of lineage {}",
                stop.reason,
                state.polls,
                state.seen,
                ctx.run_id(),
                ctx.lineage_id()
            ));
        }
    }
    // The history holds `per_run` polls and waits; hand the state over before it grows.
    ctx.continue_as_new::<poller>(state).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-continue")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let run = poller::start(
        &client,
        PollState {
            feed: "news".into(),
            polls: 0,
            seen: 0,
            per_run: 3,
        },
    )
    .await?;
    // Let it poll through a few hand-overs, then stop it through the first run's id: the
    // event reaches the lineage's current run.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let current = run.lineage_head().await?;
    println!(
        "first run {} continued; current run {} (continued from {:?})",
        run.id(),
        current.id,
        current.continued_from_run_id
    );
    client
        .send_event(
            run.id(),
            &Stop {
                reason: "done for today".into(),
            },
        )
        .await?;
    // The first run's handle follows the successors to the run that finishes for good.
    println!("result: {}", run.result().await?);
    worker.shutdown().await;
    Ok(())
}
