//! A started run's handle: its result, awaited on the store's notifications, and the
//! operations on that run.

use std::marker::PhantomData;
use std::time::Duration;

use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::error::StoreError;
use crate::failure::ErrorRecord;
use crate::model::{RunStatus, StepAttempt, WorkflowRun};
use crate::store::{Notification, SharedStore};

/// How a run ended, when it did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run failed; the error is what the workflow (or a step) recorded.
    #[error("workflow run {run_id} failed: {error}")]
    Failed {
        /// The run.
        run_id: Uuid,
        /// The recorded error.
        error: ErrorRecord,
    },
    /// The run was canceled.
    #[error("workflow run {run_id} was canceled")]
    Canceled {
        /// The run.
        run_id: Uuid,
    },
    /// The run completed but its output does not decode as the expected type.
    #[error("the output of workflow run {run_id} does not match its type: {source}")]
    Output {
        /// The run.
        run_id: Uuid,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The run does not exist.
    #[error("workflow run {run_id} does not exist")]
    NotFound {
        /// The run.
        run_id: Uuid,
    },
    /// [`RunHandle::result_within`] gave up waiting.
    #[error("workflow run {run_id} did not finish within {waited:?}")]
    Timeout {
        /// The run.
        run_id: Uuid,
        /// How long it waited.
        waited: Duration,
    },
    /// The store failed while waiting.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A started run whose output is a `T`.
pub struct RunHandle<T> {
    pub(super) run_id: Uuid,
    pub(super) store: SharedStore,
    pub(super) output: PhantomData<fn() -> T>,
}

impl<T> Clone for RunHandle<T> {
    fn clone(&self) -> Self {
        RunHandle {
            run_id: self.run_id,
            store: self.store.clone(),
            output: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for RunHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.run_id)
            .finish()
    }
}

/// How often a waiting handle re-checks the run even without a notification, in case one
/// was lost on the way.
const RESULT_SAFETY_POLL: Duration = Duration::from_secs(2);

impl<T: DeserializeOwned> RunHandle<T> {
    /// The run's id.
    pub fn id(&self) -> Uuid {
        self.run_id
    }

    /// The run as stored now.
    pub async fn run(&self) -> Result<WorkflowRun, RunError> {
        self.store
            .contract()
            .get_run(self.run_id)
            .await?
            .ok_or(RunError::NotFound {
                run_id: self.run_id,
            })
    }

    /// The run's current status.
    pub async fn status(&self) -> Result<RunStatus, RunError> {
        Ok(self.run().await?.status)
    }

    /// Waits for the run to finish and returns its output. It wakes on the store's
    /// completion notification, not by polling.
    ///
    /// A run that continued as new (`ctx.continue_as_new`) did not finish for good: the
    /// wait follows it to its successor, and the successor's, until a run of the lineage
    /// completes, fails or is canceled; that run's outcome is the result. So the handle of
    /// a lineage's first run (whose id is the lineage's) awaits the whole lineage.
    pub async fn result(&self) -> Result<T, RunError> {
        let mut notifications = match self.store.contract().subscribe().await {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot subscribe to notifications; polling for the result");
                None
            }
        };
        let mut current = self.run_id;
        loop {
            let run = self.run_of(current).await?;
            if let Some(successor) = run.continued_as_run_id {
                current = successor;
                continue;
            }
            if let Some(result) = outcome(run) {
                return result;
            }
            let wake = async {
                match notifications.as_mut() {
                    Some(stream) => loop {
                        match stream.next().await {
                            Some(Notification::RunFinished { run_id, .. }) if run_id == current => {
                                return;
                            }
                            Some(Notification::Missed { .. }) => return,
                            Some(_) => continue,
                            None => return std::future::pending().await,
                        }
                    },
                    None => std::future::pending().await,
                }
            };
            let _ = tokio::time::timeout(RESULT_SAFETY_POLL, wake).await;
        }
    }

    /// Waits like [`RunHandle::result`], for at most `timeout`.
    pub async fn result_within(&self, timeout: Duration) -> Result<T, RunError> {
        match tokio::time::timeout(timeout, self.result()).await {
            Ok(result) => result,
            Err(_) => Err(RunError::Timeout {
                run_id: self.run_id,
                waited: timeout,
            }),
        }
    }

    /// The current run of this run's lineage ([`crate::continuation`]): this run, unless it
    /// continued as new; then the run of its lineage that did not (yet) continue.
    ///
    /// Errors: [`RunError::NotFound`] when the run, or every run of its lineage, is gone;
    /// a store without continue-as-new answers [`StoreError::Unsupported`] for a run that
    /// continued (which it cannot have written).
    pub async fn lineage_head(&self) -> Result<WorkflowRun, RunError> {
        let run = self.run().await?;
        if run.continued_as_run_id.is_none() {
            return Ok(run);
        }
        self.store
            .contract()
            .continuation()?
            .lineage_head(run.lineage_id())
            .await?
            .ok_or(RunError::NotFound {
                run_id: run.lineage_id(),
            })
    }

    /// The run `run_id` (this one, or a successor of it) as stored now.
    async fn run_of(&self, run_id: Uuid) -> Result<WorkflowRun, RunError> {
        self.store
            .contract()
            .get_run(run_id)
            .await?
            .ok_or(RunError::NotFound { run_id })
    }

    /// Cancels the run.
    pub async fn cancel(&self) -> Result<WorkflowRun, StoreError> {
        let run = self
            .store
            .contract()
            .lifecycle()?
            .cancel_run(self.run_id)
            .await?;
        crate::metrics::run_finished(run.workflow_name.clone(), "canceled");
        Ok(run)
    }

    /// Pauses the run.
    pub async fn pause(&self) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .pause_run(self.run_id)
            .await
    }

    /// Resumes the run.
    pub async fn resume(&self) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .resume_run(self.run_id)
            .await
    }

    /// Every step attempt of the run so far, oldest first.
    pub async fn steps(&self) -> Result<Vec<StepAttempt>, StoreError> {
        self.store.contract().step_history(self.run_id).await
    }
}

/// The result of `run` when it finished for good (`None`: it did not).
fn outcome<T: DeserializeOwned>(run: WorkflowRun) -> Option<Result<T, RunError>> {
    let run_id = run.id;
    match run.status {
        RunStatus::Completed => Some(
            serde_json::from_value(run.output.unwrap_or(Value::Null))
                .map_err(|source| RunError::Output { run_id, source }),
        ),
        RunStatus::Failed => Some(Err(RunError::Failed {
            run_id,
            error: run
                .error
                .as_ref()
                .map(ErrorRecord::from_json)
                .unwrap_or_else(|| ErrorRecord::new("unknown error")),
        })),
        RunStatus::Canceled => Some(Err(RunError::Canceled { run_id })),
        _ => None,
    }
}
