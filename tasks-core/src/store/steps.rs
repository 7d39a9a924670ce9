//! Step attempts as a worker writes them: a running attempt created
//! ([`StepStore::create_step_attempt`]), a finished attempt recorded
//! ([`StepStore::record_step_attempt`]), and the outcome of finishing one.

#[cfg(doc)]
use crate::LeaseStore;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::holder::Holder;
use crate::limits::{self, Field, LimitError};
use crate::model::{RunStatus, StepAttempt, StepKind, StepStatus};

use super::pages::{ListStepAttempts, Page};

#[cfg(doc)]
use super::Store;

/// Parameters of [`StepStore::create_step_attempt`].
#[derive(Debug, Clone)]
pub struct CreateStepAttempt {
    /// The attempt's id, chosen once by the caller (a UUIDv7, [`Uuid::now_v7`]) and kept
    /// across every retry of the same write: an id the store already holds for this run is
    /// not written again, and the stored attempt is returned instead.
    pub id: Uuid,
    /// The run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
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
    /// Checks the holder's worker id, the step name and the JSON documents against the
    /// [`limits`]. A store reaches it through its operation's function in
    /// [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        limits::check_json(Field::Config, &self.config)?;
        if let Some(context) = &self.context {
            limits::check_json(Field::Context, context)?;
        }
        Ok(())
    }
}

/// Parameters of [`StepStore::record_step_attempt`]: an attempt that already finished.
#[derive(Debug, Clone)]
pub struct RecordStepAttempt {
    /// The attempt's id, chosen once by the caller (a UUIDv7, [`Uuid::now_v7`]) and kept
    /// across every retry of the same record. A record whose id the store already holds
    /// for this run is not stored again: the store answers with the attempt it has (see
    /// [`StepStore::record_step_attempt`]), so a retry after a lost acknowledgement never
    /// records a step twice.
    pub id: Uuid,
    /// The run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
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
    /// Checks the holder's worker id, the step name, the JSON documents and the running
    /// time against the [`limits`]. A store reaches it through its operation's function in
    /// [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
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

    /// Checks the attempts given to [`LeaseStore::complete_run_with_steps`]: finished, and all of
    /// `run_id` under `holder` (the same worker and claim).
    pub fn check_last_steps(
        steps: &[RecordStepAttempt],
        run_id: Uuid,
        holder: &Holder,
        output: &Value,
    ) -> StoreResult<()> {
        limits::check_worker_id(&holder.worker_id)?;
        limits::check_json(Field::WorkflowOutput, output)?;
        for step in steps {
            step.check_finished()?;
            if step.run_id != run_id || step.holder != *holder {
                return Err(StoreError::InvalidArgument(
                    "the attempts completed with a run must be of that run and claim".into(),
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

/// Step attempts: what a worker records of a run's steps, and the history a replay reads.
/// Part of every store ([`Store`] requires it); the errors common to every method are on
/// [`Store`].
#[async_trait::async_trait]
pub trait StepStore: Send + Sync {
    /// Starts a running step attempt of a run that `params.holder` holds (durable
    /// sleeps use this; function steps are written once, finished, by
    /// [`StepStore::record_step_attempt`]). Idempotent by `params.id` like
    /// [`StepStore::record_step_attempt`]: an id the store already holds for this run returns
    /// the stored attempt and creates nothing. Worker-side errors, and
    /// [`StoreError::InvalidArgument`] for an id the store holds for another run.
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt>;

    /// The step attempt with this id, or `None`.
    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>>;

    /// A page of the attempts of a run, by `(created_at, id)`.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a zero limit or both cursors given.
    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>>;

    /// Every attempt of a run, oldest first: the history a replay starts from.
    ///
    /// Errors: [`StoreError::CorruptStep`] naming the run, the attempt, its step and the
    /// column when a step row does not decode; a worker then fails the run for good. Never
    /// a [`StoreError::Database`] for a row that was read but did not decode, here or in any
    /// other read of step rows.
    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>>;

    /// Completes a running step attempt with `output`, only while its run is running under
    /// `holder`'s claim. When the run was paused or canceled meanwhile, the attempt is marked like
    /// the run, without its output, and the outcome is [`StepUpdate::Interrupted`].
    ///
    /// Errors: [`StoreError::StepNotFound`] (also for an attempt of another run),
    /// [`StoreError::StepAlreadyFinished`], and the worker-side errors.
    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<StepUpdate>;

    /// Records a step attempt that already finished, in one write: the write path of a step
    /// is one commit. Its `started_at` is the store's clock minus `elapsed`. Fenced like
    /// [`StepStore::complete_step_attempt`]: when the run was paused or canceled meanwhile, the
    /// attempt is stored with that status and no result, and the outcome is
    /// [`StepUpdate::Interrupted`].
    ///
    /// Idempotent by `params.id`: when the store already holds a finished attempt with that
    /// id for this run (a retry whose first try committed but whose answer was lost), it
    /// stores nothing and answers [`StepUpdate::Recorded`] with the stored attempt, whatever
    /// the run's state is now. [`LeaseStore::complete_run_with_steps`] inherits this for its
    /// attempts: a retried completion never stores a step a second time.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for an attempt that is not completed or
    /// failed, a duration out of range, or an id the store holds for another run;
    /// worker-side errors.
    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate>;
}
