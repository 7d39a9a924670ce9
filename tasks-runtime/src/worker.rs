//! The worker: claims runs in batches, executes them concurrently under a lease, wakes on
//! notifications with polling as the fallback, and shuts down gracefully.
//!
//! This module holds the [`Worker`], its errors and its [`WorkerHandle`]; the
//! [`WorkerBuilder`] and its settings are in `builder`, and the claim loop (claim, execute,
//! wake, drain at shutdown) in `claim_loop`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

mod builder;
mod claim_loop;

pub use builder::{UnknownWorkflowPolicy, WorkerBuilder};

use crate::executor::Executor;
use crate::liveness::Liveness;
use crate::purge::Retention;
use crate::queue::{ClaimFilter, QueueOptions};
use crate::registry::{Registry, RegistryError};
use crate::store::SharedStore;

/// Why a worker could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The registry of linked workflows and steps could not be built (duplicates, or an
    /// invalid name).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A setting is out of range.
    #[error("invalid worker setting: {0}")]
    InvalidSetting(String),
    /// The namespace given to [`WorkerBuilder::namespace`] is past the
    /// [`limits`](crate::limits) (too long, or with NUL).
    #[error(transparent)]
    Limit(#[from] crate::LimitError),
    /// Waiting for Ctrl-C failed.
    #[error("could not listen for Ctrl-C: {0}")]
    Signal(#[source] std::io::Error),
}

/// Executes runs. Build one with [`Worker::builder`], then [`Worker::run`] it until a
/// cancellation token fires (or use [`Worker::run_until_ctrl_c`] / [`Worker::spawn`]).
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

struct WorkerInner {
    store: SharedStore,
    retention: Option<Retention>,
    liveness: Liveness,
    executor: Executor,
    registry: Registry,
    concurrency: usize,
    poll_min: Duration,
    poll_max: Duration,
    shutdown_grace: Duration,
    unknown_workflow: UnknownWorkflowPolicy,
    claim_filter: ClaimFilter,
    declared_queues: Vec<QueueOptions>,
    #[cfg(feature = "schedules")]
    scheduler: Option<crate::scheduler::Scheduler>,
}

/// A worker running in the background; see [`Worker::spawn`].
#[derive(Debug)]
pub struct WorkerHandle {
    token: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl WorkerHandle {
    /// Stops claiming, waits for in-flight runs (up to the grace period) and returns once
    /// the worker has stopped.
    pub async fn shutdown(self) {
        self.token.cancel();
        if let Err(error) = self.task.await {
            tracing::error!(%error, "worker task failed");
        }
    }

    /// The token that stops the worker.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.inner.executor.worker_id)
            .field("namespace", &self.inner.store.namespace())
            .field("concurrency", &self.inner.concurrency)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// The id written on the runs this worker claims.
    pub fn id(&self) -> &str {
        &self.inner.executor.worker_id
    }

    /// The workflows this worker can execute.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Runs in the background until the handle is shut down.
    pub fn spawn(&self) -> WorkerHandle {
        let token = CancellationToken::new();
        let worker = self.clone();
        let task = tokio::spawn({
            let token = token.clone();
            async move { worker.run(token).await }
        });
        WorkerHandle { token, task }
    }

    /// Runs until Ctrl-C, then shuts down gracefully.
    pub async fn run_until_ctrl_c(&self) -> Result<(), WorkerError> {
        let token = CancellationToken::new();
        let run = self.run(token.clone());
        tokio::pin!(run);
        tokio::select! {
            () = &mut run => return Ok(()),
            signal = tokio::signal::ctrl_c() => {
                signal.map_err(WorkerError::Signal)?;
                tracing::info!("Ctrl-C received; shutting down");
                token.cancel();
            }
        }
        run.await;
        Ok(())
    }
}
