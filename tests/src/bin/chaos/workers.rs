//! The worker processes: what one runs (`chaos worker`), and the orchestrator's handle on
//! one.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;
use tasks::Worker;
use tasks::postgres::PgStore;

use crate::workflows::EXECUTIONS;

/// Runs each worker process executes at once.
pub const CONCURRENCY: usize = 8;
/// The lease of every chaos worker: short, so that a frozen worker is past it within
/// seconds (the heartbeat keeps its defaults: a beat a second, stale after 3 s).
pub const LEASE: Duration = Duration::from_secs(5);
/// How long a worker process started during the Postgres restart tries to connect.
const CONNECT_FOR: Duration = Duration::from_secs(60);

/// The id a worker process writes on the runs it claims: its process id, which the
/// execution log records too.
pub fn worker_id(pid: u32) -> String {
    format!("chaos-worker-{pid}")
}

/// `chaos worker <database-url> <namespace>`: works until it is killed, or until its
/// orchestrator is gone (its standard input, a pipe from the orchestrator, closes), so
/// that an orchestrator killed by a timeout leaves no worker behind.
pub async fn work(url: &str, namespace: &str) -> Result<(), Box<dyn std::error::Error>> {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    EXECUTIONS
        .set(
            PgPoolOptions::new()
                .max_connections(CONCURRENCY as u32)
                .connect_lazy(url)?,
        )
        .map_err(|_| "the execution log was set twice")?;
    let began = Instant::now();
    let store = loop {
        match PgStore::connect(url).await {
            Ok(store) => break store,
            Err(error) if began.elapsed() < CONNECT_FOR => {
                eprintln!("chaos worker: cannot connect yet: {error}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error.into()),
        }
    };
    let worker = Worker::builder(store.with_namespace(namespace)?)
        .concurrency(CONCURRENCY)
        .lease(LEASE)
        .worker_id(worker_id(std::process::id()))
        .build()?;
    worker.run_until_ctrl_c().await?;
    Ok(())
}

/// A worker process, SIGKILLed when dropped.
pub struct Process(Child);

impl Process {
    pub fn start(url: &str, namespace: &str) -> Result<Process, std::io::Error> {
        Command::new(std::env::current_exe()?)
            .args(["worker", url, namespace])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .map(Process)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    pub fn worker_id(&self) -> String {
        worker_id(self.pid())
    }

    pub fn kill(mut self) -> Result<(), std::io::Error> {
        self.0.kill()?;
        self.0.wait()?;
        Ok(())
    }

    /// Sends `SIGSTOP` or `SIGCONT` (the standard library sends only `SIGKILL`).
    pub fn signal(&self, signal: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {signal} {} exited with {status}", self.pid()).into())
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
