//! Support for the code `#[workflow]` and `#[step]` generate. Not a public API: reached only
//! through `::tasks::__private` (or `<crate>::__private` with `crate = "..."`), and free to
//! change in any release.
//!
//! Everything generic lives here, once, and the macros emit only what differs per function:
//! the definition, the call of the user's function, and the assertions below, spanned on the
//! user's types. Each assertion goes through a marker trait whose
//! `#[diagnostic::on_unimplemented]` states why the bound exists, so a missing impl reads
//! "step arguments must be `Clone`: ..." instead of "required by a bound in `__private::...`".

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::client::{Client, StartBuilder};
pub use crate::context::{WorkflowContext, run_step};
pub use crate::definition::{
    EntryFuture, SourceLocation, StepDefinition, StepRegistration, Workflow, WorkflowDefinition,
    WorkflowRegistration, check_input,
};
pub use crate::events::{Event, EventDeclaration, EventRegistration, check_payload};
pub use crate::failure::{ErrorRecord, RecordError};
pub use crate::flow::{DeriveKeyError, DerivedConcurrency};
pub use crate::retry::RetryPolicy;
pub use crate::schedule::{CatchUp, ScheduleDeclaration, ScheduleRegistration};
pub use crate::step_args::{
    ArgList, ArgProbe, ArgsRecorder, RecordSerializable, RecordUnserializable, RecordedArg,
};
pub use crate::step_failure::ReplayError;
pub use inventory;
pub use schemars;
pub use serde;
pub use serde_json;

/// The type of a workflow's first parameter: [`WorkflowContext`], however it is spelled.
#[diagnostic::on_unimplemented(
    message = "the first parameter of a workflow must be its `WorkflowContext`, and `{Self}` is not",
    label = "the runtime passes the run's context here",
    note = "write `async fn name(ctx: WorkflowContext, input: Input)`, or `async fn name(ctx: WorkflowContext)` for a workflow without input"
)]
pub trait IsWorkflowContext {
    /// The context, as this type.
    fn from_context(ctx: WorkflowContext) -> Self;
}

impl IsWorkflowContext for WorkflowContext {
    fn from_context(ctx: WorkflowContext) -> Self {
        ctx
    }
}

/// Passes the run's context as the workflow's first parameter, of type `C`.
pub fn context_as<C: IsWorkflowContext>(ctx: WorkflowContext) -> C {
    C::from_context(ctx)
}

/// A type a `#[step]` may take as an argument.
#[diagnostic::on_unimplemented(
    message = "step arguments must be `Clone`, and `{Self}` is not",
    label = "a retry calls the step again with a fresh copy of this argument",
    note = "derive or implement `Clone`, or take the argument by shared reference (`&T` is `Clone`)"
)]
pub trait StepArg {}

impl<T: Clone> StepArg for T {}

/// A type a `#[step]` may return as its output.
#[diagnostic::on_unimplemented(
    message = "the output of a step must be `Serialize + DeserializeOwned + Send + 'static`, and `{Self}` is not",
    label = "a step's output is stored as JSON once it completes, and replayed from there instead of running the step again",
    note = "derive `serde::Serialize` and `serde::Deserialize`, and own the data (no borrowed fields)"
)]
pub trait StepOutput {}

impl<T: Serialize + DeserializeOwned + Send + 'static> StepOutput for T {}

/// A type a `#[step]` may return as its error.
#[diagnostic::on_unimplemented(
    message = "the error of a step must be recordable, replayable and `Send`, and `{Self}` is not",
    label = "a step's final error is stored, and a replay hands it back to the workflow without running the step again",
    note = "derive `serde::Serialize` and `serde::Deserialize` on your `std::error::Error` type, or use `tasks::WorkflowError`, `Box<dyn std::error::Error + Send + Sync>`, `std::io::Error`, or `anyhow::Error` with the `anyhow` feature"
)]
pub trait StepError<Via> {}

impl<E: ReplayError<Via> + Send, Via> StepError<Via> for E {}

/// A type a `#[workflow]` may return as its error.
#[diagnostic::on_unimplemented(
    message = "the error of a workflow must be recordable, and `{Self}` is not",
    label = "a workflow's error is recorded as the run's failure",
    note = "use a type that implements `std::error::Error + 'static`, `Box<dyn std::error::Error + Send + Sync>`, `tasks::WorkflowError`, or `anyhow::Error` with the `anyhow` feature"
)]
pub trait WorkflowFnError<Via> {}

impl<E: RecordError<Via>, Via> WorkflowFnError<Via> for E {}

/// Compile-time check of a step argument.
pub const fn assert_step_arg<T: StepArg>() {}

/// Compile-time check of a step's output type.
pub const fn assert_step_output<T: StepOutput>() {}

/// Compile-time check of a step's error type.
pub const fn assert_step_error<E: StepError<Via>, Via>() {}

/// Compile-time check of a workflow's error type.
pub const fn assert_workflow_error<E: WorkflowFnError<Via>, Via>() {}

/// The JSON Schema of `T`, as stored in a workflow definition.
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true))
}

/// The JSON Schema of `W`'s input: a `WorkflowDefinition::input_schema`.
pub fn input_schema<W: Workflow>() -> Value {
    schema_for::<W::Input>()
}

/// The JSON Schema of `W`'s output: a `WorkflowDefinition::output_schema`.
pub fn output_schema<W: Workflow>() -> Value {
    schema_for::<W::Output>()
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

/// Runs one attempt of workflow `W` on its stored JSON input: decodes the input, calls the
/// workflow function through `call`, and encodes its output or records its error with `record`.
///
/// The bounds on the input and output come from the `Workflow` impl, so a type missing
/// `Deserialize` is reported once, by that impl. The error type has no bound here: it is
/// checked where `#[workflow]` names [`record_workflow_error`] on the user's type.
pub async fn run_workflow<W, E, F, Fut>(
    ctx: WorkflowContext,
    input: Value,
    call: F,
    record: fn(&E) -> ErrorRecord,
) -> Result<Value, ErrorRecord>
where
    W: Workflow,
    F: FnOnce(WorkflowContext, W::Input) -> Fut,
    Fut: Future<Output = Result<W::Output, E>>,
{
    let input = decode_input::<W::Input>(input)?;
    match call(ctx, input).await {
        Ok(output) => storable_output::<W::Output>(&output),
        Err(error) => Err(record(&error)),
    }
}

/// Encodes a workflow's output for storage, refusing (non-retryably) one that cannot be
/// stored or would not read back as the same value: past the [`limits`](crate::limits),
/// holding a NaN or infinite float anywhere (they serialize as `null`), or not decoding
/// into `T` again.
pub fn storable_output<T: Serialize + DeserializeOwned>(output: &T) -> Result<Value, ErrorRecord> {
    let refuse = |reason: String| {
        ErrorRecord::new(format!("workflow output {reason}"))
            .with_kind("output")
            .non_retryable()
    };
    crate::limits::check_finite(output)
        .map_err(|found| refuse(format!("would not read back as the same value: {found}")))?;
    let value = encode_output(output)?;
    crate::limits::check_json(crate::limits::Field::WorkflowOutput, &value)
        .map_err(|error| refuse(format!("cannot be stored: {error}")))?;
    crate::limits::check_round_trip::<T>(&value).map_err(|error| {
        refuse(format!(
            "would not read back as the same value (a NaN or infinite float is stored as \
             null): {error}"
        ))
    })?;
    Ok(value)
}

/// Records the error a workflow function returned.
pub fn record_workflow_error<E: WorkflowFnError<Via> + RecordError<Via>, Via>(
    error: &E,
) -> ErrorRecord {
    error.to_record()
}

/// The `definition()` of the stand-in type a failed `#[workflow]` leaves behind; never called
/// at run time, because the crate did not compile.
pub fn invalid_workflow_definition() -> &'static WorkflowDefinition {
    unreachable!("`#[workflow]` reported an error for this function")
}

/// Fails the build, in a `const` item, when a `retry(...)` given through constants or
/// expressions breaks a rule that literals are checked against by the macro.
pub const fn assert_retry_policy(policy: Option<RetryPolicy>) {
    if let Some(policy) = policy
        && let Some(problem) = policy.problem()
    {
        panic!("{}", problem);
    }
}

/// Fails the build, in a `const` item, when a step's `timeout` given as an expression is
/// zero (a literal is checked by the macro).
pub const fn assert_step_timeout(timeout: std::time::Duration) {
    if timeout.is_zero() {
        panic!("a step's `timeout` limits each attempt: it must be longer than zero");
    }
}

/// Fails the build, in a `const` item, when `concurrency(limit = ...)` given as an expression
/// is 0 or past the limit (a literal is checked by the macro).
pub const fn assert_concurrency_limit(limit: u32) {
    if limit == 0 {
        panic!(
            "`concurrency(limit = ...)` is the most runs of one key running at once: it must be at least 1"
        );
    }
    if limit > crate::limits::MAX_CONCURRENCY_LIMIT {
        panic!("`concurrency(limit = ...)` must fit in an `i32`");
    }
}

/// What a `#[workflow(concurrency(key = ...))]` function may return: any `Display` type.
#[diagnostic::on_unimplemented(
    message = "a concurrency key is text, and `{Self}` does not implement `Display`",
    label = "the key function returns this",
    note = "return a `String`, a `&str`, a number, or any type that implements `Display`"
)]
pub trait ConcurrencyKeyValue {
    /// The key as stored.
    fn key_string(&self) -> String;
}

impl<T: std::fmt::Display + ?Sized> ConcurrencyKeyValue for T {
    fn key_string(&self) -> String {
        self.to_string()
    }
}

/// A function the key of a run is derived with: `Fn(&Input) -> impl Display`. The lifetime
/// parameter lets the key borrow from the input (`fn customer_of(o: &Order) -> &str`).
#[diagnostic::on_unimplemented(
    message = "`concurrency(key = ...)` must be a function from `&{I}`, the workflow's input, to a key; `{Self}` is not",
    label = "called with `&{I}`; must return a `String`, `&str`, number or other `Display` type",
    note = "write `fn key(input: &{I}) -> String` and give its path, or a closure such as `|input: &{I}| input.customer.clone()`"
)]
pub trait ConcurrencyKeyFn<'a, I: 'a> {
    /// What the function returns.
    type Key: ConcurrencyKeyValue;
    /// Calls the function.
    fn key_of(&self, input: &'a I) -> Self::Key;
}

impl<'a, I: 'a, F, K> ConcurrencyKeyFn<'a, I> for F
where
    F: Fn(&'a I) -> K,
    K: ConcurrencyKeyValue,
{
    type Key = K;

    fn key_of(&self, input: &'a I) -> K {
        self(input)
    }
}

/// The concurrency key of a run of `W` with `input`, derived with `key` (a function path or
/// any expression): the input decoded, `key` called on it and formatted, a panic caught.
pub fn derive_concurrency_key<W, F>(input: &Value, key: F) -> Result<String, DeriveKeyError>
where
    W: Workflow,
    F: for<'a> ConcurrencyKeyFn<'a, W::Input>,
{
    let input = <W::Input as serde::Deserialize>::deserialize(input)
        .map_err(|error| DeriveKeyError::Input(error.to_string()))?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        key.key_of(&input).key_string()
    }))
    .map_err(|panic| DeriveKeyError::Panicked(crate::failure::panic_message(panic.as_ref())))
}

/// [`derive_concurrency_key`] for a closure: the plain `Fn` bound gives an unannotated
/// closure (`|order| order.customer.clone()`) its parameter type.
pub fn derive_concurrency_key_by_closure<W, F, K>(
    input: &Value,
    key: F,
) -> Result<String, DeriveKeyError>
where
    W: Workflow,
    F: Fn(&W::Input) -> K,
    K: ConcurrencyKeyValue,
{
    derive_concurrency_key::<W, F>(input, key)
}

/// Always `None`: `#[step]` returns it from the `async` block that holds the step's body, so
/// that the block's output type is `Result<T, E>` before the body is type-checked.
pub const fn declared_output<T, E>() -> Option<Result<T, E>> {
    None
}

/// The future of a step call, boxed: `#[step]` awaits this rather than [`run_step`].
///
/// Through a plain function, a type that misses a bound is reported once, at the generic
/// argument `#[step]` spans on the user's type, instead of at the call and the `.await` too.
pub fn run_step_boxed<'a, T, E, F, Fut, Via>(
    definition: &'static StepDefinition,
    f: F,
) -> Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>
where
    F: FnMut(&mut ArgsRecorder) -> Fut + Send + 'a,
    Fut: Future<Output = Result<T, E>> + Send + 'a,
    T: StepOutput + Serialize + DeserializeOwned + Send + 'a,
    E: StepError<Via> + ReplayError<Via> + Send + 'a,
    Via: 'a,
{
    Box::pin(run_step(definition, f))
}

/// The input of a workflow declared with a schedule: its runs all take the input type's
/// `Default`.
#[diagnostic::on_unimplemented(
    message = "a workflow with a declared `schedule` starts its runs with `Default::default()` as input, and `{Self}` is not `Default`",
    label = "the schedule's runs need a default input",
    note = "implement `Default` for the input type, or create the schedule at run time with `Client::create_schedule` and an input"
)]
pub trait ScheduledInput {
    /// The input of every run of the schedule.
    fn scheduled_default() -> Self;
}

impl<T: Default> ScheduledInput for T {
    fn scheduled_default() -> Self {
        T::default()
    }
}

/// The default input of a scheduled workflow, as JSON (`null` if it does not serialize,
/// which the input's schema check then reports when the schedule is put).
pub fn scheduled_input<W: Workflow>() -> Value
where
    W::Input: ScheduledInput,
{
    serde_json::to_value(W::Input::scheduled_default()).unwrap_or(Value::Null)
}
