//! Scale-out: the same drain with 1, 2, 4… worker processes on the same database. The
//! benchmark re-executes itself with the `worker` subcommand for each process.

use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use sqlx::postgres::PgPool;
use tasks::Worker;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::Result;
use crate::db::{self, Costs, Counters, Cpu, CpuUse};
use crate::engine;

/// The result for one number of processes.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// Worker processes.
    pub processes: usize,
    /// Worker concurrency in each process.
    pub concurrency_per_process: usize,
    /// Whether a fixed total concurrency was split over the processes.
    pub split: bool,
    /// Connections in each process's pool.
    pub pool_per_process: u32,
    /// Runs drained.
    pub runs: usize,
    /// Steps per run.
    pub steps_per_run: u32,
    /// First "go" → last run completed, seconds (database clock).
    pub seconds: f64,
    /// Runs completed per second.
    pub workflows_per_s: f64,
    /// Steps completed per second.
    pub steps_per_s: f64,
    /// Steps per second of every round, in the order measured; the row shows the median
    /// round.
    pub samples_steps_per_s: Vec<f64>,
    /// Change of `steps_per_s` relative to one process, percent.
    pub change_vs_one_pct: Option<f64>,
    /// Runs each process completed, most first.
    pub runs_per_process: Vec<i64>,
    /// Database cost per step.
    pub per_step: Costs,
    /// CPU per step.
    pub cpu_per_step: CpuUse,
}

/// How worker concurrency is given to the processes.
#[derive(Debug, Clone, Copy)]
pub enum PerProcess {
    /// Every process runs a worker of this concurrency.
    Each(usize),
    /// This total is split evenly over the processes.
    Split(usize),
}

impl PerProcess {
    fn concurrency(self, processes: usize) -> usize {
        match self {
            PerProcess::Each(concurrency) => concurrency,
            PerProcess::Split(total) => (total / processes).max(1),
        }
    }
}

/// One child worker process.
pub(crate) struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl WorkerProcess {
    pub(crate) async fn spawn(
        url: &str,
        namespace: &str,
        concurrency: usize,
        pool: u32,
    ) -> Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("worker")
            .arg("--database-url")
            .arg(url)
            .arg("--namespace")
            .arg(namespace)
            .arg("--concurrency")
            .arg(concurrency.to_string())
            .arg("--pool")
            .arg(pool.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(WorkerProcess {
            child,
            stdin,
            stdout,
        })
    }

    pub(crate) async fn expect(&mut self, word: &str) -> Result<()> {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(60), self.stdout.read_line(&mut line)).await??;
        if line.trim() != word {
            return Err(format!("worker process said {line:?}, expected {word:?}").into());
        }
        Ok(())
    }

    pub(crate) async fn say(&mut self, word: &str) -> Result<()> {
        self.stdin.write_all(format!("{word}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Kills the process with SIGKILL (this child, by its handle) and reaps it: a worker
    /// that dies without a word.
    pub(crate) async fn kill(mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Asks the process to stop and waits for it; kills it (this child, by its handle) if
    /// it does not exit in time.
    pub(crate) async fn stop(mut self) -> Result<()> {
        let _ = self.say("stop").await;
        drop(self.stdin);
        match tokio::time::timeout(Duration::from_secs(40), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    eprintln!("note: a worker process exited with {status}");
                }
            }
            Err(_) => {
                eprintln!("note: a worker process did not stop in time; killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

/// Drains `runs` × `steps` with each number of processes in `processes`, each in its own
/// namespace.
pub async fn scale_out(
    url: &str,
    admin: &PgPool,
    processes: &[usize],
    runs: usize,
    steps: u32,
    per_process: PerProcess,
    pool: u32,
) -> Result<Vec<ScaleRow>> {
    let mut rows: Vec<ScaleRow> = Vec::new();
    for &count in processes {
        let namespace = db::namespace(&format!("scale-{count}"));
        let concurrency = per_process.concurrency(count);
        let result = scale_in(
            url,
            admin,
            count,
            runs,
            steps,
            (concurrency, pool),
            &namespace,
        )
        .await;
        db::cleanup(admin, &namespace).await?;
        let mut row = result?;
        row.split = matches!(per_process, PerProcess::Split(_));
        rows.push(row);
    }
    Ok(rows)
}

/// Folds the rounds of each (series, process count) into its median round, and computes the
/// change relative to one process within each series.
pub fn median_rounds(rows: Vec<ScaleRow>) -> Vec<ScaleRow> {
    let mut medians = crate::stats::median_rows(
        rows,
        |row| (row.split, row.processes),
        |row| row.steps_per_s,
        |row, samples| row.samples_steps_per_s = samples,
    );
    medians.sort_by_key(|row| (row.split, row.processes));
    let ones: Vec<(bool, f64)> = medians
        .iter()
        .filter(|r| r.processes == 1)
        .map(|r| (r.split, r.steps_per_s))
        .collect();
    for row in &mut medians {
        if let Some(&(_, one)) = ones.iter().find(|(split, _)| *split == row.split) {
            row.change_vs_one_pct = Some((row.steps_per_s / one - 1.0) * 100.0);
        }
    }
    medians
}

async fn scale_in(
    url: &str,
    admin: &PgPool,
    count: usize,
    runs: usize,
    steps: u32,
    (concurrency, pool): (usize, u32),
    namespace: &str,
) -> Result<ScaleRow> {
    engine::enqueue(url, namespace, runs, steps).await?;
    crate::db::analyze(admin).await?;
    let mut workers = Vec::with_capacity(count);
    for _ in 0..count {
        workers.push(WorkerProcess::spawn(url, namespace, concurrency, pool).await?);
    }
    for worker in &mut workers {
        worker.expect("ready").await?;
    }

    let counters = Counters::read_settled(admin).await?;
    let start = db::db_clock(admin).await?;
    let cpu = Cpu::read();
    for worker in &mut workers {
        worker.say("go").await?;
    }
    let drained = db::wait_completed(admin, namespace, runs as i64, Duration::from_secs(300)).await;
    let cpu_after = Cpu::read();
    for worker in workers {
        worker.stop().await?;
    }
    drained?;
    let after = Counters::read_settled(admin).await?;
    let (_, last_finish) = db::run_span(admin, namespace).await?;
    let runs_per_process: Vec<i64> = sqlx::query_scalar(
        "SELECT count(*) FROM tasks.workflow_runs WHERE namespace = $1
          GROUP BY worker_id ORDER BY count(*) DESC",
    )
    .bind(namespace)
    .fetch_all(admin)
    .await?;

    let seconds = db::seconds(start, last_finish);
    let total_steps = runs * steps as usize;
    Ok(ScaleRow {
        processes: count,
        concurrency_per_process: concurrency,
        split: false,
        pool_per_process: pool,
        runs,
        steps_per_run: steps,
        seconds,
        workflows_per_s: runs as f64 / seconds,
        steps_per_s: total_steps as f64 / seconds,
        samples_steps_per_s: Vec::new(),
        change_vs_one_pct: None,
        runs_per_process,
        per_step: counters.per(&after, total_steps as f64),
        cpu_per_step: cpu.per(&cpu_after, total_steps as f64),
    })
}

/// The `worker` subcommand: connects, prints `ready`, starts its worker on `go`, and stops
/// it gracefully on `stop` (or when stdin closes).
pub async fn worker_process(
    url: &str,
    namespace: &str,
    concurrency: usize,
    pool: u32,
) -> Result<()> {
    let store = db::sized_engine_store(url, namespace, false, pool).await?;
    let pool = store.pool().clone();
    let worker = Worker::builder(store).concurrency(concurrency).build()?;
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut handle = None;
    while let Some(line) = lines.next_line().await? {
        match line.trim() {
            "go" if handle.is_none() => handle = Some(worker.spawn()),
            "stop" => break,
            _ => {}
        }
    }
    if let Some(handle) = handle {
        handle.shutdown().await;
    }
    drop(worker);
    db::close(pool).await;
    Ok(())
}
