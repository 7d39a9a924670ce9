//! The writes of the run's own row: the outcome that ends an execution (complete, continue
//! as new, fail, sleep), with the records still held, and the lease's extension. Each is
//! tried again on database failures like every write of the session.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{RunSession, lock, retrying};
use crate::error::{StoreError, StoreResult};
use crate::failure::ErrorRecord;
use crate::model::{RunStatus, WorkflowRun};
use crate::store::FailRun;

impl RunSession {
    /// Completes the run with `output`, together with the records still held.
    ///
    /// A retry refused because the run is completed already, with this output, is the
    /// answer to a first try that committed and whose acknowledgement was lost: the run is
    /// completed as asked.
    pub(crate) async fn complete(&self, output: Value) -> StoreResult<WorkflowRun> {
        self.run_writable()?;
        let steps = self.take_held().await;
        let mut tries = 0_u32;
        let outcome = retrying(self.retry_for, || {
            tries += 1;
            self.store.contract().complete_run_with_steps(
                self.run_id,
                &self.holder,
                output.clone(),
                steps.clone(),
            )
        })
        .await;
        match outcome {
            Err(StoreError::LeaseLost { .. } | StoreError::WrongState { .. }) if tries > 1 => {
                match self.store.contract().get_run(self.run_id).await {
                    Ok(Some(run))
                        if run.status == RunStatus::Completed
                            && run.output.as_ref() == Some(&output) =>
                    {
                        Ok(run)
                    }
                    _ => outcome,
                }
            }
            outcome => outcome,
        }
    }

    /// Finishes the run by continuing it as new with `input` (see
    /// [`ContinueStore::continue_run`](crate::ContinueStore::continue_run)); the records
    /// still held were written before.
    ///
    /// A retry refused because the run continued already is the answer to a first try
    /// that committed and whose acknowledgement was lost: its successor is read back.
    pub(crate) async fn continue_as_new(
        &self,
        input: Value,
    ) -> StoreResult<crate::continuation::ContinuedRun> {
        self.run_writable()?;
        let store = self.store.contract().continuation()?;
        let params = crate::continuation::ContinueRun {
            run_id: self.run_id,
            holder: self.holder.clone(),
            input,
        };
        let mut tries = 0_u32;
        let outcome = retrying(self.retry_for, || {
            tries += 1;
            store.continue_run(params.clone())
        })
        .await;
        match outcome {
            Err(StoreError::LeaseLost { .. } | StoreError::WrongState { .. }) if tries > 1 => {
                // Only this claim can have continued the run while it stayed under it.
                let finished = match self.store.contract().get_run(self.run_id).await {
                    Ok(Some(run))
                        if run.worker_id.as_deref() == Some(self.holder.worker_id.as_str())
                            && run.claim_epoch == self.holder.claim_epoch =>
                    {
                        run
                    }
                    _ => return outcome,
                };
                let Some(successor_id) = finished.continued_as_run_id else {
                    return outcome;
                };
                match self.store.contract().get_run(successor_id).await {
                    Ok(Some(successor)) => Ok(crate::continuation::ContinuedRun {
                        finished,
                        successor,
                    }),
                    _ => outcome,
                }
            }
            outcome => outcome,
        }
    }

    /// Records a failed attempt of the run: retried by its policy unless `force`.
    pub(crate) async fn fail(&self, record: &ErrorRecord, force: bool) -> StoreResult<WorkflowRun> {
        self.run_writable()?;
        let params = FailRun {
            run_id: self.run_id,
            holder: self.holder.clone(),
            error: record.to_json(),
            force,
        };
        retrying(self.retry_for, || {
            self.store.contract().fail_run(params.clone())
        })
        .await
    }

    /// Parks the run until `until`.
    pub(crate) async fn sleep(&self, until: DateTime<Utc>) -> StoreResult<WorkflowRun> {
        self.run_writable()?;
        retrying(self.retry_for, || {
            self.store
                .contract()
                .sleep_run(self.run_id, &self.holder, until)
        })
        .await
    }

    /// Extends the run's lease to `lease` from now.
    pub(crate) async fn extend_lease(&self, lease: Duration) -> StoreResult<WorkflowRun> {
        self.run_writable()?;
        let sent = std::time::Instant::now();
        let extended = self
            .store
            .contract()
            .extend_lease(self.run_id, &self.holder, lease)
            .await;
        if extended.is_ok() {
            let mut lease_from = lock(&self.lease_from);
            *lease_from = (*lease_from).max(sent);
        }
        extended
    }
}
