//! The workflow context and the step runner: memoization and replay.
// (implementation in progress)
use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::definition::StepDefinition;
use crate::failure::{RecordError, WorkflowError};

/// Handle to the running workflow, passed as the first argument of every `#[workflow]`.
#[derive(Clone)]
pub struct WorkflowContext {}

impl WorkflowContext {
    /// Durable sleep.
    pub async fn sleep(&self, _name: &str, _duration: Duration) -> Result<(), WorkflowError> {
        todo!()
    }
}

/// Runs one step call, memoized.
pub async fn run_step<T, E, F, Fut>(_definition: &'static StepDefinition, mut f: F) -> Result<T, E>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: RecordError + Send,
{
    f().await
}
