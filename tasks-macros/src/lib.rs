//! Procedural macros for `tasks`. Use them through the `tasks` crate.
use proc_macro::TokenStream;

/// Makes an async function a durable workflow.
#[proc_macro_attribute]
pub fn workflow(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}

/// Makes an async function a memoized step.
#[proc_macro_attribute]
pub fn step(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
