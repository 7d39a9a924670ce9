//! What `#[workflow]` and `#[step]` generate: static definitions of workflows and steps.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::WorkflowContext;
use crate::failure::ErrorRecord;
use crate::flow::{Concurrency, ConcurrencyKeyError, DerivedConcurrency};
use crate::retry::RetryPolicy;

pub(crate) mod step;

pub use step::{SourceLocation, StepDefinition, StepRegistration};

/// The future a workflow entry point returns: the JSON output or the recorded error.
pub type EntryFuture = Pin<Box<dyn Future<Output = Result<Value, ErrorRecord>> + Send + 'static>>;

/// Everything the runtime knows about one workflow (one name at one version).
///
/// `#[workflow]` builds one as a `static` and registers it through `inventory`; it can also
/// be registered by hand with [`Registry::register`](crate::Registry::register).
#[derive(Debug)]
pub struct WorkflowDefinition {
    /// The workflow name (defaults to the function name).
    pub name: &'static str,
    /// The version, if given.
    pub version: Option<&'static str>,
    /// The doc comment of the workflow function.
    pub description: Option<&'static str>,
    /// The JSON Schema of the input type.
    pub input_schema: fn() -> Value,
    /// The JSON Schema of the output type.
    pub output_schema: fn() -> Value,
    /// Decodes a JSON input into the input type and drops it: the client refuses an input
    /// that passes the schema but would not decode when the run executes (a number out of
    /// the type's range, a `null` where a float was: the JSON of a NaN). `#[workflow]` sets
    /// it to `check_input::<W>`; a definition built by hand may use
    /// [`check_input`] too.
    pub check_input: fn(&Value) -> Result<(), serde_json::Error>,
    /// The workflow-level retry policy, for errors outside steps.
    pub retry_policy: Option<RetryPolicy>,
    /// The concurrency key each run derives from its input
    /// (`#[workflow(concurrency(key = ..., limit = ...))]`), used by every start that gives
    /// no key of its own; `None`: only starts that give a key have one.
    pub concurrency: Option<DerivedConcurrency>,
    /// The queue its runs go to (`#[workflow(queue = "emails")]`) unless a start names
    /// another ([`StartOptions::queue`](crate::StartOptions::queue)); `None` is
    /// [`DEFAULT_QUEUE`](crate::queue::DEFAULT_QUEUE). Checked by the registry like a name.
    pub queue: Option<&'static str>,
    /// Where the workflow function is.
    pub location: SourceLocation,
    /// Runs the workflow on JSON input.
    pub entry: fn(WorkflowContext, Value) -> EntryFuture,
}

impl WorkflowDefinition {
    /// `name` or `name@version`, for messages.
    pub fn display_name(&self) -> String {
        match self.version {
            Some(version) => format!("{}@{}", self.name, version),
            None => self.name.to_owned(),
        }
    }

    /// The concurrency key and limit a run with `input` derives from it, or `None` when the
    /// workflow declares no key function.
    pub fn derived_concurrency(
        &self,
        input: &Value,
    ) -> Result<Option<Concurrency>, ConcurrencyKeyError> {
        self.concurrency
            .as_ref()
            .map(|derived| derived.derive(&self.display_name(), input))
            .transpose()
    }
}

/// Whether `input` decodes into `W::Input`: the [`WorkflowDefinition::check_input`] of `W`.
pub fn check_input<W: Workflow>(input: &Value) -> Result<(), serde_json::Error> {
    crate::limits::check_round_trip::<W::Input>(input)
}

/// Link-time registration of a workflow, collected by `inventory`.
#[derive(Debug)]
pub struct WorkflowRegistration(pub &'static WorkflowDefinition);

inventory::collect!(WorkflowRegistration);

/// A workflow known at compile time: the typed face of a [`WorkflowDefinition`].
///
/// `#[workflow] async fn checkout(..)` implements it for a type named `checkout` (it lives in
/// the type namespace, next to the function), so runs start with
/// `checkout::start(&client, input)` or `client.start::<checkout>(input)`.
pub trait Workflow: 'static {
    /// The input type: it round-trips through JSON and has a JSON Schema.
    type Input: WorkflowInput;
    /// The output type: it round-trips through JSON and has a JSON Schema.
    type Output: WorkflowOutput;
    /// The static definition registered for this workflow.
    fn definition() -> &'static WorkflowDefinition;
}

/// A type a workflow may take as its input: `Serialize + DeserializeOwned + JsonSchema + Send +
/// 'static`, implemented for every such type.
///
/// The input is checked against its JSON Schema when a run starts, stored as JSON, and decoded
/// again for every attempt, so it must be owned data that round-trips through JSON. The trait
/// exists so that a type missing one of these says why, in one error, on the workflow's input.
#[diagnostic::on_unimplemented(
    message = "the input of a workflow must be `Serialize + DeserializeOwned + JsonSchema + Send + 'static`, and `{Self}` is not",
    label = "a workflow's input is checked against its JSON Schema, stored as JSON, and decoded again for every attempt",
    note = "derive `serde::Serialize`, `serde::Deserialize` and `schemars::JsonSchema`, and own the data (no borrowed fields)"
)]
pub trait WorkflowInput:
    Serialize + DeserializeOwned + schemars::JsonSchema + Send + 'static
{
}

impl<T: Serialize + DeserializeOwned + schemars::JsonSchema + Send + 'static> WorkflowInput for T {}

/// A type a workflow may return as its output: `Serialize + DeserializeOwned + JsonSchema +
/// Send + 'static`, implemented for every such type.
///
/// The output is stored as JSON when the run completes and decoded by whoever awaits the
/// result, possibly in another process; its JSON Schema describes it to operators.
#[diagnostic::on_unimplemented(
    message = "the output of a workflow must be `Serialize + DeserializeOwned + JsonSchema + Send + 'static`, and `{Self}` is not",
    label = "a workflow's output is stored as JSON when the run completes, and decoded by whoever awaits the result",
    note = "derive `serde::Serialize`, `serde::Deserialize` and `schemars::JsonSchema`, and own the data (no borrowed fields)"
)]
pub trait WorkflowOutput:
    Serialize + DeserializeOwned + schemars::JsonSchema + Send + 'static
{
}

impl<T: Serialize + DeserializeOwned + schemars::JsonSchema + Send + 'static> WorkflowOutput for T {}
