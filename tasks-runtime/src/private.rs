//! Support for the code `#[workflow]` and `#[step]` generate. Not a public API: reached only
//! through `::tasks::__private`, and free to change in any release.

use std::future::Future;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub use crate::client::{Client, ClientError, RunHandle};
pub use crate::context::{run_step, WorkflowContext};
pub use crate::definition::{
    EntryFuture, SourceLocation, StepDefinition, Workflow, WorkflowDefinition, WorkflowRegistration,
};
pub use crate::failure::{ErrorRecord, RecordError};
pub use crate::retry::RetryPolicy;
pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;

/// The JSON Schema of `T`, as stored in a workflow definition.
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true))
}

/// Decodes a run's stored input into the workflow's input type.
pub fn decode_input<T: DeserializeOwned>(input: Value) -> Result<T, ErrorRecord> {
    serde_json::from_value(input).map_err(|error| {
        ErrorRecord::new(format!("workflow input does not match its type: {error}"))
            .with_kind("input")
            .non_retryable()
    })
}

/// Encodes a workflow's output for storage.
pub fn encode_output<T: Serialize>(output: &T) -> Result<Value, ErrorRecord> {
    serde_json::to_value(output).map_err(|error| {
        ErrorRecord::new(format!("workflow output could not be serialized: {error}"))
            .with_kind("output")
            .non_retryable()
    })
}

/// Records the error a workflow function returned.
pub fn record_error<E: RecordError + ?Sized>(error: &E) -> ErrorRecord {
    error.to_record()
}

/// Compile-time check: a workflow or step output must round-trip through JSON.
pub const fn assert_output<T: Serialize + DeserializeOwned + Send + 'static>() {}

/// Compile-time check: a workflow or step error must be recordable.
pub const fn assert_error<E: RecordError>() {}

/// Compile-time check: a step argument is cloned for every retry.
pub const fn assert_step_arg<T: Clone>() {}

/// The future of a step call, boxed: `#[step]` awaits this rather than [`run_step`].
///
/// Through a plain function, a type that misses a bound is reported once, at the generic
/// argument `#[step]` spans on the user's type, instead of at the call and the `.await` too.
pub fn run_step_boxed<'a, T, E, F, Fut>(
    definition: &'static StepDefinition,
    f: F,
) -> Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>
where
    F: FnMut() -> Fut + Send + 'a,
    Fut: Future<Output = Result<T, E>> + Send + 'a,
    T: Serialize + DeserializeOwned + Send + 'a,
    E: RecordError + Send + 'a,
{
    Box::pin(run_step(definition, f))
}
