//! Operations on runs by id: reading and listing them and their steps, and an operator's
//! cancel, pause, resume, retry, fork and purge.

use uuid::Uuid;

use super::Client;
use crate::error::StoreError;
use crate::model::{StepAttempt, WorkflowRun};
use crate::purge::purge_batches;
use crate::retention::PurgeRuns;
use crate::store::{ListRuns, ListStepAttempts, Page};

impl Client {
    /// Fetches a run.
    pub async fn get_run(&self, run_id: Uuid) -> Result<Option<WorkflowRun>, StoreError> {
        self.store.contract().get_run(run_id).await
    }

    /// Lists runs with filters and cursor pagination.
    pub async fn list_runs(&self, query: ListRuns) -> Result<Page<WorkflowRun>, StoreError> {
        self.store.contract().list_runs(query).await
    }

    /// Lists the step attempts of a run with cursor pagination.
    pub async fn list_steps(
        &self,
        query: ListStepAttempts,
    ) -> Result<Page<StepAttempt>, StoreError> {
        self.store.contract().list_step_attempts(query).await
    }

    /// Cancels a run.
    pub async fn cancel(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        let run = self
            .store
            .contract()
            .lifecycle()?
            .cancel_run(run_id)
            .await?;
        crate::metrics::run_finished(run.workflow_name.clone(), "canceled");
        Ok(run)
    }

    /// Pauses a run; a running run stops at its next step boundary.
    pub async fn pause(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.pause_run(run_id).await
    }

    /// Resumes a paused run.
    pub async fn resume(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.resume_run(run_id).await
    }

    /// Runs a failed or canceled run again from its first unfinished step (see
    /// [`LifecycleStore::retry_run`](crate::LifecycleStore::retry_run)): completed steps keep their outputs and do not run again, the
    /// steps that failed run again with their full retry budget, and the run's own attempt
    /// counter and retry policy start over. A run in another state is a
    /// [`StoreError::WrongState`]; an unknown run a [`StoreError::RunNotFound`].
    pub async fn retry(&self, run_id: Uuid) -> Result<WorkflowRun, StoreError> {
        self.store.contract().lifecycle()?.retry_run(run_id).await
    }

    /// Starts a new run from the finished run `run_id` (see
    /// [`LifecycleStore::fork_run`](crate::LifecycleStore::fork_run)): the steps recorded before the first
    /// attempt of `from_step` (a resolved step name, as `steps()` shows it) replay their
    /// outputs, and `from_step` and everything after it run again, with the workflow's
    /// current code. The new run records `forked_from_run_id` and `forked_from_step`. A live
    /// run is a [`StoreError::WrongState`], a step the run never recorded a
    /// [`StoreError::UnknownStep`].
    pub async fn fork(&self, run_id: Uuid, from_step: &str) -> Result<WorkflowRun, StoreError> {
        self.store
            .contract()
            .lifecycle()?
            .fork_run(run_id, from_step)
            .await
    }

    /// Deletes the finished runs `params` selects (completed, failed or canceled, finished
    /// before an instant or longer ago than an age) in this client's namespace, with their
    /// step attempts and events, and returns how many runs were deleted. It works in
    /// batches of `params.batch_size` runs, each one short transaction
    /// ([`RetentionStore::purge_runs`](crate::RetentionStore::purge_runs)), until a batch comes back short;
    /// it is safe while workers run: a live run is never deleted.
    ///
    /// ```no_run
    /// # async fn demo(client: tasks_runtime::Client) -> Result<(), tasks_runtime::StoreError> {
    /// use std::time::Duration;
    /// use tasks_runtime::{PurgeRuns, RunStatus};
    ///
    /// let month = Duration::from_secs(30 * 24 * 3600);
    /// let purged = client
    ///     .purge(PurgeRuns::older_than(month).statuses([RunStatus::Failed]))
    ///     .await?;
    /// println!("{purged} failed runs purged");
    /// # Ok(()) }
    /// ```
    ///
    /// Errors: [`StoreError::NotTerminal`] for a live status, [`StoreError::Limit`] for a
    /// batch size or cutoff past the limits (nothing deleted); a database error after some
    /// batches committed (those runs stay deleted: purging again continues where it
    /// stopped).
    pub async fn purge(&self, params: PurgeRuns) -> Result<u64, StoreError> {
        let (purged, result) = purge_batches(self.store.contract(), &params, None).await;
        result.map(|()| purged)
    }
}
