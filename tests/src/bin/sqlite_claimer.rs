//! A claimer process for the multi-process SQLite test: it claims runs from one database
//! file, printing what it claimed.
//!
//! Usage: `sqlite_claimer <database-path> <namespace> <worker-id>`
//!
//! It prints `ready` once connected and waits for a line on stdin (so that several claimers
//! start together). Then, for every run it claims, it prints `claimed <run-id> <attempt>`,
//! pauses briefly (standing for the work) and fails a first attempt (to be retried at once,
//! by whichever process claims it next) or completes a later one with a step. It prints
//! `done <count>` and exits when no run is pending or running any more.

use std::io::{BufRead, Write};
use std::time::Duration;
use tasks::store::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks::sqlite::SqliteStore;
use tasks::store::{CreateStepAttempt, FailRun};
use tasks::{ListRuns, RunStatus, StepKind};
use uuid::Uuid;

/// How long an attempt "works" between its claim and its outcome.
const WORK: Duration = Duration::from_millis(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(namespace), Some(worker)) = (args.next(), args.next(), args.next())
    else {
        return Err("usage: sqlite_claimer <database-path> <namespace> <worker-id>".into());
    };
    let store = SqliteStore::open(&path).await?.with_namespace(namespace)?;

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;

    let mut count = 0usize;
    for batch in (1..=4).cycle() {
        let claimed = store
            .claim_runs(&worker, Duration::from_secs(300), batch)
            .await?;
        if claimed.is_empty() {
            let live = store
                .list_runs(ListRuns {
                    statuses: vec![RunStatus::Pending, RunStatus::Running],
                    limit: Some(1),
                    ..ListRuns::default()
                })
                .await?;
            if live.data.is_empty() {
                break;
            }
            // Another process holds a run it may still give back for a retry.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        for claimed in claimed {
            let holder = claimed.holder();
            let run = claimed.run;
            writeln!(stdout, "claimed {} {}", run.id, run.attempts)?;
            // The work of the attempt, outside any transaction. SQLite's lock is not fair: a
            // process that takes it again the moment it lets go can starve the other one,
            // which only polls for it, and this pause is what a real worker leaves free.
            tokio::time::sleep(WORK).await;
            if run.attempts == 1 {
                store
                    .fail_run(FailRun {
                        run_id: run.id,
                        holder: holder.clone(),
                        error: json!({ "message": "first attempt fails", "by": worker }),
                        force: false,
                    })
                    .await?;
            } else {
                let step = store
                    .create_step_attempt(CreateStepAttempt {
                        id: Uuid::now_v7(),
                        run_id: run.id,
                        holder: holder.clone(),
                        step_name: "work".into(),
                        kind: StepKind::Function,
                        config: json!({}),
                        context: None,
                    })
                    .await?;
                store
                    .complete_step_attempt(run.id, step.id, &holder, json!(run.attempts))
                    .await?;
                store
                    .complete_run(run.id, &holder, json!({ "by": worker }))
                    .await?;
            }
            count += 1;
        }
        stdout.flush()?;
    }
    writeln!(stdout, "done {count}")?;
    stdout.flush()?;
    Ok(())
}
