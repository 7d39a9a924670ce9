//! The ceiling: the engine's own per-step statements issued directly through sqlx, with no
//! engine around them, so the rate they commit at is the physical limit for steps on this
//! machine and database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use sqlx::Row as _;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::Result;
use crate::db::{self, Costs, Counters, Cpu, CpuUse};
use crate::stats::Summary;

/// The worker id the ceiling's runs are leased to, so that the fences match.
const WORKER_ID: &str = "tasks-bench-ceiling";

/// The claim epoch the ceiling's runs are held by (inserted running, never claimed: the
/// column's default), so that the fences match.
const CLAIM_EPOCH: i64 = 0;

/// Columns returned by the step statements: `STEP_COLUMNS` of
/// `tasks-postgres/src/rows.rs`.
const STEP_COLUMNS: &str = "namespace, id, workflow_run_id, step_name, kind, status, \
    config, context, output, error, child_workflow_run_namespace, child_workflow_run_id, \
    started_at, finished_at, created_at, updated_at";

/// COPIED from `PgStore::record_step_attempt` (`tasks-postgres/src/steps.rs`): the fenced
/// single-row `INSERT … SELECT` of a finished attempt, which the engine takes when the
/// shared recorder's batch statement was refused (its hot path is the batch statement of
/// `record_steps_sql`, which the workload rows use). The copy leaves out the `args` column
/// (NULL for the no-op steps measured) and the clause that answers a second try with the
/// stored attempt.
fn record_step_attempt_sql() -> String {
    format!(
        "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                  started_at, finished_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, $7, $8, $9, $10,
                    clock_timestamp() - $11 * INTERVAL '1 microsecond',
                    clock_timestamp(), clock_timestamp(), clock_timestamp()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.status = 'running' AND wr.worker_id = $4
                AND wr.claim_epoch = $12
          RETURNING {STEP_COLUMNS}"
    )
}

/// COPIED from `PgStore::create_step_attempt` (`tasks-postgres/src/steps.rs`): the
/// fenced `INSERT … SELECT` that records an attempt as running. Function steps used it
/// before "one commit per step" (durable sleeps still do). Keep it in sync.
fn create_step_attempt_sql() -> String {
    format!(
        "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, 'running', $7, $8, now(), clock_timestamp(), now()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.status = 'running' AND wr.worker_id = $4
                AND wr.claim_epoch = $9
          RETURNING {STEP_COLUMNS}"
    )
}

/// COPIED from `PgStore::complete_step_attempt` (`tasks-postgres/src/steps.rs`): the fenced
/// `UPDATE … FROM` that records an attempt's output. Keep it in sync.
fn complete_step_attempt_sql() -> String {
    let returning = STEP_COLUMNS
        .split(',')
        .map(|column| format!("sa.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "UPDATE tasks.step_attempts sa
                SET status = $4, output = $5, error = $6, finished_at = now(), updated_at = now()
               FROM tasks.workflow_runs wr
              WHERE sa.namespace = $1 AND sa.workflow_run_id = $2 AND sa.id = $3
                AND sa.status = 'running'
                AND wr.namespace = sa.namespace AND wr.id = sa.workflow_run_id
                AND wr.status = 'running' AND wr.worker_id = $7 AND wr.claim_epoch = $8
          RETURNING {returning}"
    )
}

/// NOT engine SQL: the engine's record statement with its commit made asynchronous
/// (`synchronous_commit = off` for that one transaction, set from inside the statement so
/// that it still takes one round trip). The run's synchronous completion flushes the WAL up
/// to and including every step recorded before it, so only the window before the next
/// synchronous commit (at most `wal_writer_delay` later) could lose step records on a
/// database crash, and those steps would run again on replay: the at-least-once promise
/// a crash between a step's execution and its record already gives. Measured to show what
/// not waiting for a flush per step buys.
fn record_step_attempt_async_sql() -> String {
    record_step_attempt_sql().replace(
        "AND wr.worker_id = $4",
        "AND wr.worker_id = $4 AND set_config('synchronous_commit', 'off', true) IS NOT NULL",
    )
}

/// NOT engine SQL: the engine's record statement returning only what the engine does not
/// already know (the attempt's id and times) instead of the whole row with its JSON.
/// Measured to show what the full `RETURNING` costs.
fn record_step_attempt_lean_sql() -> String {
    record_step_attempt_sql().replace(
        &format!("RETURNING {STEP_COLUMNS}"),
        "RETURNING id, started_at, finished_at, created_at",
    )
}

/// Most records in one batch.
const BATCH: usize = 256;

/// Batches in flight at once.
const BATCH_WRITERS: usize = 4;

/// A step record waiting for its batch.
struct Pending {
    run_id: Uuid,
    /// The claim epoch the run's writes are fenced with.
    epoch: i64,
    id: Uuid,
    step_name: String,
    done: oneshot::Sender<bool>,
}

/// Spawns `writers` tasks that take turns at one queue: each takes whatever is queued (at
/// least one item, at most [`BATCH`]), hands it to `write` (one statement, which answers the
/// items), and repeats until every sender is gone.
fn spawn_writers<T, F, Fut>(
    writers: usize,
    write: F,
) -> (
    mpsc::UnboundedSender<T>,
    Vec<JoinHandle<std::result::Result<(), sqlx::Error>>>,
)
where
    T: Send + 'static,
    F: Fn(Vec<T>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<(), sqlx::Error>> + Send,
{
    let (tx, rx) = mpsc::unbounded_channel::<T>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let writers = (0..writers)
        .map(|_| {
            let (rx, write) = (rx.clone(), write.clone());
            tokio::spawn(async move {
                loop {
                    let mut batch = Vec::with_capacity(BATCH);
                    if rx.lock().await.recv_many(&mut batch, BATCH).await == 0 {
                        return Ok(());
                    }
                    write(batch).await?;
                }
            })
        })
        .collect();
    (tx, writers)
}

/// Binds the recorder's thirteen arrays for completed no-op function steps, given as (run id,
/// attempt id, step name, claim epoch), filled as the recorder fills them.
fn bind_noop_steps<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    namespace: &'q str,
    steps: &[(Uuid, Uuid, &'q str, i64)],
    config: &'q str,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let n = steps.len();
    query
        .bind(vec![namespace; n])
        .bind(steps.iter().map(|step| step.1).collect::<Vec<_>>())
        .bind(steps.iter().map(|step| step.0).collect::<Vec<_>>())
        .bind(vec![WORKER_ID; n])
        .bind(steps.iter().map(|step| step.2).collect::<Vec<_>>())
        .bind(vec!["function"; n])
        .bind(vec!["completed"; n])
        .bind(vec![config; n])
        .bind(vec![Some("null"); n])
        .bind(vec![None::<&str>; n])
        .bind(vec![None::<&str>; n])
        .bind(vec![0_i64; n])
        .bind(steps.iter().map(|step| step.3).collect::<Vec<_>>())
}

/// The ids in the `id` column of `rows`.
fn returned_ids(rows: &[sqlx::postgres::PgRow]) -> std::collections::HashSet<Uuid> {
    rows.iter()
        .filter_map(|row| row.try_get::<Uuid, _>("id").ok())
        .collect()
}

/// Writes queued records in batches with the engine's step statement, `writers` batches at
/// a time, until every sender is gone. Counts the statements it issues.
fn spawn_batch_writers(
    pool: PgPool,
    namespace: Arc<str>,
    config: Value,
    statements: Arc<AtomicUsize>,
    writers: usize,
) -> (
    mpsc::UnboundedSender<Pending>,
    Vec<JoinHandle<std::result::Result<(), sqlx::Error>>>,
) {
    let config: Arc<str> = Arc::from(config.to_string());
    // The engine's own text, not a copy: the statement its step recorder sends.
    let sql: Arc<str> = Arc::from(tasks::postgres::__bench::record_steps_sql());
    spawn_writers(writers, move |batch: Vec<Pending>| {
        let (pool, namespace, config, statements, sql) = (
            pool.clone(),
            namespace.clone(),
            config.clone(),
            statements.clone(),
            sql.clone(),
        );
        async move {
            let steps: Vec<(Uuid, Uuid, &str, i64)> = batch
                .iter()
                .map(|p| (p.run_id, p.id, p.step_name.as_str(), p.epoch))
                .collect();
            let rows = bind_noop_steps(sqlx::query(&sql), &namespace, &steps, &config)
                .fetch_all(&pool)
                .await?;
            statements.fetch_add(1, Ordering::Relaxed);
            let written = returned_ids(&rows);
            for pending in batch {
                let _ = pending.done.send(written.contains(&pending.id));
            }
            Ok(())
        }
    })
}

/// Which statements one step costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statements {
    /// The engine's: record the finished attempt. One commit.
    Record,
    /// The engine's record, committed asynchronously. One commit, no flush wait.
    RecordAsync,
    /// The engine's record, returning only the id and times.
    RecordLean,
    /// The engine's earlier path: create the attempt (running), then complete it. Two
    /// commits.
    CreateComplete,
    /// Hypothetical: concurrent steps' records coalesced into multi-row inserts.
    Batched,
}

/// One ceiling measurement.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Short identifier (JSON key).
    pub key: &'static str,
    /// What the row shows.
    pub label: &'static str,
    /// Statements per step.
    pub statements: Statements,
    /// Pool size.
    pub connections: u32,
    /// Concurrent tasks issuing steps (a worker's concurrency).
    pub concurrency: usize,
    /// Runs the steps are spread over.
    pub runs: usize,
    /// Sequential steps per run.
    pub steps_per_run: usize,
    /// sqlx `test_before_acquire` (a ping round trip before each pooled query; sqlx's and
    /// the engine's default is on).
    pub ping: bool,
    /// Whether TCP_NODELAY stays as sqlx sets it (on).
    pub nodelay: bool,
}

/// The result of one ceiling measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Short identifier.
    pub key: &'static str,
    /// What the row shows.
    pub label: &'static str,
    /// Pool size.
    pub connections: u32,
    /// Concurrent tasks.
    pub concurrency: usize,
    /// sqlx `test_before_acquire`.
    pub ping: bool,
    /// TCP_NODELAY on.
    pub nodelay: bool,
    /// Statements (each its own transaction, so commits) per step.
    pub statements_per_step: f64,
    /// Steps recorded.
    pub steps: usize,
    /// Wall time.
    pub seconds: f64,
    /// Steps per second (the median round).
    pub steps_per_s: f64,
    /// Steps per second of every round, in the order measured.
    pub samples_steps_per_s: Vec<f64>,
    /// Commits per second.
    pub commits_per_s: f64,
    /// Mean time per step seen by one task, in milliseconds.
    pub ms_per_step_per_task: f64,
    /// Database cost per step.
    pub per_step: Costs,
    /// CPU per step.
    pub cpu_per_step: CpuUse,
}

/// Measures one ceiling variant in its own namespace and removes its rows afterwards.
pub async fn measure(url: &str, admin: &PgPool, spec: &Spec) -> Result<Row> {
    let namespace = db::namespace(&format!("ceiling-{}", spec.key));
    let result = measure_in(url, admin, spec, &namespace).await;
    db::cleanup(admin, &namespace).await?;
    result
}

async fn measure_in(url: &str, admin: &PgPool, spec: &Spec, namespace: &str) -> Result<Row> {
    // Runs leased to our worker id, as a claim would leave them, so that every fence holds.
    let runs: Vec<Uuid> = sqlx::query_scalar(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, worker_id, attempts, available_at,
              started_at, created_at, updated_at)
         SELECT $1, gen_random_uuid(), 'bench-ceiling', 'running', $2, 1,
                now() + INTERVAL '1 hour', now(), now(), now()
           FROM generate_series(1, $3)
         RETURNING id",
    )
    .bind(namespace)
    .bind(WORKER_ID)
    .bind(spec.runs as i64)
    .fetch_all(admin)
    .await?;

    let before = db::pg_sockets(url)?;
    let pool = db::raw_pool(url, spec.connections, spec.ping).await?;
    if !spec.nodelay {
        db::set_nodelay(&db::new_pg_sockets(url, &before)?, false)?;
    }
    let runs = Arc::new(runs);
    let next = Arc::new(AtomicUsize::new(0));
    let namespace: Arc<str> = Arc::from(namespace);
    let record = Arc::new(match spec.statements {
        Statements::RecordAsync => record_step_attempt_async_sql(),
        Statements::RecordLean => record_step_attempt_lean_sql(),
        _ => record_step_attempt_sql(),
    });
    let create = Arc::new(create_step_attempt_sql());
    let complete = Arc::new(complete_step_attempt_sql());
    // The config the engine stores with a function step's attempt.
    let config = json!({ "attempt": 1, "retryPolicy": tasks::RetryPolicy::DEFAULT_STEP });
    let statements = Arc::new(AtomicUsize::new(0));
    let (queue, writers) = if spec.statements == Statements::Batched {
        let (queue, writers) = spawn_batch_writers(
            pool.clone(),
            namespace.clone(),
            config.clone(),
            statements.clone(),
            BATCH_WRITERS,
        );
        (Some(queue), writers)
    } else {
        (None, Vec::new())
    };

    let counters = Counters::read(admin).await?;
    let cpu = Cpu::read();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(spec.concurrency);
    for _ in 0..spec.concurrency {
        let (pool, runs, next, namespace) =
            (pool.clone(), runs.clone(), next.clone(), namespace.clone());
        let (record, create, complete, config) = (
            record.clone(),
            create.clone(),
            complete.clone(),
            config.clone(),
        );
        let (queue, issued) = (queue.clone(), statements.clone());
        let statements = spec.statements;
        let steps_per_run = spec.steps_per_run;
        tasks.push(tokio::spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&run_id) = runs.get(index) else {
                    return Ok::<_, sqlx::Error>(());
                };
                for step in 0..steps_per_run {
                    let name = if step == 0 {
                        "noop".to_owned()
                    } else {
                        format!("noop:{step}")
                    };
                    let attempt_id = Uuid::now_v7();
                    match statements {
                        Statements::Batched => {
                            let (done, written) = oneshot::channel();
                            let pending = Pending {
                                run_id,
                                epoch: CLAIM_EPOCH,
                                id: attempt_id,
                                step_name: name,
                                done,
                            };
                            let queued = queue.as_ref().map(|queue| queue.send(pending).is_ok());
                            if queued != Some(true) || written.await != Ok(true) {
                                return Err(sqlx::Error::RowNotFound);
                            }
                        }
                        Statements::Record | Statements::RecordAsync | Statements::RecordLean => {
                            issued.fetch_add(1, Ordering::Relaxed);
                            sqlx::query(&record)
                                .bind(&*namespace)
                                .bind(run_id)
                                .bind(attempt_id)
                                .bind(WORKER_ID)
                                .bind(&name)
                                .bind("function")
                                .bind("completed")
                                .bind(&config)
                                .bind(Some(Value::Null))
                                .bind(None::<Value>)
                                .bind(1_i64)
                                .bind(CLAIM_EPOCH)
                                .fetch_optional(&pool)
                                .await?
                                .ok_or(sqlx::Error::RowNotFound)?;
                        }
                        Statements::CreateComplete => {
                            issued.fetch_add(2, Ordering::Relaxed);
                            sqlx::query(&create)
                                .bind(&*namespace)
                                .bind(run_id)
                                .bind(attempt_id)
                                .bind(WORKER_ID)
                                .bind(&name)
                                .bind("function")
                                .bind(&config)
                                .bind(None::<Value>)
                                .bind(CLAIM_EPOCH)
                                .fetch_optional(&pool)
                                .await?
                                .ok_or(sqlx::Error::RowNotFound)?;
                            sqlx::query(&complete)
                                .bind(&*namespace)
                                .bind(run_id)
                                .bind(attempt_id)
                                .bind("completed")
                                .bind(Some(Value::Null))
                                .bind(None::<Value>)
                                .bind(WORKER_ID)
                                .bind(CLAIM_EPOCH)
                                .fetch_optional(&pool)
                                .await?
                                .ok_or(sqlx::Error::RowNotFound)?;
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    drop(queue);
    for writer in writers {
        writer.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = Cpu::read();
    pool.close().await;
    let after = Counters::read_settled(admin).await?;

    let steps = spec.runs * spec.steps_per_run;
    let statements = statements.load(Ordering::Relaxed) as f64;
    let steps_per_s = steps as f64 / seconds;
    let tasks = spec.concurrency.min(spec.runs) as f64;
    Ok(Row {
        key: spec.key,
        label: spec.label,
        connections: spec.connections,
        concurrency: spec.concurrency,
        ping: spec.ping,
        nodelay: spec.nodelay,
        statements_per_step: statements / steps as f64,
        steps,
        seconds,
        steps_per_s,
        samples_steps_per_s: vec![steps_per_s],
        commits_per_s: statements / seconds,
        ms_per_step_per_task: seconds * 1000.0 * tasks / steps as f64,
        per_step: counters.per(&after, steps as f64),
        cpu_per_step: cpu.per(&cpu_after, steps as f64),
    })
}

/// `pg_notify` measured alone: how fast notifying transactions commit, and how long a
/// notification takes to reach a listener.
#[derive(Debug, Clone, Serialize)]
pub struct NotifyProbe {
    /// Notifications sent by `concurrency` tasks over `connections` connections.
    pub sent: usize,
    /// Pool size.
    pub connections: u32,
    /// Concurrent tasks.
    pub concurrency: usize,
    /// Notifying transactions committed per second.
    pub commits_per_s: f64,
    /// One `SELECT pg_notify(..)` at a time → received by a `LISTEN`ing connection, in ms.
    pub delivery_ms: Summary,
}

/// Measures [`NotifyProbe`] on a channel of its own (nothing of the engine listens to it).
pub async fn notify_probe(
    url: &str,
    connections: u32,
    concurrency: usize,
    sent: usize,
    samples: usize,
) -> Result<NotifyProbe> {
    let channel = format!("tasks_bench_probe_{}", std::process::id());
    let pool = db::raw_pool(url, connections, true).await?;
    let mut listener = PgListener::connect(url).await?;
    listener.listen(&channel).await?;

    // Delivery latency, one notification at a time.
    let mut delivery = Vec::with_capacity(samples);
    for i in 0..samples {
        let payload = i.to_string();
        let started = Instant::now();
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(&channel)
            .bind(&payload)
            .execute(&pool)
            .await?;
        loop {
            let message = tokio::time::timeout(Duration::from_secs(5), listener.recv()).await??;
            if message.payload() == payload {
                break;
            }
        }
        delivery.push(started.elapsed().as_secs_f64() * 1000.0);
    }

    // Commit rate of notifying transactions; the listener keeps draining meanwhile.
    let drain = tokio::spawn(async move {
        while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), listener.recv()).await {}
    });
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (pool, next, channel) = (pool.clone(), next.clone(), channel.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < sent {
                sqlx::query("SELECT pg_notify($1, 'x')")
                    .bind(&channel)
                    .execute(&pool)
                    .await?;
            }
            Ok::<_, sqlx::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let seconds = started.elapsed().as_secs_f64();
    pool.close().await;
    drain.abort();
    Ok(NotifyProbe {
        sent,
        connections,
        concurrency,
        commits_per_s: sent as f64 / seconds,
        delivery_ms: Summary::of(&delivery),
    })
}

/// The drain's whole statement mix through sqlx alone: what the engine's own statements
/// allow for a workload of `runs` runs of `steps` no-op steps, with no engine around them.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadCeiling {
    /// Runs drained.
    pub runs: usize,
    /// Steps per run.
    pub steps_per_run: usize,
    /// First claim → last completion, seconds.
    pub seconds: f64,
    /// Steps per second.
    pub steps_per_s: f64,
    /// Claim statements issued.
    pub claims: usize,
}

/// Statements of one kind in flight at once, for [`workload`]: one, as the engine's
/// recorder and completer. Measured on the 2-core machine of bench/README.md, two or four
/// made the raw workload slower (smaller batches, more commits, same CPUs), so one is its
/// ceiling.
const WORKLOAD_WRITERS: usize = 1;

/// Measures [`WorkloadCeiling`] in a namespace of its own and removes its rows afterwards.
///
/// The same statements as the engine, issued the way the engine issues them, minus the
/// engine: runs are inserted pending (as `start()` leaves them; not timed); then one claimer
/// claims as many runs as there are free slots (`concurrency` slots, the engine's claim
/// SQL), one task per claimed run writes its steps one after another through batch writers
/// (the recorder's SQL, [`WORKLOAD_WRITERS`] statements in flight), except the last, which
/// goes with its completion through batch writers of the completer's SQL; its slot is free
/// as soon as the completion is queued (as in the engine, where a slot is freed when the
/// workflow function returns).
pub async fn workload(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: usize,
    connections: u32,
    concurrency: usize,
) -> Result<WorkloadCeiling> {
    let namespace = db::namespace(&format!("raw-{runs}x{steps}"));
    let result = workload_in(
        url,
        admin,
        runs,
        steps,
        connections,
        concurrency,
        &namespace,
    )
    .await;
    db::cleanup(admin, &namespace).await?;
    result
}

/// A completion waiting for its batch, with the run's last step (as the engine sends it).
struct Completing {
    run_id: Uuid,
    /// The claim epoch the run's writes are fenced with.
    epoch: i64,
    last_step: Option<(Uuid, String)>,
    done: oneshot::Sender<bool>,
}

async fn workload_in(
    url: &str,
    admin: &PgPool,
    runs: usize,
    steps: usize,
    connections: u32,
    concurrency: usize,
    namespace: &str,
) -> Result<WorkloadCeiling> {
    sqlx::query(
        "INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, status, available_at, created_at, updated_at)
         SELECT $1, gen_random_uuid(), 'bench-raw', 'pending', now(), clock_timestamp(),
                clock_timestamp()
           FROM generate_series(1, $2)",
    )
    .bind(namespace)
    .bind(runs as i64)
    .execute(admin)
    .await?;
    db::analyze(admin).await?;

    let pool = db::raw_pool(url, connections, true).await?;
    let ns: Arc<str> = Arc::from(namespace);
    let config = json!({ "attempt": 1, "retryPolicy": tasks::RetryPolicy::DEFAULT_STEP });
    let config_text: Arc<str> = Arc::from(config.to_string());
    let statements = Arc::new(AtomicUsize::new(0));
    let (records, record_writers) = spawn_batch_writers(
        pool.clone(),
        ns.clone(),
        config,
        statements.clone(),
        WORKLOAD_WRITERS,
    );
    let (completions, completion_writers) =
        spawn_completion_writers(pool.clone(), ns.clone(), config_text.clone());

    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency));
    // The statement the store claims with in a namespace where no queue has a limit.
    let claim_sql = tasks::postgres::__bench::plain_claim_runs_sql();
    let deadline_error = json!({ "message": "Workflow run deadline exceeded" });
    let started = Instant::now();
    let mut claimed = 0;
    let mut claims = 0;
    let mut tasks = tokio::task::JoinSet::new();
    while claimed < runs {
        // Wait for one free slot, then take every other free one: claim in batches.
        let mut permit = slots.clone().acquire_owned().await?;
        let free = slots.available_permits();
        if free > 0 {
            permit.merge(slots.clone().acquire_many_owned(free as u32).await?);
        }
        // As the store claims: in a transaction whose `BEGIN` sets the plan mode.
        let mut claim = pool
            .begin_with(tasks::postgres::__bench::claim_begin())
            .await?;
        let rows = sqlx::query(claim_sql)
            .bind(&*ns)
            .bind(WORKER_ID)
            .bind(60_000_i64)
            .bind(permit.num_permits() as i64)
            .bind(&deadline_error)
            .bind(tasks::postgres::__bench::claim_keyed_candidates(
                permit.num_permits() as u32,
            ))
            .bind(None::<Vec<String>>)
            .bind(None::<Vec<String>>)
            .fetch_all(&mut *claim)
            .await?;
        claim.commit().await?;
        // Each run with the epoch its claim gave it, which fences its writes.
        let ids = rows
            .iter()
            .map(|row| {
                Ok((
                    row.try_get::<Uuid, _>("id")?,
                    row.try_get::<i64, _>("claim_epoch")?,
                ))
            })
            .collect::<std::result::Result<Vec<(Uuid, i64)>, sqlx::Error>>()?;
        claims += 1;
        claimed += ids.len();
        for (run_id, epoch) in ids {
            let slot = permit.split(1).expect("one permit per claimed run");
            let (records, completions) = (records.clone(), completions.clone());
            tasks.spawn(async move {
                let step_name = |step: usize| {
                    if step == 0 {
                        "noop".to_owned()
                    } else {
                        format!("noop:{step}")
                    }
                };
                // Every step but the last on its own; the last one with the completion.
                for step in 0..steps.saturating_sub(1) {
                    let (done, written) = oneshot::channel();
                    let pending = Pending {
                        run_id,
                        epoch,
                        id: Uuid::now_v7(),
                        step_name: step_name(step),
                        done,
                    };
                    if records.send(pending).is_err() || written.await != Ok(true) {
                        return Err(sqlx::Error::RowNotFound);
                    }
                }
                let last_step = steps
                    .checked_sub(1)
                    .map(|last| (Uuid::now_v7(), step_name(last)));
                let (done, completed) = oneshot::channel();
                let queued = completions
                    .send(Completing {
                        run_id,
                        epoch,
                        last_step,
                        done,
                    })
                    .is_ok();
                // As the engine: the slot is free once the run has nothing left to execute,
                // while its completion commits.
                drop(slot);
                if !queued || completed.await != Ok(true) {
                    return Err(sqlx::Error::RowNotFound);
                }
                Ok(())
            });
        }
    }
    while let Some(task) = tasks.join_next().await {
        task??;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop((records, completions));
    for writer in record_writers.into_iter().chain(completion_writers) {
        writer.await??;
    }
    pool.close().await;
    Ok(WorkloadCeiling {
        runs,
        steps_per_run: steps,
        seconds,
        steps_per_s: (runs * steps) as f64 / seconds,
        claims,
    })
}

/// Completes queued runs in batches with the engine's completion statement,
/// [`WORKLOAD_WRITERS`] batches at a time, until every sender is gone.
fn spawn_completion_writers(
    pool: PgPool,
    namespace: Arc<str>,
    config: Arc<str>,
) -> (
    mpsc::UnboundedSender<Completing>,
    Vec<JoinHandle<std::result::Result<(), sqlx::Error>>>,
) {
    // The engine's own text: the statement its run completer sends.
    let sql: Arc<str> = Arc::from(tasks::postgres::__bench::complete_runs_sql());
    spawn_writers(WORKLOAD_WRITERS, move |batch: Vec<Completing>| {
        let (pool, namespace, config, sql) =
            (pool.clone(), namespace.clone(), config.clone(), sql.clone());
        async move {
            let n = batch.len();
            let ids: Vec<Uuid> = batch.iter().map(|c| c.run_id).collect();
            let steps: Vec<(Uuid, Uuid, &str, i64)> = batch
                .iter()
                .filter_map(|c| {
                    let (id, name) = c.last_step.as_ref()?;
                    Some((c.run_id, *id, name.as_str(), c.epoch))
                })
                .collect();
            let completions = sqlx::query(&sql)
                .bind(vec![&*namespace; n])
                .bind(&ids)
                .bind(vec![WORKER_ID; n])
                .bind(vec!["null"; n])
                .bind(batch.iter().map(|c| c.epoch).collect::<Vec<_>>());
            // The runs' last steps follow.
            let rows = bind_noop_steps(completions, &namespace, &steps, &config)
                .fetch_all(&pool)
                .await?;
            let written = returned_ids(&rows);
            for completing in batch {
                let _ = completing.done.send(written.contains(&completing.run_id));
            }
            Ok(())
        }
    })
}
