//! The freeze, in a namespace of its own that no kill or restart touches while it is
//! watched: one of three workers is stopped (`SIGSTOP`) past its lease and its heartbeat's
//! staleness, the other two take its runs over, then it is resumed (`SIGCONT`). Resumed, it
//! must begin no step body of a run it lost, and every write it tries on one must be
//! refused (a record it held from before the stop, a completion).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tasks::RunStatus;
use tasks::postgres::PgStore;
use tasks::store::{CreateRun, RunStore, Store};
use uuid::Uuid;

use crate::checks::{Observed, all_runs};
use crate::workers::{LEASE, Process};
use crate::workflows::{StepsInput, logged_step_name};

pub const WORKERS: usize = 3;
/// With three workers of eight slots, about 45 s of work: the victim holds runs
/// when it is stopped, and there is work left for it when it is resumed.
pub const RUNS: usize = 60;
pub const STEPS: u32 = 20;
/// Comfortably past the workers' lease (5 s) and their heartbeat's staleness (3 s): the
/// runs are taken over on the stale heartbeat, and at the resume the lease the victim last
/// extended has run out too, so nothing it remembers lets it skip the check of its hold.
pub const FREEZE_FOR: Duration = Duration::from_secs(12);
/// How long the resumed worker is watched: its runs in flight reach their next step (or
/// their completion) within a second of the resume.
pub const WATCH_FOR: Duration = Duration::from_secs(5);
/// The victim is stopped once its runs are well under way.
const FREEZE_AFTER: Duration = Duration::from_secs(5);
/// Runs the victim holds at least when it is stopped.
const HELD_AT_LEAST: usize = 2;

/// What the freeze did, for the checks.
#[derive(Debug)]
pub struct Frozen {
    pub pid: u32,
    pub stopped_at: DateTime<Utc>,
    pub continued_at: DateTime<Utc>,
    pub watched_until: DateTime<Utc>,
    /// The runs the victim held when it was stopped.
    pub held: Vec<Uuid>,
    /// Those another worker had taken over (or finished) when it was resumed.
    pub lost: Vec<Uuid>,
    /// Those of the lost runs the victim held again at the end of the watch (claimed
    /// anew, which only a dead holder would allow): not checked.
    pub reclaimed: Vec<Uuid>,
}

/// Creates the freeze's runs.
pub async fn create_runs(store: &PgStore) -> Result<Vec<Uuid>, Box<dyn std::error::Error>> {
    let mut runs = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let input = serde_json::to_value(StepsInput { steps: STEPS })?;
        let run = store
            .create_run(CreateRun {
                input: Some(input),
                ..CreateRun::new("chaos-paced")
            })
            .await?;
        runs.push(run.id);
    }
    Ok(runs)
}

/// Starts the namespace's workers, freezes one, and returns them (to be dropped once the
/// runs drained) with what happened.
pub async fn run(
    url: &str,
    store: &PgStore,
) -> (
    Vec<Process>,
    Result<Frozen, Box<dyn std::error::Error + Send + Sync>>,
) {
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        match Process::start(url, store.namespace()) {
            Ok(worker) => workers.push(worker),
            Err(error) => return (workers, Err(error.into())),
        }
    }
    let frozen = freeze(store, &workers[0]).await;
    // Resumed whatever happened, so that the runs drain.
    let _ = workers[0].signal("-CONT");
    (workers, frozen)
}

async fn freeze(
    store: &PgStore,
    victim: &Process,
) -> Result<Frozen, Box<dyn std::error::Error + Send + Sync>> {
    let victim_id = victim.worker_id();
    tokio::time::sleep(FREEZE_AFTER).await;
    let waiting = Instant::now();
    while held_by(store, &victim_id).await?.len() < HELD_AT_LEAST {
        if waiting.elapsed() > Duration::from_secs(30) {
            return Err(format!("the victim never held {HELD_AT_LEAST} runs").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    victim.signal("-STOP")?;
    let stopped_at = Utc::now();
    // Writes it sent just before the stop may still commit.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = held_by(store, &victim_id).await?;
    println!(
        "chaos: freeze: worker {} stopped holding {} runs, for {FREEZE_FOR:?} (lease {LEASE:?})",
        victim.pid(),
        held.len()
    );
    tokio::time::sleep(FREEZE_FOR).await;
    let still_held: HashSet<Uuid> = held_by(store, &victim_id).await?.into_iter().collect();
    let lost: Vec<Uuid> = held
        .iter()
        .copied()
        .filter(|run| !still_held.contains(run))
        .collect();
    let continued_at = Utc::now();
    victim.signal("-CONT")?;
    println!(
        "chaos: freeze: {} of its runs taken over; resumed, watched for {WATCH_FOR:?}",
        lost.len()
    );
    tokio::time::sleep(WATCH_FOR).await;
    let held_again: HashSet<Uuid> = held_by(store, &victim_id).await?.into_iter().collect();
    let watched_until = Utc::now();
    let reclaimed = lost
        .iter()
        .copied()
        .filter(|run| held_again.contains(run))
        .collect();
    Ok(Frozen {
        pid: victim.pid(),
        stopped_at,
        continued_at,
        watched_until,
        held,
        lost,
        reclaimed,
    })
}

/// The runs `worker_id` holds.
async fn held_by(store: &PgStore, worker_id: &str) -> Result<Vec<Uuid>, tasks::StoreError> {
    Ok(all_runs(store, vec![RunStatus::Running])
        .await?
        .into_iter()
        .filter(|run| run.worker_id.as_deref() == Some(worker_id))
        .map(|run| run.id)
        .collect())
}

/// The freeze's own promises, on top of those of every run: some runs were taken over;
/// between the resume and the end of the watch, the resumed worker began no step body of a
/// run it lost, and no step of one was recorded from its word (a record whose body no other
/// worker had begun before it).
pub fn check(observed: &Observed, frozen: &Frozen, failures: &mut Vec<String>) {
    let pid = i64::from(frozen.pid);
    if frozen.lost.is_empty() {
        failures.push(format!(
            "freeze: none of the {} runs of the stopped worker was taken over in {FREEZE_FOR:?}",
            frozen.held.len()
        ));
    }
    let watched = |at: DateTime<Utc>| at > frozen.continued_at && at <= frozen.watched_until;
    let mut in_flight = 0;
    let mut between_steps = 0;
    for run_id in frozen
        .lost
        .iter()
        .filter(|run| !frozen.reclaimed.contains(run))
    {
        for ((id, index), executions) in &observed.executions {
            if id != run_id {
                continue;
            }
            let name = logged_step_name(*index);
            for execution in executions.iter().filter(|execution| execution.pid == pid) {
                if watched(execution.started_at) {
                    failures.push(format!(
                        "freeze: the resumed worker began step {name} of run {run_id}, which it \
                         had lost, at {} (resumed at {})",
                        execution.started_at, frozen.continued_at
                    ));
                } else if execution.started_at <= frozen.stopped_at {
                    in_flight += 1;
                }
            }
            let Some(record) = observed.record(*run_id, &name) else {
                continue;
            };
            let begun_elsewhere = executions
                .iter()
                .any(|execution| execution.pid != pid && execution.started_at < record.created_at);
            if watched(record.created_at) && !begun_elsewhere {
                failures.push(format!(
                    "freeze: step {name} of run {run_id}, lost by the stopped worker, was \
                     recorded at {} from its execution alone: its late write went through",
                    record.created_at
                ));
            }
        }
    }
    for run_id in &frozen.lost {
        let last_begun = observed
            .executions
            .iter()
            .filter(|((id, _), executions)| {
                id == run_id
                    && executions.iter().any(|execution| {
                        execution.pid == pid && execution.started_at <= frozen.stopped_at
                    })
            })
            .map(|((_, index), _)| *index)
            .max();
        let recorded_before_stop = last_begun
            .and_then(|index| observed.record(*run_id, &logged_step_name(index)))
            .is_some_and(|record| record.created_at <= frozen.stopped_at);
        if recorded_before_stop {
            between_steps += 1;
        }
    }
    let after_resume = observed
        .executions
        .values()
        .flatten()
        .filter(|execution| execution.pid == pid && execution.started_at > frozen.continued_at)
        .count();
    println!(
        "chaos: freeze: {} runs held at the stop, {} taken over, {} claimed again by the \
         resumed worker (not checked), {between_steps} of them stopped between two steps (at \
         the resume, only the check of its hold stood before their next body); it had begun \
         {in_flight} step bodies of the lost runs before the stop, and began {after_resume} of \
         other runs after the resume",
        frozen.held.len(),
        frozen.lost.len(),
        frozen.reclaimed.len()
    );
}
