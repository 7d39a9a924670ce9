//! Flow control: the drain with concurrency keys next to the drain without, in
//! the same run, and the claim on a backlog of 100,000 pending runs over 1,000 keys.

use std::fmt::Write as _;
use std::time::{Duration, Instant};
use tasks::store::LeaseStore;

use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use sqlx::postgres::PgPool;
use tasks::postgres::PgStore;
use tasks::{Client, StartOptions, Worker};

use crate::Result;
use crate::db;
use crate::engine::ENQUEUE_CONCURRENCY;
use crate::stats::{Summary, median};
use crate::workflows::{Steps, bench_steps};

/// Longest a drain may take before the benchmark gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How the runs of a drain are keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// No key.
    None,
    /// A key per run, limit 1.
    PerRun,
    /// Ten keys, limit 5 each.
    Ten,
}

impl Keys {
    fn key(self) -> &'static str {
        match self {
            Keys::None => "keyless",
            Keys::PerRun => "key_per_run_limit_1",
            Keys::Ten => "ten_keys_limit_5",
        }
    }

    fn options(self, n: usize) -> StartOptions {
        match self {
            Keys::None => StartOptions::new(),
            Keys::PerRun => StartOptions::new().concurrency_key(format!("run-{n}"), 1),
            Keys::Ten => StartOptions::new().concurrency_key(format!("key-{}", n % 10), 5),
        }
    }
}

/// One drain variant, median over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct FlowRow {
    /// Short identifier.
    pub key: String,
    /// Runs drained.
    pub runs: usize,
    /// Steps per run.
    pub steps_per_run: u32,
    /// Median steps/s (first claim to last completion, database clock).
    pub steps_per_s: f64,
    /// Every round's steps/s.
    pub samples_steps_per_s: Vec<f64>,
    /// Median of this variant over the median of the keyless drain.
    pub ratio_to_keyless: f64,
}

/// Claims on a large backlog.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogRow {
    /// Short identifier.
    pub key: String,
    /// Pending runs in the namespace.
    pub pending: usize,
    /// Distinct keys among them (0: keyless).
    pub keys: usize,
    /// Runs each claim asks for.
    pub batch: u32,
    /// Latency of one claim, ms.
    pub claim_ms: Summary,
    /// Latency of the plain claim statement alone (no queue has a limit), ms.
    pub plain_statement_ms: Summary,
    /// Latency of the full claim statement alone (the queues' limits), ms, taking turns
    /// with the plain one.
    pub full_statement_ms: Summary,
    /// Whether `EXPLAIN` of the claim shows a sequential scan of the runs.
    pub sequential_scan: bool,
    /// The relations `EXPLAIN` shows read by a sequential scan (small tables such as the
    /// queues' configuration may be; the runs must not be).
    pub sequential_scans: Vec<String>,
    /// The plan, as `EXPLAIN (COSTS OFF)` printed it.
    pub plan: Vec<String>,
}

/// Everything the flow scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct FlowResult {
    /// Worker concurrency of the drains.
    pub concurrency: usize,
    /// The drains.
    pub drains: Vec<FlowRow>,
    /// The backlog claims.
    pub backlog: Vec<BacklogRow>,
}

/// Drains `runs` runs of `steps` steps with each keying, `rounds` times interleaved after a
/// warm-up round that is not counted, then measures claims on a 100k backlog with and
/// without keys.
pub async fn measure(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: u32,
    rounds: usize,
    concurrency: usize,
    backlog: usize,
) -> Result<FlowResult> {
    let variants = [Keys::None, Keys::PerRun, Keys::Ten];
    let mut samples = vec![Vec::new(); variants.len()];
    // Round 0 warms up (the first drains on a fresh database ran up to 40 % slower than the
    // next ones) and is not counted.
    for round in 0..=rounds {
        for (i, keys) in variants.into_iter().enumerate() {
            eprintln!("flow: drain {} (round {round})", keys.key());
            let namespace = db::namespace(&format!("flow-{}", keys.key()));
            let measured = drain(url, admin, &namespace, keys, runs, steps, concurrency).await;
            db::cleanup(admin, &namespace).await?;
            let measured = measured?;
            if round > 0 {
                samples[i].push(measured);
            }
        }
    }
    let keyless = median(&samples[0]);
    let drains = variants
        .into_iter()
        .zip(samples)
        .map(|(keys, samples)| FlowRow {
            key: keys.key().into(),
            runs,
            steps_per_run: steps,
            steps_per_s: median(&samples),
            ratio_to_keyless: median(&samples) / keyless,
            samples_steps_per_s: samples,
        })
        .collect();
    let mut rows = Vec::new();
    for keys in [0, 1000] {
        eprintln!("flow: claims on a backlog of {backlog} runs over {keys} keys");
        let namespace = db::namespace(&format!("flow-backlog-{keys}"));
        let measured = claims_on_backlog(url, admin, &namespace, backlog, keys).await;
        db::cleanup(admin, &namespace).await?;
        rows.push(measured?);
    }
    Ok(FlowResult {
        concurrency,
        drains,
        backlog: rows,
    })
}

async fn drain(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    keys: Keys,
    runs: usize,
    steps: u32,
    concurrency: usize,
) -> Result<f64> {
    let store = PgStore::connect(url).await?.with_namespace(namespace)?;
    let client = Client::new(store.clone())?;
    futures::stream::iter(0..runs)
        .map(|n| {
            let client = client.clone();
            async move {
                client
                    .start::<bench_steps>(Steps { steps })
                    .options(keys.options(n))
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    db::close(store.pool().clone()).await;
    db::analyze(admin).await?;
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(concurrency)
        .build()?;
    let handle = worker.spawn();
    let drained = db::wait_completed(admin, namespace, runs as i64, DRAIN_TIMEOUT).await;
    handle.shutdown().await;
    drop((worker, store));
    db::close(pool).await;
    drained?;
    let (first_claim, last_finish) = db::run_span(admin, namespace).await?;
    Ok((runs * steps as usize) as f64 / db::seconds(first_claim, last_finish))
}

/// Inserts `pending` pending runs over `keys` keys (keyless when 0; limit 2), runs `EXPLAIN`
/// of the claim and times 50 claims of 10 runs.
async fn claims_on_backlog(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    pending: usize,
    keys: usize,
) -> Result<BacklogRow> {
    if keys > 0 {
        sqlx::query(
            "INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
             SELECT $1, 'key-' || k FROM generate_series(0, $2 - 1) k",
        )
        .bind(namespace)
        .bind(keys as i64)
        .execute(admin)
        .await?;
    }
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, version, status, attempts, available_at, created_at,
              updated_at, concurrency_key, concurrency_limit)
         SELECT $1, gen_random_uuid(), 'bench_steps', NULL, 'pending', 0,
                now() - (i || ' milliseconds')::interval, now(), now(),
                CASE WHEN $3 > 0 THEN 'key-' || (i % $3) END, CASE WHEN $3 > 0 THEN 2 END
           FROM generate_series(1, $2) i",
    )
    .bind(namespace)
    .bind(pending as i64)
    .bind(keys as i64)
    .execute(admin)
    .await?;
    db::analyze(admin).await?;
    const BATCH: u32 = 10;
    // Executed in a transaction that is rolled back. The plain claim: the statement the store
    // claims with while no queue of the namespace has a limit.
    let explain = format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {}",
        tasks::postgres::__bench::plain_claim_runs_sql()
    );
    let mut tx = admin.begin().await?;
    let plan: Vec<String> = sqlx::query_scalar(&explain)
        .bind(namespace)
        .bind("bench-claimer")
        .bind(60_000_i64)
        .bind(i64::from(BATCH))
        .bind(serde_json::json!({}))
        .bind(tasks::postgres::__bench::claim_keyed_candidates(BATCH))
        .bind(None::<Vec<String>>)
        .bind(None::<Vec<String>>)
        .fetch_all(&mut *tx)
        .await?;
    tx.rollback().await?;
    let mut sequential_scans: Vec<String> = plan
        .iter()
        .filter(|line| !line.contains("never executed"))
        .filter_map(|line| line.split("Seq Scan on ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    sequential_scans.sort();
    sequential_scans.dedup();
    let sequential_scan = sequential_scans
        .iter()
        .any(|relation| relation == "workflow_runs");
    let store = db::engine_store(url, namespace, false).await?;
    let mut samples = Vec::new();
    for n in 0..50 {
        let started = Instant::now();
        let claimed = store
            .claim_runs(
                &format!("bench-claimer-{n}"),
                Duration::from_secs(600),
                BATCH,
            )
            .await?;
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        if claimed.len() != BATCH as usize {
            return Err(format!("a claim took {} runs, not {BATCH}", claimed.len()).into());
        }
    }
    // The two claim statements themselves, raw and taking turns on the store's pool: the
    // plain one (the store's here) and the full one (a namespace with a limited queue).
    let mut plain = Vec::new();
    let mut full = Vec::new();
    for n in 0..50 {
        for (sql, samples) in [
            (tasks::postgres::__bench::plain_claim_runs_sql(), &mut plain),
            (tasks::postgres::__bench::claim_runs_sql(), &mut full),
        ] {
            let started = Instant::now();
            // As the store claims: in a transaction whose `BEGIN` sets the plan mode.
            let mut claim = store
                .pool()
                .begin_with(tasks::postgres::__bench::claim_begin())
                .await?;
            let rows = sqlx::query(sql)
                .bind(namespace)
                .bind(format!("bench-raw-claimer-{n}"))
                .bind(600_000_i64)
                .bind(i64::from(BATCH))
                .bind(serde_json::json!({}))
                .bind(tasks::postgres::__bench::claim_keyed_candidates(BATCH))
                .bind(None::<Vec<String>>)
                .bind(None::<Vec<String>>)
                .fetch_all(&mut *claim)
                .await?;
            claim.commit().await?;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            if rows.len() != BATCH as usize {
                return Err(format!("a raw claim took {} runs, not {BATCH}", rows.len()).into());
            }
        }
    }
    db::close(store.pool().clone()).await;
    Ok(BacklogRow {
        plain_statement_ms: Summary::of(&plain),
        full_statement_ms: Summary::of(&full),
        key: if keys > 0 { "keyed" } else { "keyless" }.into(),
        pending,
        keys,
        batch: BATCH,
        claim_ms: Summary::of(&samples),
        sequential_scan,
        sequential_scans,
        plan,
    })
}

/// The scenario's table.
pub fn table(result: &FlowResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nFLOW  1000 x 4 drains with concurrency keys next to the keyless drain (worker \
         concurrency {}), medians of interleaved rounds after a warm-up round",
        result.concurrency
    );
    for row in &result.drains {
        let each: Vec<String> = row
            .samples_steps_per_s
            .iter()
            .map(|s| format!("{s:.0}"))
            .collect();
        let _ = writeln!(
            out,
            "  {:<22} {:>8.0} steps/s  {:>5.0} % of keyless   (rounds: {})",
            row.key,
            row.steps_per_s,
            row.ratio_to_keyless * 100.0,
            each.join(", ")
        );
    }
    for row in &result.backlog {
        let _ = writeln!(
            out,
            "  claim of {} on {} pending runs over {} keys: p50 {:.2} ms, p95 {:.2} ms; \
             EXPLAIN: {}\n    the statements alone, taking turns: plain p50 {:.2} ms, p95 {:.2} ms; \
             full (queues with limits) p50 {:.2} ms, p95 {:.2} ms; plain / full at p50 {:.2}",
            row.batch,
            row.pending,
            row.keys,
            row.claim_ms.p50,
            row.claim_ms.p95,
            if row.sequential_scan {
                "SEQUENTIAL SCAN OF THE RUNS".to_owned()
            } else if row.sequential_scans.is_empty() {
                "index-bound, no sequential scan".to_owned()
            } else {
                format!(
                    "the runs index-bound; sequential scan of {}",
                    row.sequential_scans.join(", ")
                )
            },
            row.plain_statement_ms.p50,
            row.plain_statement_ms.p95,
            row.full_statement_ms.p50,
            row.full_statement_ms.p95,
            row.plain_statement_ms.p50 / row.full_statement_ms.p50,
        );
    }
    out
}
