//! Procedural macros of `tasks`: `#[workflow]` and `#[step]`. Use them through the `tasks`
//! crate; the code they generate reaches the runtime only through `::tasks::__private` (or
//! the path given with `crate = "..."`).
//!
//! Each macro runs the same pipeline, one module per stage and each stage depending only on
//! the ones before it: `parse` reads the options and the signature (never the body),
//! `validate` collects every error and builds the `model`, and `expand` generates code from
//! the model. On any error, `expand::fallback` emits the original item unchanged with all
//! errors next to it (and, for a workflow, a stand-in type so that uses of it do not fail
//! too).
#![warn(missing_docs)]

mod errors;
mod expand;
mod kind;
mod model;
mod parse;
mod placement;
mod validate;

use proc_macro::TokenStream;

use crate::kind::MacroKind;

/// Makes `async fn NAME(ctx: WorkflowContext, input: In) -> Result<Out, E>` a durable
/// workflow, registered with the runtime at link time.
///
/// Options: `name = "..."` (default: the function name), `version = "..."`,
/// `queue = "..."` (the queue of its runs, a name like the workflow's; see `tasks::QueueOptions`), and
/// `retry(max_attempts = 5, initial_interval = "1s", backoff = 2.0, max_interval = "5m")`
/// with every key optional; durations are strings such as `"250ms"` or `"1m30s"`, or `const`
/// `Duration` expressions; `concurrency(key = customer_of, limit = 2)`, where `key` is callable
/// as `Fn(&Input) -> impl Display` (a function path or a closure) and derives each run's
/// concurrency key from its input, and `limit` (at least 1) caps the runs of one key running
/// at once. The doc comment becomes the workflow's description. A crate that
/// re-exports `tasks` passes its path with `crate = "my_crate::tasks"`.
///
/// A workflow without input takes only the context; its input type is `()`.
///
/// Next to the function, a type of the same name implements `tasks::Workflow`, so the
/// function must be a free item of a module: on an associated function (in an `impl` or
/// `trait` block) the macro reports one error saying so, when the compiler names the
/// function's source file. In doc comments, link
/// to one or the other explicitly: ``[`checkout()`]`` for the function,
/// ``[`struct@checkout`]`` for the type (a bare ``[`checkout`]`` is ambiguous to rustdoc).
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let input = match parse::Input::parse(MacroKind::Workflow, args.into(), item.clone()) {
        Ok(input) => input,
        Err(error) => return expand::fallback::unparsed(item, error).into(),
    };
    // An associated function: one error that says what to write, not rustc's refusal of
    // each generated item. (A `self` receiver has an error of its own, saying the same.)
    if input.item.sig.receiver().is_none()
        && let Some(error) = placement::associated(&input.item.sig.ident)
    {
        return expand::fallback::unparsed(item, error).into();
    }
    match validate::workflow(input) {
        Ok(workflow) => expand::workflow(item, &workflow),
        Err(invalid) => expand::fallback::invalid(item, invalid),
    }
    .into()
}

/// Makes `async fn NAME(args..) -> Result<T, E>` a step: called from a workflow, its output
/// is recorded, replayed instead of recomputed, and its body is retried on error.
///
/// Options: `name = "..."` (default: the function name), `retry(...)` as on `#[workflow]`,
/// and `crate = "..."` as on `#[workflow]`. Every argument must be `Clone` (references are),
/// because each attempt gets its own copy.
#[proc_macro_attribute]
pub fn step(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let input = match parse::Input::parse(MacroKind::Step, args.into(), item.clone()) {
        Ok(input) => input,
        Err(error) => return expand::fallback::unparsed(item, error).into(),
    };
    match validate::step(input) {
        Ok(step) => expand::step(&step),
        Err(invalid) => expand::fallback::invalid(item, invalid),
    }
    .into()
}
