//! Support for the code `#[workflow]` and `#[step]` generate. Not a public API: reached only
//! through `::tasks::__private`, and free to change in any release.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub use crate::context::{run_step, WorkflowContext};
pub use crate::definition::{
    EntryFuture, SourceLocation, StepDefinition, Workflow, WorkflowDefinition,
    WorkflowRegistration,
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

/// Compile-time check: a workflow input must be `Deserialize + JsonSchema`.
pub const fn assert_input<T: DeserializeOwned + schemars::JsonSchema + Send + 'static>() {}

/// Compile-time check: a workflow or step output must round-trip through JSON.
pub const fn assert_output<T: Serialize + DeserializeOwned + Send + 'static>() {}

/// Compile-time check: a workflow or step error must be recordable.
pub const fn assert_error<E: RecordError>() {}

/// Compile-time check: a step argument is cloned for every retry.
pub const fn assert_step_arg<T: Clone>() {}
