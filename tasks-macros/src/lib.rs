//! Procedural macros of `tasks`: `#[workflow]` and `#[step]`. Use them through the `tasks`
//! crate; the code they generate reaches the runtime only through `::tasks::__private`.
//!
//! Each macro runs the same pipeline: `item` and `attr` parse, `check` (with the
//! kind-specific parts in `workflow` and `step`) validates and collects every error, and
//! `expand` generates code. On any error the original item is emitted unchanged, with all
//! errors next to it (and, for a workflow, a stand-in type so that uses of it do not fail too).
#![warn(missing_docs)]

mod attr;
mod check;
mod duration;
mod errors;
mod expand;
mod item;
mod step;
mod workflow;

use proc_macro::TokenStream;

/// Makes `async fn NAME(ctx: WorkflowContext, input: In) -> Result<Out, E>` a durable
/// workflow, registered with the runtime at link time.
///
/// Options: `name = "..."` (default: the function name), `version = "..."`, and
/// `retry(max_attempts = 5, initial_interval = "1s", backoff = 2.0, max_interval = "5m")`
/// with every key optional; durations are strings such as `"250ms"` or `"1m30s"`, or `const`
/// `Duration` expressions. The doc comment becomes the workflow's description.
///
/// A workflow without input takes only the context; its input type is `()`.
///
/// Next to the function, a type of the same name implements `tasks::Workflow`, so the
/// function must be a free item of a module (not in an `impl` block). In doc comments, link
/// to one or the other explicitly: ``[`checkout()`]`` for the function,
/// ``[`struct@checkout`]`` for the type (a bare ``[`checkout`]`` is ambiguous to rustdoc).
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    workflow::workflow(args.into(), item.into()).into()
}

/// Makes `async fn NAME(args..) -> Result<T, E>` a step: called from a workflow, its output
/// is recorded, replayed instead of recomputed, and its body is retried on error.
///
/// Options: `name = "..."` (default: the function name) and `retry(...)` as on `#[workflow]`.
/// Every argument must be `Clone` (references are), because each attempt gets its own copy.
#[proc_macro_attribute]
pub fn step(args: TokenStream, item: TokenStream) -> TokenStream {
    step::step(args.into(), item.into()).into()
}
