//! Scenarios that run the engine itself, in this process: throughput, latency and replay.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sqlx::Row as _;
use sqlx::postgres::PgPool;
use tasks::postgres::PgStore;
use tasks::{Client, RunStatus, Worker};
use uuid::Uuid;

use crate::Result;
use crate::db::{self, Costs, Counters, Cpu, CpuUse};
use crate::stats::{Summary, median};
use crate::workflows::{Ping, Replay, Steps, bench_event, bench_parent, bench_replay, bench_steps};

/// How many runs a client starts at once while enqueueing.
pub const ENQUEUE_CONCURRENCY: usize = 16;

/// Longest a drain may take before the benchmark gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Starts `runs` runs of `steps` no-op steps through a client on its own store (closed
/// afterwards, as a separate application would be), `ENQUEUE_CONCURRENCY` at a time.
/// Returns the runs started per second.
pub async fn enqueue(url: &str, namespace: &str, runs: usize, steps: u32) -> Result<f64> {
    let store = PgStore::connect(url).await?.with_namespace(namespace)?;
    let pool = store.pool().clone();
    let client = Client::new(store)?;
    let started = Instant::now();
    futures::stream::iter(0..runs)
        .map(|_| {
            let client = client.clone();
            async move { bench_steps::start(&client, Steps { steps }).await.map(drop) }
        })
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let rate = runs as f64 / started.elapsed().as_secs_f64();
    drop(client);
    db::close(pool).await;
    Ok(rate)
}

/// One throughput measurement.
#[derive(Debug, Clone)]
pub struct ThroughputSpec {
    /// Short identifier (JSON key).
    pub key: String,
    /// Runs enqueued before the worker starts.
    pub runs: usize,
    /// No-op steps per run.
    pub steps: u32,
    /// Worker concurrency.
    pub concurrency: usize,
    /// Whether TCP_NODELAY stays on (as sqlx sets it).
    pub nodelay: bool,
}

/// The result of one throughput measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    /// Short identifier.
    pub key: String,
    /// Runs drained.
    pub runs: usize,
    /// Steps per run.
    pub steps_per_run: u32,
    /// Steps drained.
    pub steps: usize,
    /// Worker concurrency.
    pub concurrency: usize,
    /// TCP_NODELAY on the worker's pool.
    pub nodelay: bool,
    /// Runs started per second while enqueueing (not part of the drain).
    pub enqueue_runs_per_s: f64,
    /// Worker start → first run claimed, ms.
    pub first_claim_ms: f64,
    /// Worker start → last run completed, seconds (database clock).
    pub seconds: f64,
    /// The same, seen by the benchmark's completion poll (20 ms granularity).
    pub wall_seconds: f64,
    /// Runs completed per second.
    pub workflows_per_s: f64,
    /// Steps completed per second (the median round).
    pub steps_per_s: f64,
    /// Steps per second of every round, in the order measured.
    pub samples_steps_per_s: Vec<f64>,
    /// `steps_per_s` ÷ the engine-statement ceiling.
    pub ratio_to_ceiling: Option<f64>,
    /// Database cost per step (run overheads included).
    pub per_step: Costs,
    /// Write transactions per run.
    pub write_txns_per_run: f64,
    /// CPU per step (run overheads included).
    pub cpu_per_step: CpuUse,
    /// Where a run's time went during the drain.
    pub phases: DrainPhases,
    /// The same workload through the engine's statements alone (no engine), steps/s: the
    /// median of its rounds, measured in turn with the drains.
    pub raw_steps_per_s: Option<f64>,
    /// That figure of every round.
    pub raw_samples_steps_per_s: Vec<f64>,
    /// `steps_per_s` ÷ `raw_steps_per_s`.
    pub ratio_to_raw: Option<f64>,
}

/// Where a run's time goes under load, from the timestamps the engine stores (database
/// clock; a step's time is when its record was written). Medians over the drained runs, ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrainPhases {
    /// The claim until the first step's record: claim commit, start, first step, its record.
    pub claim_to_first_step_ms: f64,
    /// One step's record until the next one's: the wait for a record, per step.
    pub between_steps_ms: f64,
    /// The last step's record until the run's completion.
    pub last_step_to_done_ms: f64,
    /// The claim until the completion (mean).
    pub run_ms: f64,
    /// Per run, the time a worker slot spent without a claimed run: concurrency × drain
    /// time ÷ runs, minus `run_ms`. The wait for the next claim, and the completion's commit.
    pub slot_idle_ms: f64,
}

/// Reads the drain's phases from the namespace's rows.
async fn drain_phases(
    admin: &PgPool,
    namespace: &str,
    concurrency: usize,
    runs: usize,
    seconds: f64,
) -> Result<DrainPhases> {
    let row = sqlx::query(
        "WITH s AS (
             SELECT sa.workflow_run_id, sa.finished_at,
                    lag(sa.finished_at) OVER w AS previous,
                    row_number() OVER w AS n,
                    count(*) OVER (PARTITION BY sa.workflow_run_id) AS total
               FROM tasks.step_attempts sa
              WHERE sa.namespace = $1
             WINDOW w AS (PARTITION BY sa.workflow_run_id ORDER BY sa.created_at, sa.id)
         ), j AS (
             SELECT s.*, r.started_at, r.finished_at AS done
               FROM s JOIN tasks.workflow_runs r
                 ON r.namespace = $1 AND r.id = s.workflow_run_id
         )
         SELECT
           (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY
                   extract(epoch FROM finished_at - started_at)::float8) FROM j WHERE n = 1),
           (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY
                   extract(epoch FROM finished_at - previous)::float8) FROM j WHERE n > 1),
           (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY
                   extract(epoch FROM done - finished_at)::float8) FROM j WHERE n = total),
           (SELECT avg(extract(epoch FROM finished_at - started_at))::float8
              FROM tasks.workflow_runs WHERE namespace = $1)",
    )
    .bind(namespace)
    .fetch_one(admin)
    .await?;
    let ms = |i: usize| -> Result<f64> {
        Ok(row.try_get::<Option<f64>, _>(i)?.unwrap_or(f64::NAN) * 1000.0)
    };
    let run_ms = ms(3)?;
    Ok(DrainPhases {
        claim_to_first_step_ms: ms(0)?,
        between_steps_ms: ms(1)?,
        last_step_to_done_ms: ms(2)?,
        run_ms,
        slot_idle_ms: concurrency as f64 * seconds * 1000.0 / runs as f64 - run_ms,
    })
}

/// Enqueues, then drains with one in-process worker; measures from worker start to the
/// last run completed. Cleans its namespace up.
pub async fn throughput(url: &str, admin: &PgPool, spec: &ThroughputSpec) -> Result<ThroughputRow> {
    let namespace = db::namespace(&format!("throughput-{}", spec.key));
    let result = throughput_in(url, admin, spec, &namespace).await;
    db::cleanup(admin, &namespace).await?;
    result
}

async fn throughput_in(
    url: &str,
    admin: &PgPool,
    spec: &ThroughputSpec,
    namespace: &str,
) -> Result<ThroughputRow> {
    let enqueue_rate = enqueue(url, namespace, spec.runs, spec.steps).await?;
    db::analyze(admin).await?;
    let store = db::engine_store(url, namespace, !spec.nodelay).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(spec.concurrency)
        .build()?;

    let counters = Counters::read_settled(admin).await?;
    let start = db::db_clock(admin).await?;
    let cpu = Cpu::read();
    let started = Instant::now();
    let handle = worker.spawn();
    let drained = db::wait_completed(admin, namespace, spec.runs as i64, DRAIN_TIMEOUT).await;
    let wall_seconds = started.elapsed().as_secs_f64();
    let cpu_after = Cpu::read();
    handle.shutdown().await;
    drop((worker, store));
    db::close(pool).await;
    drained?;
    let after = Counters::read_settled(admin).await?;
    let (first_claim, last_finish) = db::run_span(admin, namespace).await?;

    let seconds = db::seconds(start, last_finish);
    let steps = spec.runs * spec.steps as usize;
    let phases = drain_phases(admin, namespace, spec.concurrency, spec.runs, seconds).await?;
    Ok(ThroughputRow {
        key: spec.key.clone(),
        runs: spec.runs,
        steps_per_run: spec.steps,
        steps,
        concurrency: spec.concurrency,
        nodelay: spec.nodelay,
        enqueue_runs_per_s: enqueue_rate,
        first_claim_ms: db::seconds(start, first_claim) * 1000.0,
        seconds,
        wall_seconds,
        workflows_per_s: spec.runs as f64 / seconds,
        steps_per_s: steps as f64 / seconds,
        samples_steps_per_s: vec![steps as f64 / seconds],
        ratio_to_ceiling: None,
        per_step: counters.per(&after, steps as f64),
        write_txns_per_run: counters.per(&after, spec.runs as f64).write_txns,
        cpu_per_step: cpu.per(&cpu_after, steps as f64),
        phases,
        raw_steps_per_s: None,
        raw_samples_steps_per_s: Vec::new(),
        ratio_to_raw: None,
    })
}

/// Where the time of a one-step run goes, median over the samples, in ms, from the
/// timestamps the engine stores (the run's are `now()`, the start of the writing
/// transaction; the step's come from `clock_timestamp()`, its start being the recording
/// time minus the measured duration) and the client's clock around its calls.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyBreakdown {
    /// Client calls `start` → the insert of the run begins (pool acquire, ping).
    pub call_to_insert: f64,
    /// Insert begins → the worker's claim begins: insert commit, `pg_notify` commit,
    /// delivery to the listener, worker wake-up.
    pub insert_to_claim: f64,
    /// Claim begins → the step starts: claim commit, history read (skipped on a first
    /// execution), workflow start.
    pub claim_to_step: f64,
    /// The step starts → its record is written: the no-op step, and the statement.
    pub step: f64,
    /// The step's record is written → run completion begins: its commit.
    pub step_to_run_done: f64,
    /// Run completion begins → `result()` returned: completion commit, `pg_notify` commit,
    /// delivery, the handle's read of the run.
    pub run_done_to_result: f64,
}

/// The latency scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    /// Worker concurrency.
    pub concurrency: usize,
    /// Pause between one result and the next start, ms.
    pub gap_ms: u64,
    /// `start` → `result()` returned, ms.
    pub total_ms: Summary,
    /// `start` alone (the run is stored and the wake-up sent), ms.
    pub start_ms: Summary,
    /// Medians of the phases.
    pub breakdown: LatencyBreakdown,
    /// Write transactions per run (exact).
    pub write_txns_per_run: f64,
    /// Event wake-up: `send_event` → the run's `result()` returned, for runs parked on an
    /// event wait on the same idle worker, ms.
    pub event_ms: Summary,
    /// Child round trip: parent `start` → the parent's `result()` returned, for a parent
    /// that runs one child which returns at once (parent claimed, child started, parent
    /// parked, child claimed and completed, parent woken, claimed, replayed and
    /// completed), on the same idle worker, ms.
    pub child_ms: Summary,
}

/// Starts `samples` one-step runs one at a time against an idle, already started worker and
/// times start → result.
pub async fn latency(url: &str, admin: &PgPool, samples: usize) -> Result<LatencyResult> {
    let namespace = db::namespace("latency");
    let result = latency_in(url, admin, samples, &namespace).await;
    db::cleanup(admin, &namespace).await?;
    result
}

/// One latency sample, as the client saw it.
struct Sample {
    id: Uuid,
    called: DateTime<Utc>,
    start_ms: f64,
    total_ms: f64,
    returned: DateTime<Utc>,
}

/// Pause between samples, so each start finds the worker idle.
const LATENCY_GAP: Duration = Duration::from_millis(10);

async fn latency_in(
    url: &str,
    admin: &PgPool,
    samples: usize,
    namespace: &str,
) -> Result<LatencyResult> {
    const CONCURRENCY: usize = 100;
    const WARMUP: usize = 5;
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(CONCURRENCY)
        .build()?
        .spawn();
    let client = Client::new(store.clone())?;
    // Let the worker subscribe and settle into idle polling.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..WARMUP {
        bench_steps::start(&client, Steps { steps: 1 })
            .await?
            .result()
            .await?;
    }

    let counters = Counters::read(admin).await?;
    let mut timings: Vec<Sample> = Vec::with_capacity(samples);
    for _ in 0..samples {
        tokio::time::sleep(LATENCY_GAP).await;
        let called = Utc::now();
        let started = Instant::now();
        let run = bench_steps::start(&client, Steps { steps: 1 }).await?;
        let start_ms = started.elapsed().as_secs_f64() * 1000.0;
        run.result().await?;
        let total_ms = started.elapsed().as_secs_f64() * 1000.0;
        timings.push(Sample {
            id: run.id(),
            called,
            start_ms,
            total_ms,
            returned: Utc::now(),
        });
    }
    let after = Counters::read(admin).await?;

    // Event wake-up: runs parked on an event wait, woken by a send (the same worker, idle).
    let mut event_ms = Vec::with_capacity(samples);
    for n in 0..samples {
        let run = bench_event::start(&client, ()).await?;
        while client.get_run(run.id()).await?.map(|r| r.status) != Some(RunStatus::Sleeping) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(LATENCY_GAP).await;
        let started = Instant::now();
        client.send_event(run.id(), &Ping { n: n as u32 }).await?;
        run.result().await?;
        event_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    // Child round trip: parent start -> child done -> parent done (the same worker, idle).
    let mut child_ms = Vec::with_capacity(samples);
    for n in 0..samples {
        tokio::time::sleep(LATENCY_GAP).await;
        let started = Instant::now();
        let run = bench_parent::start(&client, n as u32).await?;
        run.result().await?;
        child_ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    worker.shutdown().await;
    drop((client, store));
    db::close(pool).await;

    type Phases = (
        Uuid,
        DateTime<Utc>,
        DateTime<Utc>,
        DateTime<Utc>,
        DateTime<Utc>,
        DateTime<Utc>,
    );
    let rows: Vec<Phases> = sqlx::query_as(
        "SELECT wr.id, wr.created_at, wr.started_at, sa.started_at, sa.finished_at, wr.finished_at
           FROM tasks.workflow_runs wr
           JOIN tasks.step_attempts sa
             ON sa.namespace = wr.namespace AND sa.workflow_run_id = wr.id
          WHERE wr.namespace = $1",
    )
    .bind(namespace)
    .fetch_all(admin)
    .await?;
    let phases: std::collections::HashMap<Uuid, Phases> =
        rows.into_iter().map(|row| (row.0, row)).collect();
    let ms = |from: DateTime<Utc>, to: DateTime<Utc>| db::seconds(from, to) * 1000.0;
    let mut columns: [Vec<f64>; 6] = Default::default();
    for sample in &timings {
        let Some(&(_, inserted, claimed, step_started, step_finished, run_finished)) =
            phases.get(&sample.id)
        else {
            continue;
        };
        columns[0].push(ms(sample.called, inserted));
        columns[1].push(ms(inserted, claimed));
        columns[2].push(ms(claimed, step_started));
        columns[3].push(ms(step_started, step_finished));
        columns[4].push(ms(step_finished, run_finished));
        columns[5].push(ms(run_finished, sample.returned));
    }
    let total: Vec<f64> = timings.iter().map(|t| t.total_ms).collect();
    let start: Vec<f64> = timings.iter().map(|t| t.start_ms).collect();
    Ok(LatencyResult {
        concurrency: CONCURRENCY,
        gap_ms: LATENCY_GAP.as_millis() as u64,
        total_ms: Summary::of(&total),
        start_ms: Summary::of(&start),
        breakdown: LatencyBreakdown {
            call_to_insert: median(&columns[0]),
            insert_to_claim: median(&columns[1]),
            claim_to_step: median(&columns[2]),
            step: median(&columns[3]),
            step_to_run_done: median(&columns[4]),
            run_done_to_result: median(&columns[5]),
        },
        write_txns_per_run: counters.per(&after, samples as f64).write_txns,
        event_ms: Summary::of(&event_ms),
        child_ms: Summary::of(&child_ms),
    })
}

/// The replay figures for one history length.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayRow {
    /// Completed steps in the history before the resumption.
    pub steps: u32,
    /// Repetitions.
    pub repetitions: usize,
    /// `resume()` → `result()` returned, median ms: wake-up, claim, history read, replay of
    /// every step, completion of the sleep and of the run, completion wake-up.
    pub resume_to_result_ms: f64,
    /// Reading the run's history alone (the statement every claim issues), median ms.
    pub history_read_ms: f64,
    /// The same statement through sqlx without decoding the rows into the engine's types,
    /// median ms: the database and the wire.
    pub history_raw_sql_ms: f64,
    /// `(resume_to_result(N) - resume_to_result(0)) / N`, µs per step.
    pub us_per_step: Option<f64>,
    /// `history_read(N) / (N + 1)`, µs per row.
    pub history_us_per_row: f64,
    /// First execution, from claim to park, ms per step (one run alone: serial cost).
    pub first_execution_ms_per_step: Option<f64>,
}

/// Times the resumption of runs whose history holds `lengths` completed steps.
///
/// Each run executes its steps, then parks on a 200 ms durable sleep; the benchmark pauses
/// it while it sleeps, waits for the sleep to be over and resumes it, timing `resume()` →
/// `result()`. The resumed execution reads the history once, replays every step from it
/// (no step runs again), completes the sleep and then the run. Pausing keeps the worker from
/// picking the run up by itself when the sleep ends, so the clock starts at a known moment.
pub async fn replay(
    url: &str,
    admin: &PgPool,
    lengths: &[u32],
    repetitions: usize,
) -> Result<Vec<ReplayRow>> {
    let namespace = db::namespace("replay");
    let result = replay_in(url, lengths, repetitions, &namespace).await;
    db::cleanup(admin, &namespace).await?;
    result
}

/// COPIED from `PgStore::step_history` (`tasks-postgres/src/steps.rs`), with the column
/// list of `STEP_COLUMNS`: the history read of every claim that is not a first execution.
fn step_history_sql() -> &'static str {
    "SELECT namespace, id, workflow_run_id, step_name, kind, status, config, context, output,
            error, child_workflow_run_namespace, child_workflow_run_id, started_at, finished_at,
            created_at, updated_at
       FROM tasks.step_attempts
      WHERE namespace = $1 AND workflow_run_id = $2
      ORDER BY created_at, id"
}

/// The durable sleep that parks replay runs.
const REPLAY_SLEEP: Duration = Duration::from_millis(200);

async fn replay_in(
    url: &str,
    lengths: &[u32],
    repetitions: usize,
    namespace: &str,
) -> Result<Vec<ReplayRow>> {
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(100)
        .build()?
        .spawn();
    let client = Client::new(store.clone())?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut resume = vec![Vec::new(); lengths.len()];
    let mut history = vec![Vec::new(); lengths.len()];
    let mut history_raw = vec![Vec::new(); lengths.len()];
    let mut first = vec![Vec::new(); lengths.len()];
    // Short histories are cheap and their figures noisier: they get twice the repetitions.
    let wanted = |steps: u32| {
        if steps <= 100 {
            2 * repetitions
        } else {
            repetitions
        }
    };
    // Round 0 warms the pool's prepared statements up and is not recorded.
    for round in 0..=2 * repetitions {
        for (i, &steps) in lengths.iter().enumerate() {
            let warmup = round == 0;
            if (warmup && steps > 100) || round > wanted(steps) {
                continue;
            }
            let run = bench_replay::start(
                &client,
                Replay {
                    steps,
                    sleep_ms: REPLAY_SLEEP.as_millis() as u64,
                },
            )
            .await?;
            let waited = Instant::now();
            loop {
                match run.status().await? {
                    RunStatus::Sleeping => break,
                    RunStatus::Pending | RunStatus::Running => {}
                    other => return Err(format!("replay run ended up {other}").into()),
                }
                if waited.elapsed() > DRAIN_TIMEOUT {
                    return Err("replay run never parked".into());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            run.pause().await?;
            let parked = run.run().await?;
            let steps_done = run.steps().await?;
            if let (Some(claimed), Some(park)) = (
                parked.started_at,
                steps_done.iter().find(|s| s.step_name == "park"),
            ) && steps > 0
                && !warmup
            {
                first[i].push(db::seconds(claimed, park.created_at) * 1000.0 / steps as f64);
            }
            tokio::time::sleep(REPLAY_SLEEP + Duration::from_millis(50)).await;

            let started = Instant::now();
            run.resume().await?;
            run.result().await?;
            let resumed_ms = started.elapsed().as_secs_f64() * 1000.0;

            let started = Instant::now();
            let rows = run.steps().await?;
            let history_ms = started.elapsed().as_secs_f64() * 1000.0;
            let started = Instant::now();
            let raw = sqlx::query(step_history_sql())
                .bind(namespace)
                .bind(run.id())
                .fetch_all(&pool)
                .await?;
            let raw_ms = started.elapsed().as_secs_f64() * 1000.0;
            drop(raw);
            if rows.len() != steps as usize + 1 {
                return Err(format!(
                    "replay run has {} attempts, expected {} (did a step run twice?)",
                    rows.len(),
                    steps + 1
                )
                .into());
            }
            if !warmup {
                resume[i].push(resumed_ms);
                history[i].push(history_ms);
                history_raw[i].push(raw_ms);
            }
        }
    }
    worker.shutdown().await;
    drop((client, store));
    db::close(pool).await;

    let base = median(&resume[0]);
    Ok(lengths
        .iter()
        .enumerate()
        .map(|(i, &steps)| {
            let resume_ms = median(&resume[i]);
            let history_ms = median(&history[i]);
            ReplayRow {
                steps,
                repetitions: resume[i].len(),
                resume_to_result_ms: resume_ms,
                history_read_ms: history_ms,
                history_raw_sql_ms: median(&history_raw[i]),
                us_per_step: (steps > 0 && lengths[0] == 0)
                    .then(|| (resume_ms - base) * 1000.0 / steps as f64),
                history_us_per_row: history_ms * 1000.0 / (steps + 1) as f64,
                first_execution_ms_per_step: (!first[i].is_empty()).then(|| median(&first[i])),
            }
        })
        .collect())
}
