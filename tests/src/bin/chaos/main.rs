//! The chaos run of `scripts/chaos.sh`, against a Postgres cluster of its own (the script
//! creates it, restarts it, drops it). Three scenarios at once, then their checks:
//!
//! * **Kills** (namespace `chaos-…`): four worker processes drain 200 runs of 20 logged
//!   steps while a random one is SIGKILLed every 2–4 s for a minute (and replaced), and
//!   Postgres is restarted once half-way. At least ten of the kills must hit a worker
//!   holding runs.
//! * **Composed primitives** (the same namespace, so under the same kills and restart):
//!   40 runs that start three children, wait for events sent before and after their waits
//!   began (each send repeated with its deduplication key) and publish state (`composed.rs`).
//! * **A freeze** (namespace `chaos-freeze-…`, which no kill or restart touches while it is
//!   watched): a worker is SIGSTOPped past its lease and its heartbeat's staleness, its runs
//!   are taken over, then it is SIGCONTed; resumed, it must begin no step body of a run it
//!   lost and get no write on one through (`freeze.rs`).
//!
//! Every run must complete, no step may be recorded twice, and no step body may begin after
//! its record existed (`checks.rs`); every failed check is printed and the exit status is
//! non-zero.
//!
//! Usage:
//! * `chaos run <database-url> <restart-command>`: the orchestrator. `<restart-command>` is
//!   run with `sh -c` once, half-way through the kills and after the freeze was watched
//!   (empty: no restart).
//! * `chaos worker <database-url> <namespace>`: one worker process (started by `run`).
//!
//! Every step execution inserts a row into `tasks_chaos.executions` with the worker's
//! process id and the time its body began, so that an execution can be compared with the
//! creation time of the step's record and attributed to a worker.

mod checks;
mod composed;
mod freeze;
mod workers;
mod workflows;

use std::time::{Duration, Instant};

use sqlx::PgPool;
use tasks::postgres::PgStore;
use tasks::store::{CreateRun, RunStore, Store};
use tasks::{Client, RunStatus};
use uuid::Uuid;

use checks::{Observed, all_runs};
use workers::Process;
use workflows::{EXECUTIONS_DDL, StepsInput, random};

const WORKERS: usize = 4;
const RUNS: usize = 280;
const STEPS: u32 = 20;
/// Below the composed runs and their children, so that those run during the kills rather
/// than after this backlog.
const STEPS_PRIORITY: i32 = -1;
const CHAOS_FOR: Duration = Duration::from_secs(60);
/// Kills hit a random worker this often (in milliseconds): at least 15 in a minute.
const KILL_EVERY: std::ops::Range<u64> = 2_000..4_000;
const KILLS_AT_LEAST: usize = 10;
const DRAIN_WITHIN: Duration = Duration::from_secs(45);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["worker", url, namespace] => workers::work(url, namespace).await,
        ["run", url, restart] => orchestrate(url, restart).await,
        _ => Err("usage: chaos run <database-url> <restart-command> | chaos worker <database-url> <namespace>".into()),
    }
}

async fn orchestrate(url: &str, restart: &str) -> Result<(), Box<dyn std::error::Error>> {
    let began = Instant::now();
    let admin = PgPool::connect(url).await?;
    PgStore::new(admin.clone()).migrate().await?;
    sqlx::raw_sql(EXECUTIONS_DDL).execute(&admin).await?;
    let store = PgStore::new(admin.clone()).with_namespace(format!("chaos-{}", Uuid::new_v4()))?;
    let freeze_store =
        PgStore::new(admin.clone()).with_namespace(format!("chaos-freeze-{}", Uuid::new_v4()))?;
    let client = Client::new(store.clone())?;

    let (parents, early_sends) = composed::start(&store, &client).await?;
    let mut runs: Vec<Uuid> = parents.iter().map(|parent| parent.id).collect();
    for _ in 0..RUNS {
        let input = serde_json::to_value(StepsInput { steps: STEPS })?;
        let run = store
            .create_run(CreateRun {
                input: Some(input),
                priority: STEPS_PRIORITY,
                ..CreateRun::new("chaos-steps")
            })
            .await?;
        runs.push(run.id);
    }
    let freeze_runs = freeze::create_runs(&freeze_store).await?;
    println!(
        "chaos: {RUNS} runs of {STEPS} steps and {} composed runs in {}; {} runs of {} steps \
         in {}",
        parents.len(),
        store.namespace(),
        freeze_runs.len(),
        freeze::STEPS,
        freeze_store.namespace()
    );

    let mut workers: Vec<Process> = (0..WORKERS)
        .map(|_| Process::start(url, store.namespace()))
        .collect::<Result<_, _>>()?;
    let freeze = tokio::spawn({
        let (url, freeze_store) = (url.to_owned(), freeze_store.clone());
        async move { freeze::run(&url, &freeze_store).await }
    });
    let late_sends = tokio::spawn(composed::send_late(
        client,
        store.clone(),
        parents.clone(),
        Instant::now() + CHAOS_FOR + DRAIN_WITHIN,
    ));

    let mut kills = 0;
    let mut kills_of_holders = 0;
    let mut restarted = restart.trim().is_empty();
    let chaos_began = Instant::now();
    while chaos_began.elapsed() < CHAOS_FOR {
        tokio::time::sleep(Duration::from_millis(random(KILL_EVERY))).await;
        let victim = workers.swap_remove(random(0..workers.len() as u64) as usize);
        let held = held_runs(&store, &victim.worker_id()).await;
        victim.kill()?;
        kills += 1;
        if held > 0 {
            kills_of_holders += 1;
        }
        workers.push(Process::start(url, store.namespace())?);
        if !restarted && chaos_began.elapsed() > CHAOS_FOR / 2 && freeze.is_finished() {
            restart_postgres(&store, restart).await?;
            restarted = true;
        }
    }
    let (freeze_workers, frozen) = freeze.await?;
    if !restarted {
        restart_postgres(&store, restart).await?;
    }
    println!(
        "chaos: {kills} workers SIGKILLed, {kills_of_holders} of them holding runs; waiting for \
         the runs to drain"
    );

    // The admin pool may have lost its connections in the restart: a fresh one.
    let admin = PgPool::connect(url).await?;
    let store = PgStore::new(admin.clone()).with_namespace(store.namespace())?;
    let freeze_store = PgStore::new(admin.clone()).with_namespace(freeze_store.namespace())?;
    let drained = Instant::now();
    loop {
        let open = open_runs(&store)
            .await
            .saturating_add(open_runs(&freeze_store).await);
        if open == 0 {
            break;
        }
        if drained.elapsed() > DRAIN_WITHIN {
            println!("chaos: {open} runs still open after {DRAIN_WITHIN:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let drained_in = drained.elapsed();
    drop(workers);
    drop(freeze_workers);
    let mut sent = early_sends;
    sent.extend(late_sends.await?);

    let mut failures = Vec::new();
    let observed = Observed::read(&admin, &store).await?;
    let tally = checks::every_run(&observed, &runs, &mut failures);
    composed::check(&observed, &store, &parents, &sent, &mut failures).await?;
    let freeze_observed = Observed::read(&admin, &freeze_store).await?;
    let freeze_tally = checks::every_run(&freeze_observed, &freeze_runs, &mut failures);
    match frozen {
        Ok(frozen) => freeze::check(&freeze_observed, &frozen, &mut failures),
        Err(error) => failures.push(format!("freeze: {error}")),
    }
    if kills_of_holders < KILLS_AT_LEAST {
        failures.push(format!(
            "only {kills_of_holders} of the {kills} kills hit a worker holding runs (at least \
             {KILLS_AT_LEAST} wanted)"
        ));
    }
    println!(
        "chaos: {} runs and {} step records checked; {} logged steps ran more than once before \
         their record existed (in flight at a kill, a freeze or a failed attempt: allowed)",
        tally.runs + freeze_tally.runs,
        tally.records + freeze_tally.records,
        tally.reexecuted_in_flight + freeze_tally.reexecuted_in_flight
    );
    println!(
        "chaos: {kills} kills ({kills_of_holders} of workers holding runs), restart {}, drained \
         in {:.0} s, {:.0} s in all",
        if restart.trim().is_empty() {
            "skipped"
        } else {
            "done"
        },
        drained_in.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        println!(
            "chaos: OK: no lost run, no step recorded twice, no step body begun after its \
             record, none begun by a resumed worker on a run it lost"
        );
        Ok(())
    } else {
        for failure in &failures {
            println!("chaos: FAILED: {failure}");
        }
        Err(format!("{} checks failed", failures.len()).into())
    }
}

async fn restart_postgres(
    store: &PgStore,
    restart: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "chaos: restarting Postgres with {} runs open: {restart}",
        open_runs(store).await
    );
    let status = std::process::Command::new("sh")
        .args(["-c", restart])
        .status()?;
    if !status.success() {
        return Err(format!("the restart exited with {status}").into());
    }
    Ok(())
}

/// The runs of `store`'s namespace not finished yet (`usize::MAX` when it cannot tell).
async fn open_runs(store: &PgStore) -> usize {
    all_runs(
        store,
        vec![
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Sleeping,
            RunStatus::Paused,
        ],
    )
    .await
    .map_or(usize::MAX, |runs| runs.len())
}

/// How many runs `worker_id` holds (0 when it cannot tell).
async fn held_runs(store: &PgStore, worker_id: &str) -> usize {
    all_runs(store, vec![RunStatus::Running])
        .await
        .map_or(0, |runs| {
            runs.iter()
                .filter(|run| run.worker_id.as_deref() == Some(worker_id))
                .count()
        })
}
