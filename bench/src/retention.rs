//! Retention: how fast `RetentionStore::purge_runs` deletes old runs while a drain runs,
//! and what the purge costs the drain: the same drain alone and beside a purge, in the
//! same run, interleaved round by round.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sqlx::postgres::PgPool;
use tasks::postgres::PgStore;
use tasks::store::Store;
use tasks::{CancellationToken, Client, PurgeRuns, Worker};

use crate::Result;
use crate::db;
use crate::engine::ENQUEUE_CONCURRENCY;
use crate::stats::median;
use crate::workflows::{Steps, bench_steps};

/// Longest a drain may take before the benchmark gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Step attempts of each old run, and events of each.
const OLD_STEPS: i64 = 4;
const OLD_EVENTS: i64 = 1;

/// Everything the retention scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionResult {
    /// Worker concurrency of the drains.
    pub concurrency: usize,
    /// Runs per drain.
    pub runs: usize,
    /// Steps per run of the drain.
    pub steps_per_run: u32,
    /// Finished runs seeded for the purge, each with [`OLD_STEPS`] steps and
    /// [`OLD_EVENTS`] event.
    pub old_runs: usize,
    /// Runs per purge batch (one transaction each).
    pub batch_size: u32,
    /// Median steps/s of the drain alone.
    pub alone_steps_per_s: f64,
    /// Every round's.
    pub samples_alone: Vec<f64>,
    /// Median steps/s of the drain while a purge runs in another namespace.
    pub with_purge_steps_per_s: f64,
    /// Every round's.
    pub samples_with_purge: Vec<f64>,
    /// How much slower the drain was beside the purge, in % of the drain alone.
    pub drop_percent: f64,
    /// Median runs purged per second while the drain ran.
    pub purged_runs_per_s: f64,
    /// The same in rows (runs, steps and events).
    pub purged_rows_per_s: f64,
    /// Every round's runs/s.
    pub samples_purged_runs_per_s: Vec<f64>,
    /// Whether the purge still had runs left when every drain ended (so it ran throughout).
    pub purge_outlasted_drains: bool,
}

/// What one drain measured.
struct Drained {
    steps_per_s: f64,
    /// Runs purged and seconds spent, when a purge ran beside it.
    purged: Option<(u64, f64, bool)>,
}

/// Drains `runs` × `steps` alone and beside a purge of `old_runs` old runs, `rounds` times
/// interleaved.
pub async fn measure(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: u32,
    rounds: usize,
    concurrency: usize,
    old_runs: usize,
) -> Result<RetentionResult> {
    let batch_size = tasks::store::retention::DEFAULT_PURGE_BATCH;
    let (mut alone, mut beside, mut purge_rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut outlasted = true;
    for round in 1..=rounds {
        eprintln!("retention: drain alone (round {round})");
        let namespace = db::namespace("retention-alone");
        let measured = drain(url, admin, &namespace, runs, steps, concurrency, None).await;
        db::cleanup(admin, &namespace).await?;
        alone.push(measured?.steps_per_s);

        eprintln!("retention: seeding {old_runs} finished runs (round {round})");
        let old = db::namespace("retention-old");
        seed(admin, &old, old_runs).await?;
        eprintln!("retention: drain beside a purge (round {round})");
        let namespace = db::namespace("retention-drain");
        let purge = Some((old.as_str(), batch_size));
        let measured = drain(url, admin, &namespace, runs, steps, concurrency, purge).await;
        db::cleanup(admin, &namespace).await?;
        db::cleanup(admin, &old).await?;
        let measured = measured?;
        beside.push(measured.steps_per_s);
        if let Some((purged, seconds, left)) = measured.purged {
            purge_rates.push(purged as f64 / seconds);
            outlasted &= left;
        }
    }
    let alone_median = median(&alone);
    let beside_median = median(&beside);
    let purged = median(&purge_rates);
    Ok(RetentionResult {
        concurrency,
        runs,
        steps_per_run: steps,
        old_runs,
        batch_size,
        alone_steps_per_s: alone_median,
        samples_alone: alone,
        with_purge_steps_per_s: beside_median,
        samples_with_purge: beside,
        drop_percent: (1.0 - beside_median / alone_median) * 100.0,
        purged_runs_per_s: purged,
        purged_rows_per_s: purged * (1 + OLD_STEPS + OLD_EVENTS) as f64,
        samples_purged_runs_per_s: purge_rates,
        purge_outlasted_drains: outlasted,
    })
}

/// Inserts `runs` runs of `namespace` that completed a day ago, each with its steps and
/// events, as a namespace with a long history looks.
async fn seed(admin: &PgPool, namespace: &str, runs: usize) -> Result<()> {
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, attempts, output, started_at, finished_at,
              created_at, updated_at)
         SELECT $1, gen_random_uuid(), 'bench_steps', 'completed', 1, '4'::jsonb,
                now() - interval '1 day', now() - interval '1 day',
                now() - interval '1 day', now() - interval '1 day'
           FROM generate_series(1, $2)",
    )
    .bind(namespace)
    .bind(runs as i64)
    .execute(admin)
    .await?;
    sqlx::query(
        "INSERT INTO tasks.step_attempts
             (namespace, id, workflow_run_id, step_name, kind, status, output, started_at,
              finished_at, created_at, updated_at)
         SELECT r.namespace, gen_random_uuid(), r.id, 'step-' || s, 'function', 'completed',
                to_jsonb(s), r.started_at, r.finished_at, r.created_at, r.updated_at
           FROM tasks.workflow_runs r, generate_series(1, $2) s
          WHERE r.namespace = $1",
    )
    .bind(namespace)
    .bind(OLD_STEPS)
    .execute(admin)
    .await?;
    sqlx::query(
        "INSERT INTO tasks.events
             (namespace, id, workflow_run_id, topic, payload, created_at)
         SELECT r.namespace, gen_random_uuid(), r.id, 'topic-' || e, '{}'::jsonb, r.created_at
           FROM tasks.workflow_runs r, generate_series(1, $2) e
          WHERE r.namespace = $1",
    )
    .bind(namespace)
    .bind(OLD_EVENTS)
    .execute(admin)
    .await?;
    Ok(())
}

/// Enqueues and drains `runs` × `steps`; with `purge`, purges the given namespace in
/// batches on its own store (its own pool, as a separate maintenance process would) from
/// the worker's start until the drain ends.
async fn drain(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    runs: usize,
    steps: u32,
    concurrency: usize,
    purge: Option<(&str, u32)>,
) -> Result<Drained> {
    let store = PgStore::connect(url).await?.with_namespace(namespace)?;
    let client = Client::new(store.clone())?;
    futures::stream::iter(0..runs)
        .map(|_| {
            let client = client.clone();
            async move { client.start::<bench_steps>(Steps { steps }).await.map(drop) }
        })
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    db::close(store.pool().clone()).await;
    db::analyze(admin).await?;

    let purger = match purge {
        Some((old, _)) => Some(PgStore::connect(url).await?.with_namespace(old)?),
        None => None,
    };
    let stop = CancellationToken::new();
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(concurrency)
        .build()?;
    let handle = worker.spawn();
    let purging = purger.clone().zip(purge).map(|(purger, (_, batch_size))| {
        let stop = stop.clone();
        tokio::spawn(async move {
            let params = PurgeRuns::older_than(Duration::from_secs(3600)).batch_size(batch_size);
            let started = Instant::now();
            let mut purged = 0;
            while !stop.is_cancelled() {
                let batch = purger.retention().unwrap().purge_runs(&params).await?;
                purged += batch;
                if batch < u64::from(batch_size) {
                    return Ok::<_, tasks::StoreError>((purged, started.elapsed(), false));
                }
            }
            Ok((purged, started.elapsed(), true))
        })
    });
    let drained = db::wait_completed(admin, namespace, runs as i64, DRAIN_TIMEOUT).await;
    stop.cancel();
    let purged = match purging {
        Some(task) => {
            let (purged, elapsed, left) = task.await??;
            Some((purged, elapsed.as_secs_f64(), left))
        }
        None => None,
    };
    handle.shutdown().await;
    drop((worker, store));
    db::close(pool).await;
    if let Some(purger) = purger {
        db::close(purger.pool().clone()).await;
    }
    drained?;
    let (first_claim, last_finish) = db::run_span(admin, namespace).await?;
    Ok(Drained {
        steps_per_s: (runs * steps as usize) as f64 / db::seconds(first_claim, last_finish),
        purged,
    })
}

/// The scenario's table.
pub fn table(result: &RetentionResult) -> String {
    let mut out = String::new();
    let rounds = |samples: &[f64]| {
        samples
            .iter()
            .map(|s| format!("{s:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "\nRETENTION  {} x {} drain (worker concurrency {}) alone and beside a purge of {} \
         finished runs ({} steps + {} event each, batches of {}), medians of interleaved rounds",
        result.runs,
        result.steps_per_run,
        result.concurrency,
        result.old_runs,
        OLD_STEPS,
        OLD_EVENTS,
        result.batch_size,
    );
    let _ = writeln!(
        out,
        "  drain alone            {:>8.0} steps/s   (rounds: {})",
        result.alone_steps_per_s,
        rounds(&result.samples_alone)
    );
    let _ = writeln!(
        out,
        "  drain beside the purge {:>8.0} steps/s   (rounds: {})   drop {:.1} % (target <= 10 %)",
        result.with_purge_steps_per_s,
        rounds(&result.samples_with_purge),
        result.drop_percent
    );
    let _ = writeln!(
        out,
        "  purge during the drain {:>8.0} runs/s = {:.0} rows/s   (rounds: {}){}",
        result.purged_runs_per_s,
        result.purged_rows_per_s,
        rounds(&result.samples_purged_runs_per_s),
        if result.purge_outlasted_drains {
            ""
        } else {
            "   NOTE: the purge ran out of runs before a drain ended"
        }
    );
    out
}
