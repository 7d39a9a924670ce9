//! The Rust peers of `tasks-bench`: DBOS's Rust SDK (`dbos`) and `durare`, each given the
//! benchmark's workload — `runs` runs of `steps` no-op steps, enqueued first, then drained
//! by one executor in this process — on a database of their own.
//!
//! ```sh
//! tasks-bench-peers dbos   --database-url URL --runs 1000 --steps 4 --concurrency 100
//! tasks-bench-peers durare --database-url URL --runs 1000 --steps 4 --concurrency 100
//! ```
//!
//! Prints one JSON object on stdout. Each peer keeps its defaults except the one setting the
//! workload needs: a queue whose per-process worker concurrency is `--concurrency` (both
//! peers' queues are unbounded by default). The drain is timed on the database clock, from
//! just before the executor starts to the last run's completion as the peer recorded it.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const QUEUE: &str = "bench";
const WORKFLOW: &str = "bench_steps";
/// Longest a drain may take before the peer gives up.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// Runs enqueued at once.
const ENQUEUE_CONCURRENCY: usize = 16;

struct Args {
    peer: String,
    url: String,
    runs: usize,
    steps: u32,
    concurrency: usize,
}

fn parse() -> std::result::Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let peer = args.next().ok_or("usage: tasks-bench-peers dbos|durare --database-url URL --runs N --steps N --concurrency N")?;
    let (mut url, mut runs, mut steps, mut concurrency) = (None, 1000, 4, 100);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{arg}: {e}"));
        match arg.as_str() {
            "--database-url" => url = Some(value.clone()),
            "--runs" => runs = number()?,
            "--steps" => steps = number()? as u32,
            "--concurrency" => concurrency = number()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        peer,
        url: url.ok_or("--database-url is required")?,
        runs,
        steps,
        concurrency,
    })
}

#[tokio::main]
async fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let outcome = match args.peer.as_str() {
        "dbos" => dbos_drain(&args).await,
        "durare" => durare_drain(&args).await,
        other => Err(format!("unknown peer {other} (dbos or durare)").into()),
    };
    match outcome {
        Ok(report) => println!("{report}"),
        Err(error) => {
            eprintln!("tasks-bench-peers {}: {error}", args.peer);
            std::process::exit(1);
        }
    }
}

/// What every peer measured; the harness reads these fields.
struct Drain {
    enqueue_seconds: f64,
    seconds: f64,
    wall_seconds: f64,
}

fn report(args: &Args, version: &str, settings: serde_json::Value, drain: Drain) -> String {
    let steps = args.runs as f64 * f64::from(args.steps);
    json!({
        "peer": args.peer,
        "version": version,
        "runs": args.runs,
        "steps_per_run": args.steps,
        "concurrency": args.concurrency,
        "enqueue_runs_per_s": args.runs as f64 / drain.enqueue_seconds,
        "seconds": drain.seconds,
        "wall_seconds": drain.wall_seconds,
        "workflows_per_s": args.runs as f64 / drain.seconds,
        "steps_per_s": steps / drain.seconds,
        "settings": settings,
    })
    .to_string()
}

/// The harness's own connection to the peer's database: two connections, for the clock and
/// the completion poll.
async fn observer(url: &str) -> Result<PgPool> {
    Ok(PgPoolOptions::new().max_connections(2).connect(url).await?)
}

/// The database clock, in milliseconds since the epoch (the unit both peers store).
async fn db_clock_ms(pool: &PgPool) -> Result<f64> {
    Ok(
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8")
            .fetch_one(pool)
            .await?,
    )
}

/// Polls the DBOS system tables (both peers share their schema) until `runs` workflows
/// have succeeded; returns the last one's completion, ms since the epoch (database clock).
/// A workflow that errored ends the wait at once.
async fn wait_succeeded(pool: &PgPool, runs: usize) -> Result<f64> {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let (succeeded, errored, last): (i64, i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = $1),
                    count(*) FILTER (WHERE status = $2),
                    max(updated_at) FILTER (WHERE status = $1)
               FROM dbos.workflow_status WHERE name = $3",
        )
        .bind("SUCCESS")
        .bind("ERROR")
        .bind(WORKFLOW)
        .fetch_one(pool)
        .await?;
        if errored > 0 {
            return Err(format!("{errored} workflows ended in ERROR").into());
        }
        if succeeded as usize >= runs {
            return Ok(last.unwrap_or_default() as f64);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {succeeded} of {runs} workflows done after {DRAIN_TIMEOUT:?}"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Times the drain: `start` starts the executor; the clock runs from just before it to the
/// last completion.
async fn timed<F: Future<Output = Result<()>>>(
    pool: &PgPool,
    runs: usize,
    start: F,
) -> Result<(f64, f64)> {
    let begun = db_clock_ms(pool).await?;
    let wall = Instant::now();
    start.await?;
    let last = wait_succeeded(pool, runs).await?;
    Ok(((last - begun) / 1000.0, wall.elapsed().as_secs_f64()))
}

async fn dbos_drain(args: &Args) -> Result<String> {
    use dbos::{Client, ClientConfig, Config, DBOS, QueueConflict, QueueOptions};

    let register = |dbos: &DBOS| {
        dbos.register_workflow(WORKFLOW, |steps: u32| async move {
            for i in 0..steps {
                let recorded: dbos::Result<()> =
                    dbos::step(&format!("s{i}"), || async { Ok::<(), dbos::Error>(()) }).await;
                recorded?;
            }
            Ok::<u32, dbos::Error>(steps)
        })
        .map(drop)
    };
    let config = |listen: Option<Vec<String>>| Config {
        app_version: Some("bench".to_owned()),
        listen_queues: listen,
        ..Config::new("tasks-bench-peer", &args.url)
    };

    // An application that runs nothing migrates the schema and registers the queue; a
    // client enqueues the runs.
    let setup = DBOS::new(config(Some(Vec::new())));
    register(&setup)?;
    setup.launch().await?;
    setup
        .register_queue(
            QUEUE,
            QueueOptions {
                worker_concurrency: Some(args.concurrency as i32),
                ..QueueOptions::default()
            },
            QueueConflict::UpdateIfLatestVersion,
        )
        .await?;
    let client = Client::connect(ClientConfig {
        app_name: Some("tasks-bench-peer".to_owned()),
        ..ClientConfig::new(&args.url)
    })
    .await?;
    let enqueued = Instant::now();
    enqueue_all(args.runs, |_| {
        let client = &client;
        async move {
            client
                .enqueue::<u32, u32, dbos::EngineOnly>(WORKFLOW, QUEUE, args.steps)
                .await
                .map(drop)
                .map_err(Into::into)
        }
    })
    .await?;
    let enqueue_seconds = enqueued.elapsed().as_secs_f64();
    client.close().await;
    setup.shutdown().await;

    // The executor that drains them: every queue, the defaults otherwise.
    let pool = observer(&args.url).await?;
    let executor = DBOS::new(config(None));
    register(&executor)?;
    let (seconds, wall_seconds) = timed(&pool, args.runs, async {
        executor.launch().await.map_err(Into::into)
    })
    .await?;
    executor.shutdown().await;
    pool.close().await;
    let defaults = Config::new("x", "");
    Ok(report(
        args,
        "dbos 0.5.0",
        json!({
            "queue_worker_concurrency": args.concurrency,
            "queue_polling_interval_ms": QueueOptions::default().polling_interval.as_millis() as u64,
            "max_connections": defaults.max_connections,
            "use_listen_notify": defaults.use_listen_notify,
        }),
        Drain {
            enqueue_seconds,
            seconds,
            wall_seconds,
        },
    ))
}

async fn durare_drain(args: &Args) -> Result<String> {
    use durare::{DurableContext, DurableEngine, WorkflowOptions, WorkflowQueue};

    let queue = WorkflowQueue::new(QUEUE).worker_concurrency(args.concurrency);
    let polling_ms = queue.base_polling_interval.as_millis() as u64;
    let per_iteration = queue.max_tasks_per_iteration;
    let mut builder = DurableEngine::connect(&args.url).await?;
    builder.register(WORKFLOW, |ctx: DurableContext, steps: u32| async move {
        for i in 0..steps {
            ctx.step(&format!("s{i}"), || async { durare::Result::Ok(()) })
                .await?;
        }
        durare::Result::Ok(steps)
    });
    builder.register_queue(queue);
    let engine = builder.build().await?;

    // Enqueued before launch: nothing dequeues until the dispatcher starts.
    let enqueued = Instant::now();
    enqueue_all(args.runs, |_| {
        let engine = &engine;
        async move {
            engine
                .start::<u32, u32>(
                    WORKFLOW,
                    args.steps,
                    WorkflowOptions::default().queue(QUEUE),
                )
                .await
                .map(drop)
                .map_err(Into::into)
        }
    })
    .await?;
    let enqueue_seconds = enqueued.elapsed().as_secs_f64();

    let pool = observer(&args.url).await?;
    let (seconds, wall_seconds) = timed(&pool, args.runs, async {
        engine.launch().await.map_err(Into::into)
    })
    .await?;
    engine.shutdown(Duration::from_secs(5)).await?;
    pool.close().await;
    Ok(report(
        args,
        "durare 0.5.0",
        json!({
            "queue_worker_concurrency": args.concurrency,
            "queue_base_polling_interval_ms": polling_ms,
            "queue_max_tasks_per_iteration": per_iteration,
        }),
        Drain {
            enqueue_seconds,
            seconds,
            wall_seconds,
        },
    ))
}

/// Runs `enqueue(i)` for every run, `ENQUEUE_CONCURRENCY` at a time.
async fn enqueue_all<F, Fut>(runs: usize, enqueue: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(0..runs)
        .map(enqueue)
        .buffer_unordered(ENQUEUE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}
