//! The chaos run of `scripts/chaos.sh`: several worker processes drain runs on Postgres while
//! workers are SIGKILLed on a timer and Postgres is restarted once; then it checks that no
//! run was lost, no step was recorded twice, and no step ran again after its record existed.
//!
//! Usage:
//! * `chaos run <database-url> <restart-command>`: the orchestrator. `<restart-command>` is
//!   run with `sh -c` once, a third of the way through (empty: no restart). Exits non-zero
//!   when a check fails.
//! * `chaos worker <database-url> <namespace>`: one worker process (started by `run`).
//!
//! Every step execution inserts a row into `tasks_chaos.executions` (with the database's
//! `clock_timestamp()`) before it does anything else, so that an execution can be compared
//! with the creation time of the step's record.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tasks::{RunStore, StepStore};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection, PgPool};
use tasks::postgres::PgStore;
use tasks::{
    CreateRun, ListRuns, RunStatus, StepStatus, Worker, WorkflowContext, WorkflowError, step,
    workflow,
};
use uuid::Uuid;

const WORKERS: usize = 4;
const RUNS: usize = 200;
const STEPS: u32 = 20;
/// Runs each worker process executes at once: with the step times below, the runs take
/// about a minute to drain, so the kills and the restart hit work in flight.
const CONCURRENCY: usize = 8;
/// The whole run, checks included, stays under two minutes.
const CHAOS_FOR: Duration = Duration::from_secs(45);
const DRAIN_WITHIN: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct ChaosInput {
    database_url: String,
    steps: u32,
}

/// Logs its execution, then takes a little while.
#[step(retry(max_attempts = 30, initial_interval = "200ms", backoff = 1.5))]
async fn logged(
    database_url: &str,
    run_id: Uuid,
    index: u32,
) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    // Boxed: a step's final error is replayed, and `sqlx::Error` cannot be rebuilt.
    let mut conn = PgConnection::connect(database_url).await?;
    sqlx::query("INSERT INTO tasks_chaos.executions (run_id, step_index) VALUES ($1, $2)")
        .bind(run_id)
        .bind(index as i32)
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let millis = random(100..500);
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(index)
}

#[workflow(name = "chaos-steps")]
async fn chaos_steps(ctx: WorkflowContext, input: ChaosInput) -> Result<u32, WorkflowError> {
    for index in 0..input.steps {
        logged(&input.database_url, ctx.run_id(), index)
            .await
            .map_err(WorkflowError::from_boxed)?;
    }
    Ok(input.steps)
}

/// A random number in `range` (the crate has no RNG dependency; v4 UUIDs are random).
fn random(range: std::ops::Range<u64>) -> u64 {
    range.start + (Uuid::new_v4().as_u128() as u64) % (range.end - range.start)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["worker", url, namespace] => worker(url, namespace).await,
        ["run", url, restart] => orchestrate(url, restart).await,
        _ => Err("usage: chaos run <database-url> <restart-command> | chaos worker <database-url> <namespace>".into()),
    }
}

async fn worker(url: &str, namespace: &str) -> Result<(), Box<dyn std::error::Error>> {
    let store = PgStore::connect(url).await?.with_namespace(namespace)?;
    let worker = Worker::builder(store).concurrency(CONCURRENCY).build()?;
    worker.run_until_ctrl_c().await?;
    Ok(())
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_worker(url: &str, namespace: &str) -> Result<Process, std::io::Error> {
    Command::new(std::env::current_exe()?)
        .args(["worker", url, namespace])
        .stdout(Stdio::null())
        .spawn()
        .map(Process)
}

async fn orchestrate(url: &str, restart: &str) -> Result<(), Box<dyn std::error::Error>> {
    let began = Instant::now();
    let admin = PgPool::connect(url).await?;
    let store = PgStore::new(admin.clone());
    store.migrate().await?;
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS tasks_chaos;
         CREATE TABLE IF NOT EXISTS tasks_chaos.executions (
             run_id UUID NOT NULL, step_index INTEGER NOT NULL,
             executed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());",
    )
    .execute(&admin)
    .await?;
    let namespace = format!("chaos-{}", Uuid::new_v4());
    let store = store.with_namespace(&namespace)?;
    let mut runs = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let input = serde_json::to_value(ChaosInput {
            database_url: url.to_owned(),
            steps: STEPS,
        })?;
        runs.push(
            store
                .create_run(CreateRun {
                    input: Some(input),
                    ..CreateRun::new("chaos-steps")
                })
                .await?
                .id,
        );
    }
    println!("chaos: {RUNS} runs of {STEPS} steps in namespace {namespace}");

    let mut workers: Vec<Process> = (0..WORKERS)
        .map(|_| spawn_worker(url, &namespace))
        .collect::<Result<_, _>>()?;
    let mut kills = 0;
    let mut restarted = restart.trim().is_empty();
    let chaos_began = Instant::now();
    while chaos_began.elapsed() < CHAOS_FOR {
        tokio::time::sleep(Duration::from_millis(random(2_000..5_000))).await;
        let victim = random(0..workers.len() as u64) as usize;
        let mut killed = workers.swap_remove(victim);
        killed.0.kill()?;
        killed.0.wait()?;
        kills += 1;
        workers.push(spawn_worker(url, &namespace)?);
        if !restarted && chaos_began.elapsed() > CHAOS_FOR / 3 {
            let open = open_runs(&store).await.unwrap_or(usize::MAX);
            println!("chaos: restarting Postgres with {open} runs open: {restart}");
            let status = Command::new("sh").args(["-c", restart]).status()?;
            println!("chaos: restart exited with {status}");
            restarted = true;
        }
    }
    println!(
        "chaos: {kills} workers killed; waiting for the {} open runs to drain",
        open_runs(&store).await.unwrap_or(usize::MAX)
    );

    // The admin pool may have lost its connections in the restart: a fresh one.
    let admin = PgPool::connect(url).await?;
    let store = PgStore::new(admin.clone()).with_namespace(&namespace)?;
    let drained = Instant::now();
    loop {
        let open = open_runs(&store).await.unwrap_or(usize::MAX);
        if open == 0 {
            break;
        }
        if drained.elapsed() > DRAIN_WITHIN {
            println!("chaos: {open} runs still open after {DRAIN_WITHIN:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(workers);

    let failures = check(&admin, &store, &runs).await?;
    sqlx::query("DELETE FROM tasks_chaos.executions WHERE run_id = ANY($1)")
        .bind(&runs)
        .execute(&admin)
        .await?;
    println!(
        "chaos: {kills} kills, restart {}, {:.0} s in all",
        if restart.trim().is_empty() {
            "skipped"
        } else {
            "done"
        },
        began.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        println!(
            "chaos: OK: no lost run, no double completion, no step re-executed after its record"
        );
        Ok(())
    } else {
        for failure in &failures {
            println!("chaos: FAILED: {failure}");
        }
        Err(format!("{} checks failed", failures.len()).into())
    }
}

async fn open_runs(store: &PgStore) -> Result<usize, tasks::StoreError> {
    let page = store
        .list_runs(ListRuns {
            limit: Some(1000),
            ..Default::default()
        })
        .await?;
    Ok(page
        .data
        .iter()
        .filter(|run| !run.status.is_terminal())
        .count())
}

/// Every check; returns what failed.
async fn check(
    admin: &PgPool,
    store: &PgStore,
    runs: &[Uuid],
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut failures = Vec::new();
    let executions: Vec<(Uuid, i32, DateTime<Utc>)> = sqlx::query_as(
        "SELECT run_id, step_index, executed_at FROM tasks_chaos.executions WHERE run_id = ANY($1)",
    )
    .bind(runs)
    .fetch_all(admin)
    .await?;
    let mut executed: HashMap<(Uuid, i32), Vec<DateTime<Utc>>> = HashMap::new();
    for (run, index, at) in executions {
        executed.entry((run, index)).or_default().push(at);
    }
    let mut reexecuted_in_flight = 0;
    for &run_id in runs {
        let Some(run) = store.get_run(run_id).await? else {
            failures.push(format!("run {run_id} is gone"));
            continue;
        };
        if run.status != RunStatus::Completed {
            failures.push(format!(
                "run {run_id} is {} (lost): {:?}",
                run.status, run.error
            ));
        }
        let history = store.step_history(run_id).await?;
        for index in 0..STEPS as i32 {
            let name = if index == 0 {
                "logged".to_owned()
            } else {
                format!("logged:{index}")
            };
            let completed: Vec<_> = history
                .iter()
                .filter(|step| step.step_name == name && step.status == StepStatus::Completed)
                .collect();
            if completed.len() > 1 {
                failures.push(format!(
                    "run {run_id}: step {name} completed {} times",
                    completed.len()
                ));
            }
            let Some(record) = completed.first() else {
                if run.status == RunStatus::Completed {
                    failures.push(format!(
                        "run {run_id}: completed without a record of {name}"
                    ));
                }
                continue;
            };
            let runs_of_step = executed.get(&(run_id, index)).cloned().unwrap_or_default();
            let after = runs_of_step
                .iter()
                .filter(|at| **at > record.created_at)
                .count();
            if after > 0 {
                failures.push(format!(
                    "run {run_id}: step {name} executed {after} times after its record of {}",
                    record.created_at
                ));
            }
            if runs_of_step.len() > 1 {
                reexecuted_in_flight += 1;
            }
        }
    }
    println!(
        "chaos: {} runs checked; {reexecuted_in_flight} steps ran more than once before their \
         record existed (in flight at a kill or a failed attempt: allowed)",
        runs.len()
    );
    Ok(failures)
}
