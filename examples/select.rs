//! Waiting for the first of several things: an expense waits for a manager's approval, a
//! rejection, or a deadline, whichever comes first (`ctx.select`). The select is decided
//! once and recorded: a replay, or another worker after a crash, gets the same winner.
//!
//! ```sh
//! cargo run --example select
//! ```
//!
//! Three runs: one approved by an event, one whose two-second deadline passes first (its
//! select records the timer as the winner and the event arms as not consumed), and one with
//! the real 24-hour deadline, run on the testing kit's virtual clock, which jumps a day
//! ahead at once.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::testing::TestEnv;
use tasks::{Client, Event, Worker, WorkflowContext, WorkflowError, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Expense {
    employee: String,
    cents: u64,
    /// How long the manager has, in seconds (a day in production).
    deadline_secs: u64,
}

/// A manager approves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Approved {
    by: String,
}

impl Event for Approved {
    const TOPIC: &'static str = "expense-approved";
}

/// A manager rejects.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Rejected {
    by: String,
    reason: String,
}

impl Event for Rejected {
    const TOPIC: &'static str = "expense-rejected";
}

/// What happened first.
enum Decision {
    Approved(Approved),
    Rejected(Rejected),
    Expired,
}

#[workflow(name = "select-expense", events(Approved, Rejected))]
async fn expense(ctx: WorkflowContext, input: Expense) -> Result<String, WorkflowError> {
    // The run parks (no worker slot held) until an approval, a rejection or the deadline;
    // on a tie the first declared arm wins.
    let decision = ctx
        .select("decision")
        .event(Decision::Approved)
        .event(Decision::Rejected)
        .timer(Duration::from_secs(input.deadline_secs), || {
            Decision::Expired
        })
        .await?;
    Ok(match decision {
        Decision::Approved(Approved { by }) => {
            format!(
                "paid {} cents to {} (approved by {by})",
                input.cents, input.employee
            )
        }
        Decision::Rejected(Rejected { by, reason }) => format!("rejected by {by}: {reason}"),
        Decision::Expired => "rejected: nobody decided in time".to_owned(),
    })
}

fn expense_of(employee: &str, deadline_secs: u64) -> Expense {
    Expense {
        employee: employee.into(),
        cents: 4_200,
        deadline_secs,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-select")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store.clone())?;

    // 1. An approval arrives before the deadline.
    let approved = expense::start(&client, expense_of("grace", 60)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let by = Approved { by: "ann".into() };
    let sent = client.send_event(approved.id(), &by).await?;
    println!("approval sent (woke the parked run: {})", sent.woke);
    println!("approved run: {}", approved.result().await?);

    // 2. The deadline passes first. The select's attempt records the winner and what became
    //    of the losers: the two event arms consumed nothing, so an event sent on either
    //    topic would have stayed in the mailbox for a later wait.
    let late = expense::start(&client, expense_of("alan", 2)).await?;
    println!("late run: {}", late.result().await?);
    let steps = late.steps().await?;
    if let Some(select) = steps.iter().find(|s| s.step_name == "select/decision") {
        println!(
            "late run's select recorded: {}",
            select.output.clone().unwrap_or_default()
        );
    }
    worker.shutdown().await;

    // 3. The real 24-hour deadline, on the testing kit's virtual clock: a day passes at once.
    let env = TestEnv::start().await?;
    let day = expense::start(env.client(), expense_of("ada", 24 * 3600)).await?;
    env.settle(Duration::from_secs(10)).await?;
    env.advance(Duration::from_secs(24 * 3600)).await?;
    println!(
        "a day later (virtual clock): {}",
        day.result_within(Duration::from_secs(10)).await?
    );
    env.shutdown().await;
    Ok(())
}
