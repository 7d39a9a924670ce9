//! Recovery: how long the runs of a worker process that is SIGKILLed wait before another
//! worker claims them (its heartbeat goes stale), with the other worker idle and with it
//! draining a backlog of [`BACKLOG`] pending runs, and what the heartbeat of an idle worker
//! costs in write transactions.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tasks::store::RunStore;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use tasks::postgres::PgStore;
use tasks::store::{CreateRun, Store};

use crate::Result;
use crate::db;
use crate::scaleout::WorkerProcess;
use crate::workflows::Hold;

/// Runs held by the worker that is killed, per kill.
const RUNS_PER_KILL: usize = 4;

/// Connections of each worker process (small: they hold few runs).
const POOL: u32 = 4;

/// Pending one-step runs in the namespace when the worker is killed, in the second half of
/// the scenario: the rescuer is draining them when the dead worker's runs become claimable.
pub const BACKLOG: usize = 10_000;

/// Figures of the recovery scenario.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryResult {
    /// Seconds from each SIGKILL until every run the killed worker held was running under
    /// another worker.
    pub reclaim_s: Vec<f64>,
    /// Median of `reclaim_s`.
    pub median_reclaim_s: f64,
    /// Largest of `reclaim_s`.
    pub max_reclaim_s: f64,
    /// The same, with [`BACKLOG`] pending runs that the rescuer is draining.
    pub backlog_reclaim_s: Vec<f64>,
    /// Median of `backlog_reclaim_s`.
    pub median_backlog_reclaim_s: f64,
    /// Largest of `backlog_reclaim_s`.
    pub max_backlog_reclaim_s: f64,
    /// The backlog of `backlog_reclaim_s`.
    pub backlog: usize,
    /// Pending runs still waiting when the dead worker's runs were all reclaimed, per kill
    /// behind the backlog: what the rescuer had not yet drained.
    pub backlog_left: Vec<i64>,
    /// Runs held by the killed worker, each time.
    pub runs_per_kill: usize,
    /// The lease of those runs (what recovery took before heartbeats), seconds.
    pub lease_s: f64,
    /// Heartbeat writes per second of one idle worker (one transaction each).
    pub idle_heartbeats_per_s: f64,
}

/// Kills a worker holding runs `kills` times and measures each reclaim, then measures an
/// idle worker's heartbeats for `idle` seconds.
pub async fn measure(
    url: &str,
    admin: &PgPool,
    kills: usize,
    idle: Duration,
) -> Result<RecoveryResult> {
    let mut reclaim_s = Vec::with_capacity(kills);
    let mut backlog_reclaim_s = Vec::with_capacity(kills);
    let mut backlog_left = Vec::with_capacity(kills);
    for backlog in [0, BACKLOG] {
        for kill in 0..kills {
            let namespace = db::namespace("recovery");
            let measured = reclaim_once(url, admin, &namespace, kill, backlog).await;
            db::cleanup(admin, &namespace).await?;
            let (seconds, left) = measured?;
            eprintln!(
                "recovery: kill {} reclaimed in {seconds:.2} s (backlog {backlog}, {left} left)",
                kill + 1
            );
            if backlog == 0 {
                reclaim_s.push(seconds);
            } else {
                backlog_reclaim_s.push(seconds);
                backlog_left.push(left);
            }
        }
    }
    let namespace = db::namespace("idle");
    let beats = idle_heartbeats(url, admin, &namespace, idle).await;
    db::cleanup(admin, &namespace).await?;
    Ok(RecoveryResult {
        median_reclaim_s: crate::stats::median(&reclaim_s),
        max_reclaim_s: reclaim_s.iter().copied().fold(0.0, f64::max),
        reclaim_s,
        median_backlog_reclaim_s: crate::stats::median(&backlog_reclaim_s),
        max_backlog_reclaim_s: backlog_reclaim_s.iter().copied().fold(0.0, f64::max),
        backlog_reclaim_s,
        backlog: BACKLOG,
        backlog_left,
        runs_per_kill: RUNS_PER_KILL,
        lease_s: 30.0,
        idle_heartbeats_per_s: beats?,
    })
}

async fn reclaim_once(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    kill: usize,
    backlog: usize,
) -> Result<(f64, i64)> {
    let store = PgStore::connect(url).await?.with_namespace(namespace)?;
    let mut runs = Vec::new();
    for _ in 0..RUNS_PER_KILL {
        let input = serde_json::to_value(Hold {
            steps: 1200,
            step_ms: 50,
        })?;
        runs.push(
            store
                .create_run(CreateRun {
                    input: Some(input),
                    ..CreateRun::new("bench-hold")
                })
                .await?
                .id,
        );
    }
    let mut victim = WorkerProcess::spawn(url, namespace, 10, POOL).await?;
    victim.expect("ready").await?;
    victim.say("go").await?;
    let holder = wait_for(Duration::from_secs(30), || async {
        let holders: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT worker_id FROM tasks.workflow_runs
              WHERE namespace = $1 AND id = ANY($3) AND status = 'running'
              GROUP BY worker_id HAVING count(*) = $2",
        )
        .bind(namespace)
        .bind(RUNS_PER_KILL as i64)
        .bind(&runs)
        .fetch_all(admin)
        .await?;
        Ok(match holders.as_slice() {
            [Some(holder)] => Some(holder.clone()),
            _ => None,
        })
    })
    .await?;
    // The backlog, older than nothing the victim holds: one-step runs, created at once.
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, version, status, attempts, input, available_at,
              created_at, updated_at)
         SELECT $1, gen_random_uuid(), 'bench-steps', NULL, 'pending', 0,
                '{\"steps\": 1}'::jsonb, now(), now() + (i || ' microseconds')::interval,
                now()
           FROM generate_series(1, $2) i",
    )
    .bind(namespace)
    .bind(backlog as i64)
    .execute(admin)
    .await?;
    let mut rescuer = WorkerProcess::spawn(url, namespace, 10, POOL).await?;
    rescuer.expect("ready").await?;
    rescuer.say("go").await?;
    // Kill at a different phase of the heartbeat each time.
    tokio::time::sleep(Duration::from_millis(500 + (kill as u64 * 377) % 1000)).await;
    let killed = Instant::now();
    victim.kill().await?;
    wait_for(Duration::from_secs(60), || async {
        let taken: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tasks.workflow_runs
              WHERE namespace = $1 AND id = ANY($3) AND status = 'running' AND worker_id <> $2",
        )
        .bind(namespace)
        .bind(&holder)
        .bind(&runs)
        .fetch_one(admin)
        .await?;
        Ok((taken == RUNS_PER_KILL as i64).then_some(()))
    })
    .await?;
    let seconds = killed.elapsed().as_secs_f64();
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks.workflow_runs WHERE namespace = $1 AND status = 'pending'",
    )
    .bind(namespace)
    .fetch_one(admin)
    .await?;
    // Interrupt the rescuer's runs at their next step so that it stops at once.
    for id in runs {
        store.lifecycle().unwrap().cancel_run(id).await?;
    }
    rescuer.stop().await?;
    store.pool().close().await;
    Ok((seconds, left))
}

/// Heartbeats per second of one idle worker, from the distinct `beat_at` values of its row
/// sampled every 20 ms.
async fn idle_heartbeats(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    window: Duration,
) -> Result<f64> {
    let mut worker = WorkerProcess::spawn(url, namespace, 10, POOL).await?;
    worker.expect("ready").await?;
    worker.say("go").await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut beats = BTreeSet::new();
    let started = Instant::now();
    while started.elapsed() < window {
        let beat: Option<DateTime<Utc>> =
            sqlx::query_scalar("SELECT max(beat_at) FROM tasks.workers WHERE namespace = $1")
                .bind(namespace)
                .fetch_one(admin)
                .await?;
        beats.extend(beat);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.stop().await?;
    let (Some(first), Some(last)) = (beats.first(), beats.last()) else {
        return Err("the idle worker wrote no heartbeat".into());
    };
    let span = db::seconds(*first, *last);
    if beats.len() < 2 || span <= 0.0 {
        return Err("too few heartbeats to measure".into());
    }
    Ok((beats.len() - 1) as f64 / span)
}

/// Evaluates `check` every 20 ms until it gives `Some`, for up to `within`.
async fn wait_for<T, F, Fut>(within: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if started.elapsed() > within {
            return Err(format!("not reached within {within:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
