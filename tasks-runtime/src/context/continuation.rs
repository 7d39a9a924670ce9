//! Continue-as-new from a workflow: [`WorkflowContext::continue_as_new`].
//!
//! The call records nothing itself: it halts the run, and the executor finishes it by
//! continuing it as new ([`ContinueStore::continue_run`](crate::ContinueStore::continue_run)),
//! in one transaction fenced by this execution's claim. A replay never reaches the call
//! again: the run that made it is finished.

use super::WorkflowContext;
use crate::definition::Workflow;
use crate::failure::WorkflowError;
use crate::limits::{self, Field};
use crate::session::Halt;

impl WorkflowContext {
    /// Finishes this run and starts its successor: a new run of the same workflow with
    /// `input` and an empty history, created in the same transaction as this run's finish
    /// (see [`crate::continuation`]). Return what it returns, so that the workflow's body
    /// ends there:
    ///
    /// ```ignore
    /// #[workflow]
    /// async fn poller(ctx: WorkflowContext, state: PollState) -> Result<Summary, WorkflowError> {
    ///     let mut state = state;
    ///     for _ in 0..100 {
    ///         state = poll(state).await?;
    ///         if state.done { return Ok(state.summary()); }
    ///         ctx.sleep("wait", Duration::from_secs(60)).await?;
    ///     }
    ///     ctx.continue_as_new::<poller>(state).await
    /// }
    /// ```
    ///
    /// The loop of a long-lived workflow (a subscription, a poller) would otherwise grow its
    /// history until the worker's step limit
    /// ([`max_steps_per_run`](crate::WorkerBuilder::max_steps_per_run)) fails it; continuing
    /// every so many iterations keeps each run's history short. The successor shares this
    /// run's lineage: waiting for the result of any run of it
    /// ([`RunHandle::result`](crate::RunHandle::result)) follows the successors to the
    /// run that finishes for good, and events sent to this run reach the lineage's current
    /// run.
    ///
    /// This run lands `completed` without an output, naming its successor
    /// (`continued_as_run_id`). Every step completed before the call is durable first.
    /// The call never returns `Ok`.
    ///
    /// Errors, all non-retryable, with nothing written (the workflow may handle them): `W`
    /// is not this run's workflow (name and version), this run is a child (its parent
    /// waits for its output), or `input` cannot be stored (it does not serialize, holds a
    /// NaN or infinite float, does not decode into `W::Input` again, or is past the
    /// [`limits`]).
    pub async fn continue_as_new<W: Workflow>(
        &self,
        input: W::Input,
    ) -> Result<W::Output, WorkflowError> {
        let definition = W::definition();
        let run = &self.inner.run;
        if definition.name != run.workflow_name || definition.version != run.version.as_deref() {
            return Err(WorkflowError::msg(format!(
                "workflow run {} of {} cannot continue as new as workflow {}: a run continues \
                 as its own workflow",
                run.id,
                match &run.version {
                    Some(version) => format!("{}@{version}", run.workflow_name),
                    None => run.workflow_name.clone(),
                },
                definition.display_name(),
            ))
            .non_retryable());
        }
        if let Some(refused) = crate::continuation::refusal(run) {
            return Err(WorkflowError::msg(refused).non_retryable());
        }
        let input_error = |reason: String| {
            WorkflowError::msg(format!(
                "the input of the run that continues workflow {} cannot be stored: {reason}",
                definition.display_name()
            ))
            .non_retryable()
        };
        limits::check_finite(&input).map_err(|found| input_error(found.to_string()))?;
        let input = serde_json::to_value(&input).map_err(|error| input_error(error.to_string()))?;
        (definition.check_input)(&input).map_err(|error| {
            input_error(format!(
                "does not decode into the workflow's input type: {error}"
            ))
        })?;
        limits::check_json(Field::Input, &input).map_err(|error| input_error(error.to_string()))?;
        self.check_interrupted().await;
        // Earlier steps are durable before the run finishes.
        self.flush().await;
        tracing::debug!(run.id = %run.id, "the run continues as new");
        self.halt(Halt::Continue(input)).await
    }
}
