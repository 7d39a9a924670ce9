//! Step attempts as a worker writes them: a running attempt created
//! ([`Store::create_step_attempt`]), a finished attempt recorded
//! ([`Store::record_step_attempt`]), and the outcome of finishing one.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::limits::{self, Field, LimitError};
use crate::model::{RunStatus, StepAttempt, StepKind, StepStatus};

#[cfg(doc)]
use super::Store;

/// Parameters of [`Store::create_step_attempt`].
#[derive(Debug, Clone)]
pub struct CreateStepAttempt {
    /// The attempt's id, chosen once by the caller (a UUIDv7, [`Uuid::now_v7`]) and kept
    /// across every retry of the same write: an id the store already holds for this run is
    /// not written again, and the stored attempt is returned instead.
    pub id: Uuid,
    /// The run, which must be running under `worker_id`.
    pub run_id: Uuid,
    /// The worker that must hold the lease.
    pub worker_id: String,
    /// The resolved step name.
    pub step_name: String,
    /// What the step is.
    pub kind: StepKind,
    /// Step configuration.
    pub config: Value,
    /// Free-form context.
    pub context: Option<Value>,
}

impl CreateStepAttempt {
    /// Checks the worker id, the step name and the JSON documents against the
    /// [`limits`]. Every store calls it before writing; a third store should
    /// too.
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        limits::check_json(Field::Config, &self.config)?;
        if let Some(context) = &self.context {
            limits::check_json(Field::Context, context)?;
        }
        Ok(())
    }
}

/// Parameters of [`Store::record_step_attempt`]: an attempt that already finished.
#[derive(Debug, Clone)]
pub struct RecordStepAttempt {
    /// The attempt's id, chosen once by the caller (a UUIDv7, [`Uuid::now_v7`]) and kept
    /// across every retry of the same record. A record whose id the store already holds
    /// for this run is not stored again: the store answers with the attempt it has (see
    /// [`Store::record_step_attempt`]), so a retry after a lost acknowledgement never
    /// records a step twice.
    pub id: Uuid,
    /// The run, which must be running under `worker_id`.
    pub run_id: Uuid,
    /// The worker that must hold the lease.
    pub worker_id: String,
    /// The resolved step name.
    pub step_name: String,
    /// What the step is.
    pub kind: StepKind,
    /// Step configuration.
    pub config: Value,
    /// How it ended: [`StepStatus::Completed`] with `output`, or [`StepStatus::Failed`] with
    /// `error`.
    pub status: StepStatus,
    /// The output of a completed attempt.
    pub output: Option<Value>,
    /// The error of a failed attempt.
    pub error: Option<Value>,
    /// The arguments of the step call, stored with the attempt
    /// ([`StepAttempt::args`](crate::StepAttempt::args)); `None` stores none.
    pub args: Option<Value>,
    /// How long the attempt ran; its `started_at` is the store's clock minus this.
    pub elapsed: Duration,
}

impl RecordStepAttempt {
    /// Checks the worker id, the step name, the JSON documents and the running time
    /// against the [`limits`]. Every store calls it before writing; a third
    /// store should too.
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        limits::check_json(Field::Config, &self.config)?;
        if let Some(output) = &self.output {
            limits::check_json(Field::StepOutput, output)?;
        }
        if let Some(error) = &self.error {
            limits::check_json(Field::Error, error)?;
        }
        if let Some(args) = &self.args {
            limits::check_json(Field::StepArgs, args)?;
        }
        limits::check_duration(Field::Elapsed, self.elapsed)
    }

    /// Refuses attempts that have not finished (only completed and failed ones are
    /// recorded) and values past the [`limits`].
    pub fn check_finished(&self) -> StoreResult<()> {
        if !matches!(self.status, StepStatus::Completed | StepStatus::Failed) {
            return Err(StoreError::InvalidArgument(format!(
                "a recorded attempt is completed or failed, not {}",
                self.status
            )));
        }
        Ok(self.check()?)
    }

    /// Checks the attempts given to [`Store::complete_run_with_steps`]: finished, and all of
    /// `run_id` under `worker_id`.
    pub fn check_last_steps(
        steps: &[RecordStepAttempt],
        run_id: Uuid,
        worker_id: &str,
        output: &Value,
    ) -> StoreResult<()> {
        limits::check_worker_id(worker_id)?;
        limits::check_json(Field::WorkflowOutput, output)?;
        for step in steps {
            step.check_finished()?;
            if step.run_id != run_id || step.worker_id != worker_id {
                return Err(StoreError::InvalidArgument(
                    "the attempts completed with a run must be of that run and worker".into(),
                ));
            }
        }
        Ok(())
    }
}

/// The result of finishing a step attempt.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // One per finished step; boxing would buy nothing.
pub enum StepUpdate {
    /// The attempt was finished as asked.
    Recorded(StepAttempt),
    /// The run was paused or canceled while the step ran: the attempt now carries that
    /// status, and its result was not recorded. Not an error: the worker just stops.
    Interrupted {
        /// The status the run was moved to.
        run_status: RunStatus,
    },
}
