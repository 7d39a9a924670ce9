//! Isolation from other work on the same database: how long a trickle of runs into one
//! queue waits behind a large backlog in another (queue fairness), and what a snapshot held
//! open by another session costs the pipeline (dead tuples that nothing can remove while it
//! is open).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::postgres::PgPool;
use sqlx::{Connection, PgConnection};
use tasks::{Client, QueueOptions, Worker};

use crate::Result;
use crate::db;
use crate::stats::{Summary, median};
use crate::workflows::{Steps, bench_steps};

/// Worker concurrency of both scenarios.
const CONCURRENCY: usize = 100;

/// Longest the fairness scenario waits for the trickle's runs to start.
const START_TIMEOUT: Duration = Duration::from_secs(600);

/// One trickle: `runs` one-step runs started into queue `b`, one every `every`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Trickle {
    /// Runs started into queue `b`.
    pub runs: usize,
    /// Pause between two starts, ms.
    pub every_ms: u64,
}

/// How the workers and queues are set up for one fairness row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// No backlog: the trickle alone on one worker serving every queue.
    Idle,
    /// The backlog in queue `a`, one worker serving every queue (the default).
    Shared,
    /// The backlog in queue `a`, whose concurrency is limited in the store to
    /// [`A_LIMIT`] of the worker's [`CONCURRENCY`] slots.
    Limited,
    /// The backlog in queue `a`, one worker serving every queue and a second, of
    /// concurrency [`DEDICATED`], serving queue `b` only.
    Dedicated,
    /// The backlog in queue `a`, one worker; the trickle's runs start with priority 1.
    Priority,
}

/// The concurrency limit of queue `a` in [`Setup::Limited`].
const A_LIMIT: u32 = 90;

/// The concurrency of the worker serving only queue `b` in [`Setup::Dedicated`].
const DEDICATED: usize = 10;

impl Setup {
    fn key(self) -> &'static str {
        match self {
            Setup::Idle => "idle",
            Setup::Shared => "shared",
            Setup::Limited => "limited",
            Setup::Dedicated => "dedicated",
            Setup::Priority => "priority",
        }
    }

    fn label(self) -> String {
        match self {
            Setup::Idle => "idle store, one worker".into(),
            Setup::Shared => "backlog in A, one worker for all queues".into(),
            Setup::Limited => format!("backlog in A limited to {A_LIMIT}, one worker"),
            Setup::Dedicated => format!("backlog in A, + a worker of {DEDICATED} for B"),
            Setup::Priority => "backlog in A, one worker, B at priority 1".into(),
        }
    }
}

/// One row of the fairness scenario.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessRow {
    /// Short identifier.
    pub key: String,
    /// What the row sets up.
    pub label: String,
    /// Pending runs in queue `a` when the trickle began.
    pub backlog: usize,
    /// Start delay of the trickle's runs (claimed minus created, database clock), ms.
    pub delay_ms: Summary,
    /// Runs of queue `a` started while the trickle's runs waited (from the trickle's first
    /// start to its last run's claim).
    pub a_started: i64,
    /// Seconds from the first trickled start to the last trickled run's claim.
    pub seconds: f64,
}

/// The fairness scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessResult {
    /// Worker concurrency.
    pub concurrency: usize,
    /// The trickle of every row.
    pub trickle: Trickle,
    /// The rows, the idle store first.
    pub rows: Vec<FairnessRow>,
}

/// Measures the start delay of `trickle` into queue `b`, on an idle store and beside a
/// backlog of `backlog` pending one-step runs in queue `a`, under each [`Setup`].
pub async fn fairness(
    url: &str,
    admin: &PgPool,
    backlog: usize,
    trickle: Trickle,
) -> Result<FairnessResult> {
    let mut rows = Vec::new();
    for setup in [
        Setup::Idle,
        Setup::Shared,
        Setup::Limited,
        Setup::Dedicated,
        Setup::Priority,
    ] {
        eprintln!("fairness: {}", setup.label());
        let namespace = db::namespace(&format!("fairness-{}", setup.key()));
        let measured = fairness_row(url, admin, &namespace, setup, backlog, trickle).await;
        sqlx::query("DELETE FROM tasks.queues WHERE namespace = $1")
            .bind(&namespace)
            .execute(admin)
            .await?;
        db::cleanup(admin, &namespace).await?;
        let row = measured?;
        eprintln!(
            "fairness: {}: p50 {:.0} ms, p99 {:.0} ms",
            row.key, row.delay_ms.p50, row.delay_ms.p99
        );
        rows.push(row);
    }
    Ok(FairnessResult {
        concurrency: CONCURRENCY,
        trickle,
        rows,
    })
}

async fn fairness_row(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    setup: Setup,
    backlog: usize,
    trickle: Trickle,
) -> Result<FairnessRow> {
    let backlog = if setup == Setup::Idle { 0 } else { backlog };
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, version, status, attempts, input, available_at,
              created_at, updated_at, queue)
         SELECT $1, gen_random_uuid(), 'bench-steps', NULL, 'pending', 0,
                '{\"steps\": 1}'::jsonb, now(), now() + (i || ' microseconds')::interval,
                now(), 'a'
           FROM generate_series(1, $2) i",
    )
    .bind(namespace)
    .bind(backlog as i64)
    .execute(admin)
    .await?;
    db::analyze(admin).await?;
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let client = Client::new(store.clone())?;
    if setup == Setup::Limited {
        client
            .put_queue(QueueOptions::new("a").concurrency(A_LIMIT))
            .await?;
    }
    let worker = Worker::builder(store.clone())
        .concurrency(CONCURRENCY)
        .build()?
        .spawn();
    let dedicated = match setup {
        Setup::Dedicated => Some(
            Worker::builder(store.clone())
                .concurrency(DEDICATED)
                .queues(["b"])
                .build()?
                .spawn(),
        ),
        _ => None,
    };
    // The backlog's drain is under way before the trickle begins.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let began = db::db_clock(admin).await?;
    let mut trickled = Vec::with_capacity(trickle.runs);
    let priority = i32::from(setup == Setup::Priority);
    for _ in 0..trickle.runs {
        let handle = client
            .start::<bench_steps>(Steps { steps: 1 })
            .queue("b")
            .priority(priority)
            .await?;
        trickled.push(handle.id());
        tokio::time::sleep(Duration::from_millis(trickle.every_ms)).await;
    }
    let waited = Instant::now();
    let delays: Vec<f64> = loop {
        let delays: Vec<Option<f64>> = sqlx::query_scalar(
            "SELECT extract(epoch FROM started_at - created_at)::float8 * 1000
               FROM tasks.workflow_runs WHERE namespace = $1 AND id = ANY($2)",
        )
        .bind(namespace)
        .bind(&trickled)
        .fetch_all(admin)
        .await?;
        if delays.len() == trickled.len() && delays.iter().all(Option::is_some) {
            break delays.into_iter().flatten().collect();
        }
        if waited.elapsed() > START_TIMEOUT {
            return Err(format!(
                "{} trickled runs not started within {START_TIMEOUT:?} of the last start",
                delays.iter().filter(|d| d.is_none()).count()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (last_claim, a_started): (chrono::DateTime<chrono::Utc>, i64) = sqlx::query_as(
        "WITH b AS (SELECT max(started_at) AS last FROM tasks.workflow_runs
                     WHERE namespace = $1 AND id = ANY($2))
         SELECT b.last, (SELECT count(*) FROM tasks.workflow_runs
                          WHERE namespace = $1 AND queue = 'a'
                            AND started_at BETWEEN $3 AND b.last)
           FROM b",
    )
    .bind(namespace)
    .bind(&trickled)
    .bind(began)
    .fetch_one(admin)
    .await?;
    worker.shutdown().await;
    if let Some(dedicated) = dedicated {
        dedicated.shutdown().await;
    }
    drop((client, store));
    db::close(pool).await;
    Ok(FairnessRow {
        key: setup.key().into(),
        label: setup.label(),
        backlog,
        delay_ms: Summary::of(&delays),
        a_started,
        seconds: db::seconds(began, last_claim),
    })
}

/// One condition of the held-snapshot scenario: a series of drains, with or without a
/// snapshot held open throughout by another session.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotRow {
    /// Whether another session held a snapshot open during the drains.
    pub held: bool,
    /// Each drain's steps/s, in order.
    pub drains_steps_per_s: Vec<f64>,
    /// Median of `drains_steps_per_s`.
    pub median_steps_per_s: f64,
    /// Dead tuples of `workflow_runs` and `step_attempts` (statistics collector) after the
    /// drains minus before.
    pub dead_tuples_added: i64,
    /// Dead tuples of both tables right after a manual `VACUUM` that ran while the snapshot
    /// (if any) was still held.
    pub dead_tuples_after_vacuum: i64,
    /// Growth of both tables with their indexes and TOAST during the drains, MiB.
    pub growth_mib: f64,
    /// Age (transactions) of the oldest snapshot of the database when the drains ended.
    pub oldest_xmin_age: i64,
}

/// The held-snapshot scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotResult {
    /// Runs per drain.
    pub runs: usize,
    /// Steps per run.
    pub steps_per_run: u32,
    /// Drains per condition.
    pub drains: usize,
    /// Worker concurrency.
    pub concurrency: usize,
    /// Without a held snapshot, with one, and without again (drift of the machine shows
    /// as a difference between the first and the last).
    pub rows: Vec<SnapshotRow>,
    /// Runs put through the namespace (inserted pending, deleted) before each row's drains.
    pub churn: usize,
    /// Median steps/s with the snapshot held over the mean of both rows' without it.
    pub held_over_free: f64,
}

/// Runs `drains` drains of `runs` × `steps` without a held snapshot, with one, and without
/// again; each row first puts `churn` runs through the namespace (inserted pending and
/// deleted), after the snapshot was taken.
pub async fn held_snapshot(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: u32,
    drains: usize,
    churn: usize,
) -> Result<SnapshotResult> {
    let mut rows = Vec::new();
    for held in [false, true, false] {
        eprintln!("snapshot: {drains} drains, snapshot held: {held}");
        rows.push(snapshot_row(url, admin, (runs, steps, drains, churn), held).await?);
    }
    let free = (rows[0].median_steps_per_s + rows[2].median_steps_per_s) / 2.0;
    let held_over_free = rows[1].median_steps_per_s / free;
    Ok(SnapshotResult {
        runs,
        steps_per_run: steps,
        drains,
        concurrency: CONCURRENCY,
        rows,
        churn,
        held_over_free,
    })
}

/// Dead tuples of both tables, and their total size in bytes.
async fn table_state(admin: &PgPool) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT sum(n_dead_tup)::int8, sum(pg_total_relation_size(relid))::int8
           FROM pg_stat_user_tables
          WHERE schemaname = 'tasks' AND relname IN ('workflow_runs', 'step_attempts')",
    )
    .fetch_one(admin)
    .await?)
}

/// Inserts `runs` pending runs into `namespace` and deletes them again.
async fn churn(admin: &PgPool, namespace: &str, runs: usize) -> Result<()> {
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
    .bind(runs as i64)
    .execute(admin)
    .await?;
    sqlx::query("DELETE FROM tasks.workflow_runs WHERE namespace = $1")
        .bind(namespace)
        .execute(admin)
        .await?;
    Ok(())
}

async fn snapshot_row(
    url: &str,
    admin: &PgPool,
    (runs, steps, drains, churn_runs): (usize, u32, usize, usize),
    held: bool,
) -> Result<SnapshotRow> {
    // Every row starts from vacuumed tables.
    sqlx::query("VACUUM tasks.workflow_runs, tasks.step_attempts")
        .execute(admin)
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (dead_before, size_before) = table_state(admin).await?;
    // A report left open: a REPEATABLE READ transaction that has read once, idle after.
    let mut holder = if held {
        let mut connection = PgConnection::connect(url).await?;
        sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut connection)
            .await?;
        sqlx::query("SELECT count(*) FROM tasks.workflow_runs WHERE namespace = $1")
            .bind("tasks-bench:snapshot-holder")
            .execute(&mut connection)
            .await?;
        Some(connection)
    } else {
        None
    };
    // One namespace for every drain of the row, as one application's: the runs each drain
    // completed stay, and their dead index entries sort ahead of the next drain's runs.
    let namespace = db::namespace(if held {
        "snapshot-held"
    } else {
        "snapshot-free"
    });
    // The runs that went through the namespace before: pending runs that are gone again,
    // whose dead entries sort at the head of the claim's index. While a snapshot older
    // than their deletion is held, no scan may skip them for good and no vacuum remove them.
    let churned = churn(admin, &namespace, churn_runs).await;
    let mut rates = Vec::new();
    let mut outcome = churned;
    for done in 0..drains {
        if outcome.is_err() {
            break;
        }
        match drain(url, admin, &namespace, runs, steps, done * runs).await {
            Ok(rate) => rates.push(rate),
            Err(error) => {
                outcome = Err(error);
                break;
            }
        }
    }
    let xmin_age: Result<i64> = sqlx::query_scalar(
        "SELECT coalesce(max(age(backend_xmin)), 0)::int8 FROM pg_stat_activity
          WHERE datname = current_database()",
    )
    .fetch_one(admin)
    .await
    .map_err(Into::into);
    // The workers' connections are closed: their statistics are flushed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = table_state(admin).await;
    let vacuumed = match sqlx::query("VACUUM tasks.workflow_runs, tasks.step_attempts")
        .execute(admin)
        .await
    {
        Ok(_) => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            table_state(admin).await
        }
        Err(error) => Err(error.into()),
    };
    if let Some(mut connection) = holder.take() {
        let _ = sqlx::query("ROLLBACK").execute(&mut connection).await;
        let _ = connection.close().await;
    }
    db::cleanup(admin, &namespace).await?;
    outcome?;
    let (dead_after, size_after) = after?;
    let (dead_vacuumed, _) = vacuumed?;
    Ok(SnapshotRow {
        held,
        median_steps_per_s: median(&rates),
        drains_steps_per_s: rates,
        dead_tuples_added: dead_after - dead_before,
        dead_tuples_after_vacuum: dead_vacuumed,
        growth_mib: (size_after - size_before) as f64 / (1024.0 * 1024.0),
        oldest_xmin_age: xmin_age?,
    })
}

/// Enqueues and drains `runs` × `steps` in `namespace`, where `done_before` runs completed
/// already; returns steps/s.
async fn drain(
    url: &str,
    admin: &PgPool,
    namespace: &str,
    runs: usize,
    steps: u32,
    done_before: usize,
) -> Result<f64> {
    crate::engine::enqueue(url, namespace, runs, steps).await?;
    let store = db::engine_store(url, namespace, false).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store.clone())
        .concurrency(CONCURRENCY)
        .build()?;
    let start = db::db_clock(admin).await?;
    let handle = worker.spawn();
    let expected = (done_before + runs) as i64;
    let drained = db::wait_completed(admin, namespace, expected, Duration::from_secs(300)).await;
    handle.shutdown().await;
    drop((worker, store));
    db::close(pool).await;
    drained?;
    let last: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(finished_at) FROM tasks.workflow_runs WHERE namespace = $1")
            .bind(namespace)
            .fetch_one(admin)
            .await?;
    Ok((runs * steps as usize) as f64 / db::seconds(start, last))
}

/// The table of both scenarios.
pub fn table(fairness: Option<&FairnessResult>, snapshot: Option<&SnapshotResult>) -> String {
    let mut out = String::new();
    if let Some(result) = fairness {
        let idle = result.rows.first().map(|row| row.delay_ms.p50);
        let _ = writeln!(
            out,
            "\nQUEUE FAIRNESS  {} one-step runs into queue B, one every {} ms, worker concurrency \
             {}; start delay = claimed - created (database clock)",
            result.trickle.runs, result.trickle.every_ms, result.concurrency
        );
        for row in &result.rows {
            let ratio = idle
                .filter(|idle| *idle > 0.0)
                .map(|idle| format!("{:>7.1}x idle p50", row.delay_ms.p50 / idle))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<46} backlog {:>6}  B start delay p50 {:>9.0} ms  p99 {:>9.0} ms  max {:>9.0} ms  {ratio}  ({} A runs started meanwhile, {:.1} s)",
                row.label,
                row.backlog,
                row.delay_ms.p50,
                row.delay_ms.p99,
                row.delay_ms.max,
                row.a_started,
                row.seconds
            );
        }
    }
    if let Some(result) = snapshot {
        let _ = writeln!(
            out,
            "\nHELD SNAPSHOT  {} drains of {} x {} (worker concurrency {}) per row, one after the \
             other in one namespace, after {} runs went through it (inserted pending, deleted); \
             \"held\": another session keeps a REPEATABLE READ transaction open (idle in \
             transaction) from before that through every drain of the row",
            result.drains, result.runs, result.steps_per_run, result.concurrency, result.churn
        );
        for row in &result.rows {
            let rates: Vec<String> = row
                .drains_steps_per_s
                .iter()
                .map(|rate| format!("{rate:.0}"))
                .collect();
            let _ = writeln!(
                out,
                "  {:<9} {:>7.0} steps/s (drains: {})  dead tuples +{} ({} left after VACUUM)  tables +{:.1} MiB  oldest xmin age {}",
                if row.held { "held" } else { "none" },
                row.median_steps_per_s,
                rates.join(", "),
                row.dead_tuples_added,
                row.dead_tuples_after_vacuum,
                row.growth_mib,
                row.oldest_xmin_age
            );
        }
        let _ = writeln!(
            out,
            "  held / none: {:.2} of the steps/s (median of the held row over the mean of the free rows)",
            result.held_over_free
        );
    }
    out
}
