//! The peers: other durable-workflow engines given the engine's throughput workload — runs of
//! no-op steps, enqueued first, then drained by one worker in one process — on the same
//! Postgres, in turns with the engine's own drain, round after round. Each peer keeps its
//! defaults except the worker concurrency (the engine's). The ratios come from this run only:
//! where a figure is missing, the report says why and shows no ratio.
//!
//! The peers live in `bench/peers/`: OpenWorkflow under `openworkflow/` (npm), DBOS's Rust
//! SDK and `durare` under `rust/` (a cargo package outside the workspace). Each run of a peer
//! gets a database of its own, created before and dropped after.

mod figures;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::PgPool;
use tokio::process::Command;

pub use self::figures::{Peer, PeerRow, PeersResult, PeersWorkload, Ratio, table};
use crate::Result;
use crate::engine::{self, ThroughputSpec};

/// Longest one peer's run (migrations, enqueue and drain) may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(900);

/// The OpenWorkflow version the npm manifest pins.
const OPENWORKFLOW_VERSION: &str = "0.9.2";

/// What a peer prints (the fields the harness reads).
#[derive(Debug, Deserialize)]
struct PeerOutput {
    version: String,
    steps_per_s: f64,
    settings: serde_json::Value,
}

/// Where the peers live.
fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// The first lines of a process's error output that name an error (else its first lines),
/// for a message: where npm, cargo and node say what went wrong.
fn summary(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.to_ascii_lowercase().contains("error"))
        .collect();
    let chosen = if errors.is_empty() { lines } else { errors };
    chosen[..chosen.len().min(4)].join(" | ")
}

/// Runs `program` with `args` in `dir`; its stdout, or an error naming it with the end of
/// its stderr.
async fn run(dir: &Path, program: &str, args: &[&str], timeout: Duration) -> Result<String> {
    let child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{program} not runnable: {e}"))?;
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| {
            format!(
                "{program} {} did not finish within {timeout:?}",
                args.join(" ")
            )
        })??;
    if !output.status.success() {
        return Err(format!(
            "{program} {} exited with {}: {}",
            args.first().copied().unwrap_or_default(),
            output.status,
            summary(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// How to run a peer, once it is installed.
#[derive(Debug, Clone)]
struct Runner {
    dir: PathBuf,
    program: String,
    args: Vec<String>,
}

/// Installs OpenWorkflow's packages (`npm ci`) unless the pinned version is there already.
async fn prepare_openworkflow() -> std::result::Result<Runner, String> {
    let dir = peers_dir().join("openworkflow");
    let node = run(&dir, "node", &["--version"], Duration::from_secs(30))
        .await
        .map_err(|e| format!("Node.js is missing ({e})"))?;
    let major: u32 = node
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 20 {
        return Err(format!(
            "OpenWorkflow needs Node.js 20 or later, found {}",
            node.trim()
        ));
    }
    let installed = std::fs::read_to_string(dir.join("node_modules/openworkflow/package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|package| package["version"].as_str().map(str::to_owned));
    if installed.as_deref() != Some(OPENWORKFLOW_VERSION) {
        eprintln!("peers: npm ci in {}", dir.display());
        run(
            &dir,
            "npm",
            &["ci", "--no-audit", "--no-fund"],
            Duration::from_secs(300),
        )
        .await
        .map_err(|e| format!("could not install OpenWorkflow (offline?): {e}"))?;
    }
    Ok(Runner {
        program: "node".into(),
        args: vec!["drain.mjs".into()],
        dir,
    })
}

/// Builds the Rust peers (`cargo build --release`, nothing to do when up to date).
async fn prepare_rust() -> std::result::Result<Runner, String> {
    let dir = peers_dir().join("rust");
    eprintln!(
        "peers: cargo build --release --manifest-path {}/Cargo.toml",
        dir.display()
    );
    let target = dir.join("target");
    let target = target.to_string_lossy();
    run(
        &dir,
        "cargo",
        &["build", "--release", "--quiet", "--target-dir", &target],
        Duration::from_secs(1800),
    )
    .await
    .map_err(|e| format!("the Rust peers did not build: {e}"))?;
    Ok(Runner {
        program: dir
            .join("target/release/tasks-bench-peers")
            .to_string_lossy()
            .into_owned(),
        args: Vec::new(),
        dir,
    })
}

/// Each peer's runner, or why it cannot run.
async fn prepare() -> Vec<(Peer, std::result::Result<Runner, String>)> {
    let openworkflow = prepare_openworkflow().await;
    let rust = prepare_rust().await;
    let with = |peer: Peer, runner: &std::result::Result<Runner, String>| {
        let runner = runner.clone().map(|mut runner| {
            if peer != Peer::OpenWorkflow {
                runner.args = vec![peer.key().to_owned()];
            }
            runner
        });
        (peer, runner)
    };
    vec![
        (Peer::OpenWorkflow, openworkflow),
        with(Peer::Dbos, &rust),
        with(Peer::Durare, &rust),
    ]
}

/// The database a peer runs in: the benchmark's database name with `_peer_<key>` appended.
async fn peer_database(admin: &PgPool, peer: Peer) -> Result<String> {
    let current: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(admin)
        .await?;
    let name = format!("{current}_peer_{}", peer.key());
    // A database name is an identifier, which no statement can bind: only names made of
    // these characters are used, and quoted.
    let plain = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !plain || name.len() > 63 {
        return Err(format!(
            "cannot name a database for {} after {current:?} (lowercase letters, digits and _ only, at most 63 bytes)",
            peer.label()
        )
        .into());
    }
    Ok(name)
}

async fn drop_database(admin: &PgPool, name: &str) -> Result<()> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(admin)
        .await?;
    Ok(())
}

/// One drain by `peer` in a fresh database of its own, dropped afterwards.
async fn drain_peer(
    admin: &PgPool,
    url: &str,
    peer: Peer,
    runner: &Runner,
    runs: usize,
    steps: u32,
    concurrency: usize,
) -> Result<PeerOutput> {
    let name = peer_database(admin, peer).await?;
    drop_database(admin, &name).await?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\""))
        .execute(admin)
        .await?;
    let mut peer_url = url::Url::parse(url)?;
    peer_url.set_path(&format!("/{name}"));
    let mut args: Vec<String> = runner.args.clone();
    args.extend([
        "--database-url".into(),
        peer_url.to_string(),
        "--runs".into(),
        runs.to_string(),
        "--steps".into(),
        steps.to_string(),
        "--concurrency".into(),
        concurrency.to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = run(&runner.dir, &runner.program, &args, PEER_TIMEOUT).await;
    drop_database(admin, &name).await?;
    let stdout = outcome?;
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    serde_json::from_str(last).map_err(|e| format!("unreadable output {last:?}: {e}").into())
}

/// The scenario's sizes.
pub struct Plan<'a> {
    /// Runs per drain.
    pub runs: usize,
    /// Steps per run of each workload.
    pub steps: &'a [u32],
    /// Rounds.
    pub rounds: usize,
    /// Worker concurrency, the engine's and every peer's.
    pub concurrency: usize,
}

/// Runs the scenario: in each round and for each workload, the engine's drain, then each
/// available peer's. Failures are kept per peer and round; the figures are medians.
pub async fn measure(url: &str, admin: &PgPool, plan: &Plan<'_>) -> PeersResult {
    let prepared = prepare().await;
    let mut workloads: Vec<PeersWorkload> = plan
        .steps
        .iter()
        .map(|&steps| PeersWorkload {
            runs: plan.runs,
            steps_per_run: steps,
            engine_steps_per_s: None,
            engine_samples_steps_per_s: Vec::new(),
            engine_failures: Vec::new(),
            peers: prepared
                .iter()
                .map(|(peer, runner)| PeerRow::new(*peer, runner.as_ref().err().cloned()))
                .collect(),
        })
        .collect();
    for round in 1..=plan.rounds {
        for workload in workloads.iter_mut() {
            let steps = workload.steps_per_run;
            eprintln!("peers: round {round}, {} x {steps}, the engine", plan.runs);
            let spec = ThroughputSpec {
                key: format!("peers-{}x{steps}", plan.runs),
                runs: plan.runs,
                steps,
                concurrency: plan.concurrency,
                nodelay: true,
            };
            match engine::throughput(url, admin, &spec).await {
                Ok(row) => workload.engine_samples_steps_per_s.push(row.steps_per_s),
                Err(error) => {
                    eprintln!("!! peers: the engine's drain failed: {error}");
                    workload
                        .engine_failures
                        .push(format!("round {round}: {error}"));
                }
            }
            for ((peer, runner), row) in prepared.iter().zip(&mut workload.peers) {
                let Ok(runner) = runner else { continue };
                eprintln!(
                    "peers: round {round}, {} x {steps}, {}",
                    plan.runs,
                    peer.label()
                );
                match drain_peer(
                    admin,
                    url,
                    *peer,
                    runner,
                    plan.runs,
                    steps,
                    plan.concurrency,
                )
                .await
                {
                    Ok(output) => {
                        row.samples_steps_per_s.push(output.steps_per_s);
                        row.version = Some(output.version);
                        row.settings = Some(output.settings);
                    }
                    Err(error) => {
                        eprintln!("!! peers: {} failed: {error}", peer.label());
                        row.failures.push(format!("round {round}: {error}"));
                    }
                }
            }
        }
    }
    for workload in &mut workloads {
        workload.settle();
    }
    PeersResult {
        skipped: None,
        concurrency: plan.concurrency,
        rounds: plan.rounds,
        workloads,
    }
}
