//! Schedules: a workflow started on a cron expression, in a timezone, each slot once
//! however many workers run.
//!
//! ```sh
//! cargo run --example schedule
//! ```
//!
//! `heartbeat` is declared with a schedule (every two seconds, in Europe/Paris): the worker
//! puts it in the store when it starts. `report` is scheduled at run time through the
//! client, with an input, then paused, resumed and deleted. Two workers share the store
//! (as if on two machines), and still every slot starts one run: the printout shows each
//! slot once, with the time the run was scheduled for (`ctx.scheduled_at()`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{
    CatchUp, Client, ListRuns, NewSchedule, Worker, WorkflowContext, WorkflowError, workflow,
};

/// Declared: every two seconds, read in Paris time. A slot missed while no worker ran is
/// skipped (`catch_up = "skip"`); the default, `"latest"`, would run the latest one.
#[workflow(
    name = "heartbeat",
    schedule = "*/2 * * * * *",
    timezone = "Europe/Paris",
    catch_up = "skip"
)]
async fn heartbeat(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    let slot = ctx.scheduled_at().expect("started by its schedule");
    println!("  heartbeat for {}", slot.format("%H:%M:%S"));
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Report {
    title: String,
}

#[workflow(name = "report")]
async fn report(ctx: WorkflowContext, input: Report) -> Result<String, WorkflowError> {
    let slot = ctx.scheduled_at().expect("started by its schedule");
    println!("  report {:?} for {}", input.title, slot.format("%H:%M:%S"));
    Ok(format!("{} at {slot}", input.title))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-schedule")?;
    let client = Client::new(store.clone())?;
    let started = tasks::chrono::Utc::now();
    for old in client.list_schedules().await? {
        client.delete_schedule(&old.name).await?;
    }

    // At run time: every second, UTC, with an input checked against the workflow's schema.
    client
        .create_schedule(NewSchedule {
            name: "every-second-report".into(),
            workflow_name: "report".into(),
            version: None,
            cron: "* * * * * *".into(),
            timezone: "UTC".into(),
            input: serde_json::json!({ "title": "status" }),
            catch_up: CatchUp::Latest,
        })
        .await?;

    let workers: Vec<_> = (0..2)
        .map(|_| {
            Worker::builder(store.clone())
                .build()
                .map(|worker| worker.spawn())
        })
        .collect::<Result<_, _>>()?;
    println!("two workers running; every slot starts one run:");
    tokio::time::sleep(Duration::from_secs(3)).await;

    println!("pausing the report for 2 s (the heartbeat goes on)");
    client.pause_schedule("every-second-report").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Resumed: the slots missed while paused go to the catch-up policy (`Latest`: the
    // latest of them runs).
    println!("resuming the report");
    client.resume_schedule("every-second-report").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    for schedule in client.list_schedules().await? {
        println!(
            "schedule {:?}: {} in {}, catch-up {}, next slot {:?}",
            schedule.name, schedule.cron, schedule.timezone, schedule.catch_up, schedule.next_slot
        );
    }
    client.delete_schedule("every-second-report").await?;
    for worker in workers {
        worker.shutdown().await;
    }
    let runs = client
        .list_runs(ListRuns {
            limit: Some(1000),
            created_after: Some(started),
            ..ListRuns::default()
        })
        .await?;
    println!("{} runs started this time, one per slot", runs.data.len());
    Ok(())
}
