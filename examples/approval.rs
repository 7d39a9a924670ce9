//! Human in the loop: an expense waits for an approval, sent from another process or the
//! command line, and is rejected automatically if none comes in time.
//!
//! ```sh
//! # Starts a worker and an expense run, then approves it from a second process:
//! cargo run --example approval
//!
//! # Waits for you instead (up to --timeout-secs); approve from another terminal with
//! # either command it prints:
//! cargo run --example approval -- run --wait
//! cargo run --example approval -- approve <RUN_ID> --by ann
//! cargo run --example approval -- tasks events send approval --run <RUN_ID> \
//!     --payload '{"approved": true, "by": "ann"}'
//! ```
//!
//! The JSON send is checked against `Approval`'s JSON Schema before anything is stored
//! (`--payload '{"approved": "yes"}'` is refused, naming `/approved` and the missing `/by`).
//! With no `DATABASE_URL` everything goes to the SQLite file `tasks.sqlite`: the processes
//! share it. (On SQLite the worker of another process finds the woken run by polling; on
//! Postgres the send's notification wakes it at once.)

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::uuid::Uuid;
use tasks::{Client, Event, EventOutcome, Worker, WorkflowContext, WorkflowError, step, workflow};

const NAMESPACE: &str = "example-approval";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Expense {
    employee: String,
    cents: u64,
    /// How long an approver has.
    timeout_secs: u64,
}

/// A manager's decision on an expense.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Approval {
    approved: bool,
    by: String,
}

impl Event for Approval {
    const TOPIC: &'static str = "approval";
}

#[step]
async fn notify_approvers(employee: &str, cents: u64) -> Result<(), std::io::Error> {
    println!("  -> asking for approval of {employee}'s expense of {cents} cents");
    Ok(())
}

#[step]
async fn pay(employee: &str, cents: u64) -> Result<String, std::io::Error> {
    println!("  -> paying {cents} cents to {employee}");
    Ok(format!("paid {cents} cents to {employee}"))
}

/// Asks for approval, waits for it (parked, no worker slot held), then pays or not.
#[workflow(name = "expense", events(Approval))]
async fn expense(ctx: WorkflowContext, input: Expense) -> Result<String, WorkflowError> {
    notify_approvers(&input.employee, input.cents).await?;
    let timeout = Duration::from_secs(input.timeout_secs);
    match ctx.wait_for_event_timeout::<Approval>(timeout).await? {
        EventOutcome::Received(Approval { approved: true, by }) => {
            let paid = pay(&input.employee, input.cents).await?;
            Ok(format!("{paid} (approved by {by})"))
        }
        EventOutcome::Received(Approval { by, .. }) => Ok(format!("rejected by {by}")),
        EventOutcome::TimedOut => Ok("rejected: nobody approved in time".to_owned()),
    }
}

#[derive(Debug, Parser)]
#[command(name = "approval")]
struct App {
    #[command(subcommand)]
    command: Option<AppCommand>,
}

#[derive(Debug, Subcommand)]
enum AppCommand {
    /// Start a worker and an expense run, and wait for its result.
    Run {
        /// Wait for an approval from another terminal instead of sending one.
        #[arg(long)]
        wait: bool,
        /// How long the approver has.
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
    /// Approve (or reject) an expense run, from this process.
    Approve {
        /// The run id.
        run_id: Uuid,
        /// Who decides.
        #[arg(long, default_value = "ann")]
        by: String,
        /// Reject instead.
        #[arg(long)]
        reject: bool,
    },
    /// The operator command line (`tasks events send ...`, `tasks runs show ...`).
    Tasks(tasks::cli::TasksArgs),
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let app = App::parse();
    let command = app.command.unwrap_or(AppCommand::Run {
        wait: false,
        timeout_secs: 60,
    });
    if let AppCommand::Tasks(mut args) = command {
        args.namespace.get_or_insert_with(|| NAMESPACE.to_owned());
        return Ok(args
            .execute(&mut std::io::stdout(), &mut std::io::stderr())
            .await
            .into());
    }
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped(NAMESPACE)?;
    let client = Client::new(store.clone())?;
    match command {
        AppCommand::Approve { run_id, by, reject } => {
            let sent = client
                .send_event(
                    run_id,
                    &Approval {
                        approved: !reject,
                        by,
                    },
                )
                .await?;
            println!(
                "[approver process {}] sent {} to run {run_id} (woke it: {})",
                std::process::id(),
                if reject { "a rejection" } else { "an approval" },
                sent.woke
            );
        }
        AppCommand::Run { wait, timeout_secs } => {
            let worker = Worker::builder(store).build()?.spawn();
            let run = expense::start(
                &client,
                Expense {
                    employee: "grace".into(),
                    cents: 4_200,
                    timeout_secs,
                },
            )
            .await?;
            let id = run.id();
            println!("expense run {id} waits for an approval ({timeout_secs} s); approve with");
            println!("  cargo run --example approval -- approve {id} --by ann");
            println!(
                "  cargo run --example approval -- tasks events send approval --run {id} --payload '{{\"approved\": true, \"by\": \"ann\"}}'"
            );
            if !wait {
                tokio::time::sleep(Duration::from_millis(500)).await;
                println!(
                    "run is {} while it waits; approving from another process",
                    run.status().await?
                );
                let status = std::process::Command::new(std::env::current_exe()?)
                    .args(["approve", &id.to_string(), "--by", "ann"])
                    .status()?;
                assert!(status.success(), "the approver process failed");
            }
            println!("result: {}", run.result().await?);
            worker.shutdown().await;
        }
        AppCommand::Tasks(_) => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}
