//! Publishing state from a workflow: [`WorkflowContext::set_state`].
//!
//! A publication is a step attempt of kind [`StepKind::State`]
//! named `state/{key}` (then `state/{key}:1`, ... in call order), recorded together with the
//! new value. A replay finds the attempt and publishes nothing, so the latest value a
//! client reads is always the one the furthest execution published, never an older one
//! again.

use serde::Serialize;
use serde_json::Value;

use super::WorkflowContext;
use crate::failure::WorkflowError;
use crate::limits::{self, Field};
use crate::model::StepKind;
use crate::replay::{Call, Resolved};

impl WorkflowContext {
    /// Publishes `value` as the latest value of `key` for this run, for clients to read
    /// ([`Client::get_state`](crate::Client::get_state)) or wait on
    /// ([`Client::wait_for_state`](crate::Client::wait_for_state)): a progress bar, a "how far is
    /// it" answer, without reading the step history. Each publication gives the key a
    /// version one more than before (1 for the first); waiting clients are woken by the
    /// store's notifications.
    ///
    /// ```no_run
    /// # async fn demo(ctx: tasks_runtime::WorkflowContext) -> Result<(), tasks_runtime::WorkflowError> {
    /// #[derive(serde::Serialize)]
    /// struct Progress { done: u32, total: u32 }
    ///
    /// for done in 1..=10 {
    ///     // ... one step of work ...
    ///     ctx.set_state("progress", &Progress { done, total: 10 }).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// Publications are memoized like steps: on replay a publication that was recorded is
    /// skipped, so a value published earlier never overwrites a later one. The value is
    /// written at once (with the steps recorded before it), not at the run's end.
    ///
    /// A key or a value past the [`limits`] (a key of more than
    /// [`MAX_TOPIC_BYTES`](crate::limits::MAX_TOPIC_BYTES), a value of more than
    /// [`MAX_PAYLOAD_BYTES`](crate::limits::MAX_PAYLOAD_BYTES) of JSON), a value that
    /// does not serialize, or one holding a NaN or infinite float (JSON has neither), is a
    /// non-retryable error and nothing is published.
    pub async fn set_state<T: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &T,
    ) -> Result<(), WorkflowError> {
        limits::check_finite(value).map_err(|found| {
            WorkflowError::msg(format!(
                "the value of state {key:?} cannot be published: {found}"
            ))
            .non_retryable()
        })?;
        let value = serde_json::to_value(value).map_err(|error| {
            WorkflowError::msg(format!(
                "the value of state {key:?} does not serialize: {error}"
            ))
            .non_retryable()
        })?;
        self.set_state_json(key, value).await
    }

    /// The untyped publication: like [`WorkflowContext::set_state`] with a JSON value.
    pub async fn set_state_json(&self, key: &str, value: Value) -> Result<(), WorkflowError> {
        limits::check_state_key(key).map_err(|error| WorkflowError::from(error).non_retryable())?;
        limits::check_json(Field::StateValue, &value)
            .map_err(|error| WorkflowError::from(error).non_retryable())?;
        let Resolved {
            name: step_name,
            record: call,
        } = self.resolve_call(&format!("state/{key}"), Call::of(StepKind::State))?;
        self.check_interrupted().await;
        if self.completed_attempt(&step_name).is_some() {
            return Ok(());
        }
        // Earlier steps are durable before the value they led to is published.
        self.flush().await;
        match self
            .inner
            .session
            .set_state(&step_name, key, value, call)
            .await
        {
            Ok(set) => {
                self.remember(set.attempt);
                Ok(())
            }
            Err(halt) => self.halt(halt).await,
        }
    }
}
