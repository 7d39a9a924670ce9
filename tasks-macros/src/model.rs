//! The validated model: what `expand` generates code from. Everything here passed every
//! check, so expansion cannot fail; it is built only by `validate`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::{LitStr, PatType, Path, Type};

pub(crate) use crate::parse::{
    CatchUpValue, ConcurrencyOptions, DurationValue, ItemFn, LimitValue, RetryOptions,
    ScheduleOptions,
};

/// A `#[workflow]` function that passed every check.
pub(crate) struct Workflow {
    /// The function itself.
    pub item: ItemFn,
    /// The registered name: `name = "..."` or the function name.
    pub name: LitStr,
    /// `version = "..."`.
    pub version: Option<LitStr>,
    /// The function's doc comment.
    pub description: Option<String>,
    /// `retry(...)`.
    pub retry: Option<RetryOptions>,
    /// The type of the first parameter, as written: `WorkflowContext`, or an alias of it,
    /// which `expand` asserts on the user's tokens.
    pub context: Box<Type>,
    /// What the workflow takes after its context.
    pub input: WorkflowInput,
    /// The return type's halves.
    pub result: ResultTypes,
    /// Where generated code finds the runtime.
    pub private: PrivatePath,
    /// `events(...)`: the event types the workflow accepts.
    pub events: Vec<Path>,
    /// `schedule = "..."` with its `timezone` and `catch_up`.
    pub schedule: Option<ScheduleOptions>,
    /// `concurrency(key = .., limit = ..)`: the key each run derives from its input.
    pub concurrency: Option<ConcurrencyOptions>,
    /// `queue = "..."`.
    pub queue: Option<LitStr>,
}

/// A `#[step]` function that passed every check.
pub(crate) struct Step {
    /// The function itself.
    pub item: ItemFn,
    /// The recorded step name: `name = "..."` or the function name.
    pub name: LitStr,
    /// `retry(...)`.
    pub retry: Option<RetryOptions>,
    /// `timeout = "..."`.
    pub timeout: Option<DurationValue>,
    /// `record_args = ...`: whether the arguments are stored with each attempt.
    pub record_args: bool,
    /// The parameters, in order (a step has no receiver).
    pub args: Vec<PatType>,
    /// The return type's halves.
    pub result: ResultTypes,
    /// Where generated code finds the runtime.
    pub private: PrivatePath,
}

/// What a workflow takes after its context.
#[derive(Clone)]
pub(crate) enum WorkflowInput {
    /// `async fn nightly(ctx: WorkflowContext)`: the input type is `()`.
    Unit,
    /// `async fn checkout(ctx: WorkflowContext, order: Order)`.
    Typed(Box<Type>),
}

/// The two halves of a `Result<Ok, Err>` return type.
#[derive(Clone)]
pub(crate) struct ResultTypes {
    /// The success type.
    pub ok: Type,
    /// The error type.
    pub err: Type,
}

/// A function that failed validation: its errors, and what is still known of it.
pub(crate) struct Invalid {
    /// Every error, as `compile_error!` invocations.
    pub errors: TokenStream,
    /// For a workflow, what its stand-in type needs; `None` when no stand-in may be emitted.
    pub stand_in: Option<Box<StandIn>>,
}

/// What a failed `#[workflow]` still defines, so that code naming its type does not fail too
/// (the `fallback.rs` of thiserror). Types that were invalid are `None` and become `()`.
pub(crate) struct StandIn {
    /// The function, for its name, visibility and `#[cfg]`s.
    pub item: ItemFn,
    /// The input, if it was valid.
    pub input: Option<WorkflowInput>,
    /// The output type, if the return type was valid.
    pub output: Option<Type>,
    /// Where generated code finds the runtime.
    pub private: PrivatePath,
}

/// `::tasks::__private`, or `<crate>::__private` with `crate = "..."`: the only way generated
/// code reaches the runtime.
#[derive(Clone)]
pub(crate) struct PrivatePath(TokenStream);

impl PrivatePath {
    /// The private module under `krate`, or under `::tasks` by default.
    pub(crate) fn new(krate: Option<&Path>) -> Self {
        match krate {
            Some(krate) => PrivatePath(quote!(#krate::__private)),
            None => PrivatePath(quote!(::tasks::__private)),
        }
    }
}

impl ToTokens for PrivatePath {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        self.0.to_tokens(tokens);
    }
}

impl ToTokens for WorkflowInput {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            WorkflowInput::Unit => tokens.extend(quote!(())),
            WorkflowInput::Typed(ty) => ty.to_tokens(tokens),
        }
    }
}
