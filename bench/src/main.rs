//! `tasks-bench`: throughput, latency, replay and scale-out of the engine, measured against
//! the raw commit rate of its own SQL on the same Postgres, in one run; and the same drain by
//! its peers (OpenWorkflow, DBOS, durare), in turns with the engine's (`bench/peers/`).
//!
//! ```sh
//! cargo run --release -p tasks-bench                # full run, a few minutes
//! cargo run --release -p tasks-bench -- --quick     # smoke run, under a minute
//! ```
//!
//! See `bench/README.md` for what each figure means.
#![warn(missing_docs)]

mod ceiling;
mod db;
mod engine;
mod flow;
mod isolation;
mod machine;
mod peers;
mod pgbouncer;
mod recovery;
mod report;
mod retention;
mod scaleout;
mod stats;
mod workflows;

use std::path::PathBuf;
use std::time::Instant;

use sqlx::postgres::PgPoolOptions;

use crate::ceiling::{Spec, Statements};
use crate::engine::ThroughputSpec;
use crate::report::{Report, Settings};

/// Errors of the benchmark: anything goes, it is reported and the scenario skipped.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

const USAGE: &str = "\
usage: tasks-bench [--quick] [--json PATH] [--database-url URL] [--only LIST]
                   [--no-peers] [--scale-concurrency N] [--scale-pool N]
                   [--pgbouncer-url URL]

  --quick                 small smoke configuration (under a minute)
  --json PATH             where to write the figures as JSON (default bench-results.json)
  --database-url URL      Postgres to use (default: $DATABASE_URL, else
                          postgres://postgres@127.0.0.1:5432/test)
  --only LIST             comma-separated subset of:
                          ceiling,throughput,latency,replay,scale,recovery,flow,
                          retention,fairness,snapshot,pgbouncer,peers
  --no-peers              skip the peers (OpenWorkflow, DBOS, durare): no ratio to them
  --scale-concurrency N   worker concurrency in each scale-out process (default 100)
  --scale-pool N          connections in each scale-out process's pool (default 16, the
                          pool of PgStore::connect)
  --pgbouncer-url URL     a PgBouncer in transaction mode in front of the database, for the
                          pgbouncer scenario (default: the benchmark starts its own)

Every scenario runs in a fresh namespace of the `tasks` schema and deletes its rows after.";

/// Command-line options of the benchmark.
#[derive(Debug, Clone)]
struct Options {
    quick: bool,
    json: PathBuf,
    url: String,
    only: Option<Vec<String>>,
    scale_concurrency: usize,
    scale_pool: u32,
    pgbouncer_url: Option<String>,
    no_peers: bool,
}

impl Options {
    fn wants(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s == scenario))
    }
}

/// What the `worker` subcommand was asked to do.
struct WorkerArgs {
    url: String,
    namespace: String,
    concurrency: usize,
    pool: u32,
}

enum Command {
    Bench(Options),
    Worker(WorkerArgs),
}

fn parse(args: Vec<String>) -> std::result::Result<Command, String> {
    let mut url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.into());
    let mut args = args.into_iter().peekable();
    if args.peek().map(String::as_str) == Some("worker") {
        args.next();
        let (mut namespace, mut concurrency, mut pool) = (None, 100, db::ENGINE_POOL_SIZE);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--database-url" => url = value()?,
                "--namespace" => namespace = Some(value()?),
                "--concurrency" => concurrency = value()?.parse().map_err(|e| format!("{e}"))?,
                "--pool" => pool = value()?.parse().map_err(|e| format!("{e}"))?,
                other => return Err(format!("unknown worker argument {other}")),
            }
        }
        return Ok(Command::Worker(WorkerArgs {
            url,
            namespace: namespace.ok_or("worker needs --namespace")?,
            concurrency,
            pool,
        }));
    }
    let mut options = Options {
        quick: false,
        json: PathBuf::from("bench-results.json"),
        url: String::new(),
        only: None,
        scale_concurrency: 100,
        scale_pool: db::ENGINE_POOL_SIZE,
        pgbouncer_url: None,
        no_peers: false,
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--no-peers" => options.no_peers = true,
            "--json" => options.json = PathBuf::from(value()?),
            "--database-url" => url = value()?,
            "--only" => {
                let list: Vec<String> = value()?.split(',').map(|s| s.trim().to_owned()).collect();
                for scenario in &list {
                    if ![
                        "ceiling",
                        "throughput",
                        "latency",
                        "replay",
                        "scale",
                        "recovery",
                        "flow",
                        "retention",
                        "fairness",
                        "snapshot",
                        "pgbouncer",
                        "peers",
                    ]
                    .contains(&scenario.as_str())
                    {
                        return Err(format!("unknown scenario {scenario}"));
                    }
                }
                options.only = Some(list);
            }
            "--pgbouncer-url" => options.pgbouncer_url = Some(value()?),
            "--scale-pool" => options.scale_pool = value()?.parse().map_err(|e| format!("{e}"))?,
            "--scale-concurrency" => {
                options.scale_concurrency = value()?.parse().map_err(|e| format!("{e}"))?
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    options.url = url;
    Ok(Command::Bench(options))
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let command = match parse(std::env::args().skip(1).collect()) {
        Ok(command) => command,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("{message}\n");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let outcome = match command {
        Command::Worker(args) => {
            scaleout::worker_process(&args.url, &args.namespace, args.concurrency, args.pool).await
        }
        Command::Bench(options) => bench(options).await,
    };
    if let Err(error) = outcome {
        eprintln!("tasks-bench: {error}");
        std::process::exit(1);
    }
}

/// Sizes of one configuration (full or quick).
struct Sizes {
    ceiling_runs: usize,
    notify_sent: usize,
    notify_samples: usize,
    serial_runs: usize,
    runs: usize,
    latency_samples: usize,
    replay_lengths: &'static [u32],
    replay_repetitions: usize,
    scale_processes: &'static [usize],
    scale_steps: u32,
    /// Worker processes killed in the recovery scenario.
    kills: usize,
    /// How long the idle worker's heartbeats are watched, seconds.
    idle_seconds: u64,
    /// Rounds of the ceiling, throughput and scale-out measurements (medians are shown).
    rounds: usize,
    /// Finished runs the retention scenario purges while a drain runs.
    retention_old_runs: usize,
    /// Rounds of the flow drains, after a warm-up round: a drain takes about a second, and
    /// rounds spread by ±20 % on a 2-core machine.
    flow_rounds: usize,
    /// Pending runs in queue A while the fairness scenario trickles runs into queue B.
    fairness_backlog: usize,
    /// The trickle into queue B.
    trickle: isolation::Trickle,
    /// Runs per drain of the held-snapshot scenario (of 5 steps each).
    snapshot_runs: usize,
    /// Drains per condition of the held-snapshot scenario.
    snapshot_drains: usize,
}

const FULL: Sizes = Sizes {
    ceiling_runs: 1000,
    notify_sent: 2000,
    notify_samples: 100,
    serial_runs: 20,
    runs: 1000,
    latency_samples: 200,
    replay_lengths: &[0, 10, 100, 1000, 2000],
    replay_repetitions: 3,
    scale_processes: &[1, 2, 4],
    scale_steps: 10,
    kills: 5,
    idle_seconds: 10,
    rounds: 3,
    retention_old_runs: 50_000,
    flow_rounds: 7,
    fairness_backlog: 100_000,
    trickle: isolation::Trickle {
        runs: 50,
        every_ms: 100,
    },
    snapshot_runs: 3000,
    snapshot_drains: 6,
};

const QUICK: Sizes = Sizes {
    ceiling_runs: 200,
    notify_sent: 500,
    notify_samples: 30,
    serial_runs: 10,
    runs: 200,
    latency_samples: 50,
    replay_lengths: &[0, 10, 100, 1000],
    replay_repetitions: 2,
    scale_processes: &[1, 2, 4],
    scale_steps: 4,
    kills: 2,
    idle_seconds: 4,
    rounds: 1,
    retention_old_runs: 10_000,
    flow_rounds: 1,
    fairness_backlog: 10_000,
    trickle: isolation::Trickle {
        runs: 20,
        every_ms: 100,
    },
    snapshot_runs: 500,
    snapshot_drains: 3,
};

/// Worker concurrency of the in-process scenarios and task count of the ceiling.
const CONCURRENCY: usize = 100;

/// Steps per run of the ceiling (it records `ceiling_runs` × this many steps, like the
/// 1000 × 10 drain).
const CEILING_STEPS_PER_RUN: usize = 10;

fn note<T>(errors: &mut Vec<String>, scenario: &str, result: Result<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(error) => {
            eprintln!("!! {scenario} failed: {error}");
            errors.push(format!("{scenario}: {error}"));
            None
        }
    }
}

async fn bench(options: Options) -> Result<()> {
    let begun = Instant::now();
    let sizes = if options.quick { QUICK } else { FULL };
    let tagged = db::tagged_url(&options.url);
    let url = tagged.as_str();
    let admin = PgPoolOptions::new()
        .max_connections(3)
        .connect(url)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", options.url))?;
    tasks::postgres::PgStore::new(admin.clone())
        .migrate()
        .await?;
    let stale = db::remove_stale(&admin).await?;
    if stale > 0 {
        eprintln!("removed {stale} runs left over by interrupted benchmark runs");
    }
    let (activity, sampler) = db::Activity::sample(admin.clone());

    let mut report = Report {
        machine: machine::machine(&admin, url).await?,
        settings: Settings {
            quick: options.quick,
            pool_connections: db::ENGINE_POOL_SIZE,
            worker_concurrency: CONCURRENCY,
            scale_concurrency_per_process: options.scale_concurrency,
            scale_pool_per_process: options.scale_pool,
            enqueue_concurrency: engine::ENQUEUE_CONCURRENCY,
        },
        other_activity: None,
        load_average_end: None,
        tcp_nodelay: None,
        ceiling: Vec::new(),
        notify: None,
        throughput: Vec::new(),
        latency: None,
        replay: Vec::new(),
        replay_fit: None,
        scale_out: Vec::new(),
        recovery: None,
        flow: None,
        retention: None,
        fairness: None,
        snapshot: None,
        pgbouncer: None,
        peers: None,
        targets: Vec::new(),
        errors: Vec::new(),
        total_seconds: 0.0,
    };
    let errors = &mut report.errors;
    report.tcp_nodelay = note(errors, "tcp_nodelay", machine::nodelay(url).await);

    let pool = db::ENGINE_POOL_SIZE;
    let ceiling_spec = |key, label, statements, ping, nodelay| Spec {
        key,
        label,
        statements,
        connections: pool,
        concurrency: CONCURRENCY,
        runs: sizes.ceiling_runs,
        steps_per_run: CEILING_STEPS_PER_RUN,
        ping,
        nodelay,
    };
    if options.wants("ceiling") {
        let specs = [
            ceiling_spec(
                "engine",
                "one fenced insert per step, 1 commit/step",
                Statements::Record,
                true,
                true,
            ),
            ceiling_spec(
                "engine_no_ping",
                "  same, sqlx test_before_acquire off",
                Statements::Record,
                false,
                true,
            ),
            ceiling_spec(
                "engine_nodelay_off",
                "  same, TCP_NODELAY off",
                Statements::Record,
                true,
                false,
            ),
            ceiling_spec(
                "engine_async",
                "  hypothetical: same, committed asynchronously",
                Statements::RecordAsync,
                true,
                true,
            ),
            ceiling_spec(
                "engine_lean",
                "  hypothetical: same, RETURNING id and times only",
                Statements::RecordLean,
                true,
                true,
            ),
            ceiling_spec(
                "batched",
                "engine step SQL: steps of many runs per insert (THE CEILING)",
                Statements::Batched,
                true,
                true,
            ),
            ceiling_spec(
                "create_complete",
                "earlier engine path: create + complete, 2 commits",
                Statements::CreateComplete,
                true,
                true,
            ),
            Spec {
                connections: 1,
                concurrency: 1,
                runs: sizes.serial_runs,
                ..ceiling_spec(
                    "serial",
                    "engine step SQL, 1 connection, 1 task (serial)",
                    Statements::Record,
                    true,
                    true,
                )
            },
        ];
        // The variants take turns, round after round, so that drift of the machine hits
        // them alike; each row shows its median round.
        let mut rows = Vec::new();
        for round in 1..=sizes.rounds {
            for spec in &specs {
                eprintln!("ceiling: round {round}, {}", spec.key);
                if let Some(row) = note(
                    errors,
                    &format!("ceiling {}", spec.key),
                    ceiling::measure(url, &admin, spec).await,
                ) {
                    rows.push(row);
                }
            }
        }
        report.ceiling = stats::median_rows(
            rows,
            |row| row.key,
            |row| row.steps_per_s,
            |row, samples| row.samples_steps_per_s = samples,
        );
        eprintln!("ceiling: pg_notify");
        report.notify = note(
            errors,
            "notify probe",
            ceiling::notify_probe(
                url,
                pool,
                CONCURRENCY,
                sizes.notify_sent,
                sizes.notify_samples,
            )
            .await,
        );
    }

    if options.wants("throughput") {
        let specs = [(4, true), (10, true), (4, false)];
        let mut rows = Vec::new();
        let mut raw_rounds: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
        for (round, (steps, nodelay)) in
            (1..=sizes.rounds).flat_map(|round| specs.iter().map(move |spec| (round, *spec)))
        {
            let spec = ThroughputSpec {
                key: format!(
                    "{}x{}{}",
                    sizes.runs,
                    steps,
                    if nodelay { "" } else { "_nodelay_off" }
                ),
                runs: sizes.runs,
                steps,
                concurrency: CONCURRENCY,
                nodelay,
            };
            eprintln!("throughput: round {round}, {}", spec.key);
            if let Some(row) = note(
                errors,
                &format!("throughput {}", spec.key),
                engine::throughput(url, &admin, &spec).await,
            ) {
                rows.push(row);
            }
            if nodelay {
                // The same workload through the engine's statements alone, in the same
                // round.
                eprintln!("throughput: round {round}, {} raw statements", spec.key);
                if let Some(raw) = note(
                    errors,
                    &format!("raw workload {}", spec.key),
                    ceiling::workload(url, &admin, spec.runs, steps as usize, pool, CONCURRENCY)
                        .await,
                ) {
                    raw_rounds.entry(steps).or_default().push(raw.steps_per_s);
                }
            }
        }
        report.throughput = stats::median_rows(
            rows,
            |row| row.key.clone(),
            |row| row.steps_per_s,
            |row, samples| row.samples_steps_per_s = samples,
        );
        for row in report.throughput.iter_mut().filter(|row| row.nodelay) {
            if let Some(samples) = raw_rounds.get(&row.steps_per_run) {
                row.raw_steps_per_s = Some(stats::median(samples));
                row.raw_samples_steps_per_s = samples.clone();
            }
        }
    }

    if options.wants("latency") {
        eprintln!("latency");
        report.latency = note(
            errors,
            "latency",
            engine::latency(url, &admin, sizes.latency_samples).await,
        );
    }

    if options.wants("replay") {
        eprintln!("replay");
        report.replay = note(
            errors,
            "replay",
            engine::replay(url, &admin, sizes.replay_lengths, sizes.replay_repetitions).await,
        )
        .unwrap_or_default();
    }

    if options.wants("scale") {
        // First every process with the same concurrency (adding workers as one would in
        // production), then the same total concurrency split over the processes.
        let series = [
            scaleout::PerProcess::Each(options.scale_concurrency),
            scaleout::PerProcess::Split(CONCURRENCY),
        ];
        let mut rounds = Vec::new();
        for round in 1..=sizes.rounds {
            for per_process in series {
                eprintln!("scale-out: round {round}, {per_process:?}");
                if let Some(rows) = note(
                    errors,
                    "scale-out",
                    scaleout::scale_out(
                        url,
                        &admin,
                        sizes.scale_processes,
                        sizes.runs,
                        sizes.scale_steps,
                        per_process,
                        options.scale_pool,
                    )
                    .await,
                ) {
                    rounds.extend(rows);
                }
            }
        }
        report.scale_out = scaleout::median_rounds(rounds);
    }

    if options.wants("recovery") {
        eprintln!("recovery");
        report.recovery = note(
            errors,
            "recovery",
            recovery::measure(
                url,
                &admin,
                sizes.kills,
                std::time::Duration::from_secs(sizes.idle_seconds),
            )
            .await,
        );
    }

    if options.wants("flow") {
        report.flow = note(
            errors,
            "flow",
            flow::measure(
                url,
                &admin,
                sizes.runs,
                4,
                sizes.flow_rounds,
                CONCURRENCY,
                100_000,
            )
            .await,
        );
    }

    if options.wants("retention") {
        report.retention = note(
            errors,
            "retention",
            retention::measure(
                url,
                &admin,
                sizes.runs,
                4,
                sizes.rounds,
                CONCURRENCY,
                sizes.retention_old_runs,
            )
            .await,
        );
    }

    if options.wants("fairness") {
        report.fairness = note(
            errors,
            "fairness",
            isolation::fairness(url, &admin, sizes.fairness_backlog, sizes.trickle).await,
        );
    }

    if options.wants("snapshot") {
        report.snapshot = note(
            errors,
            "snapshot",
            isolation::held_snapshot(
                url,
                &admin,
                sizes.snapshot_runs,
                5,
                sizes.snapshot_drains,
                sizes.fairness_backlog,
            )
            .await,
        );
    }

    if options.wants("pgbouncer") {
        report.pgbouncer = note(
            errors,
            "pgbouncer",
            pgbouncer::measure(
                url,
                &admin,
                sizes.runs,
                4,
                sizes.rounds,
                CONCURRENCY,
                options.pgbouncer_url.as_deref(),
            )
            .await,
        );
    }

    if options.no_peers {
        report.peers = Some(peers::PeersResult::skipped("--no-peers given"));
    } else if options.wants("peers") {
        report.peers = Some(
            peers::measure(
                url,
                &admin,
                &peers::Plan {
                    runs: sizes.runs,
                    steps: &[4, 10],
                    rounds: sizes.rounds,
                    concurrency: CONCURRENCY,
                },
            )
            .await,
        );
    }

    if options.wants("ceiling") {
        // The ceiling once more, to show how much the machine drifted during the run; the
        // ratios use the median of every round, these included.
        eprintln!("ceiling: engine, again");
        let spec = ceiling_spec(
            "batched",
            "engine step SQL again, at the end of the run",
            Statements::Batched,
            true,
            true,
        );
        if let Some(row) = note(
            errors,
            "ceiling engine_end",
            ceiling::measure(url, &admin, &spec).await,
        ) {
            report.ceiling.push(row);
        }
    }

    sampler.abort();
    report.other_activity = Some(activity.report());
    report.load_average_end = machine::load_average();
    report.total_seconds = begun.elapsed().as_secs_f64();
    report.finish();
    print!("{}", report.table());
    std::fs::write(&options.json, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("figures written to {}", options.json.display());
    admin.close().await;
    Ok(())
}
