//! Step attempts: the transitions that write them under the run's lease, what becomes of an
//! attempt whose run was paused or canceled while it ran, and how a missed or repeated step
//! write is explained.

use uuid::Uuid;

use super::Transition;
use crate::error::{Operation, StoreError, StoreResult};
use crate::holder::Holder;
use crate::model::{RunStatus, StepAttempt, StepStatus, WorkflowRun};

use RunStatus::{Canceled, Paused};

/// Starts a step attempt of a running run (durable sleeps; function steps are recorded
/// finished).
pub const CREATE_STEP: Transition = Transition::leased(Operation::CreateStepAttempt);

/// Finishes a running step attempt of a running run.
pub const COMPLETE_STEP: Transition = Transition::leased(Operation::CompleteStepAttempt);

/// Records a finished step attempt of a running run.
pub const RECORD_STEP: Transition = Transition::leased(Operation::RecordStepAttempt);

/// The status a step attempt takes when its run was paused or canceled while the step ran:
/// the attempt is kept, marked like its run, without its result. `None` when the run was not
/// interrupted.
pub fn interrupted(run: RunStatus) -> Option<StepStatus> {
    match run {
        Paused => Some(StepStatus::Paused),
        Canceled => Some(StepStatus::Canceled),
        _ => None,
    }
}

/// Step statuses an interruption may still mark: a running attempt, or one a pause marked
/// before a cancel.
pub const MARKABLE_STEP: &[StepStatus] = &[StepStatus::Running, StepStatus::Paused];

/// Why finishing step attempt `step_id` of `run_id` matched nothing, when its run was not
/// interrupted (or the attempt could not be marked): from the run and the attempt as they
/// are now.
pub fn explain_step_miss(
    transition: &Transition,
    run_id: Uuid,
    step_id: Uuid,
    holder: &Holder,
    run: Option<&WorkflowRun>,
    step: Option<&StepAttempt>,
) -> StoreError {
    let Some(run) = run else {
        return transition.miss(run_id, Some(holder), None);
    };
    match step {
        Some(step) if step.workflow_run_id == run_id && step.status != StepStatus::Running => {
            StoreError::StepAlreadyFinished {
                id: step_id,
                status: step.status,
            }
        }
        Some(step) if step.workflow_run_id == run_id => {
            transition.miss(run_id, Some(holder), Some(run))
        }
        _ => StoreError::StepNotFound { id: step_id },
    }
}

/// What a step write finds when the id it carries is already stored: the rule that makes
/// [`StepStore::record_step_attempt`](crate::StepStore::record_step_attempt) and
/// [`StepStore::create_step_attempt`](crate::StepStore::create_step_attempt) idempotent under retry.
///
/// - An attempt of another run: the id was reused, an [`StoreError::InvalidArgument`].
/// - A finished (completed or failed) attempt of this run, for a record, or any attempt of
///   this run, for a create: the first try committed and its answer was lost; the write is
///   answered with the stored attempt and writes nothing.
/// - A record whose stored attempt was marked paused or canceled (its first try found the
///   run interrupted): `None`, and the write classifies the run as it is now, storing
///   nothing new (its insert finds the id taken).
pub fn stored_again(
    run_id: Uuid,
    stored: Option<StepAttempt>,
    finished_only: bool,
) -> StoreResult<Option<StepAttempt>> {
    match stored {
        None => Ok(None),
        Some(step) if step.workflow_run_id != run_id => Err(StoreError::InvalidArgument(format!(
            "step attempt id {} is already used by another run",
            step.id
        ))),
        Some(step)
            if !finished_only
                || matches!(step.status, StepStatus::Completed | StepStatus::Failed) =>
        {
            Ok(Some(step))
        }
        Some(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunStatus::Running;

    #[test]
    fn interrupted_steps_are_marked_like_their_run() {
        assert_eq!(interrupted(Paused), Some(StepStatus::Paused));
        assert_eq!(interrupted(Canceled), Some(StepStatus::Canceled));
        assert_eq!(interrupted(Running), None);
    }
}
