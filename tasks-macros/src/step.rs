//! `#[step]`: parse, validate, then expand (or leave the function untouched on error).

use proc_macro2::TokenStream;
use quote::quote;
use syn::{FnArg, LitStr, PatType};

use crate::attr::{parse_options, RetryOptions};
use crate::check::{check_common, result_types, MacroKind, ResultTypes};
use crate::errors::Errors;
use crate::expand;
use crate::item::{parse_item_fn, ItemFn};

/// A `#[step]` function that passed every check.
pub(crate) struct StepFn<'a> {
    /// The function itself.
    pub item: &'a ItemFn,
    /// The recorded step name: `name = "..."` or the function name.
    pub name: LitStr,
    /// `retry(...)`.
    pub retry: Option<RetryOptions>,
    /// The parameters, in order (a step has no receiver).
    pub args: Vec<&'a PatType>,
    /// The return type's halves.
    pub result: ResultTypes<'a>,
}

/// Expands `#[step(args)] item`.
pub(crate) fn step(args: TokenStream, item: TokenStream) -> TokenStream {
    let kind = MacroKind::Step;
    let item_fn = match parse_item_fn(kind, item.clone()) {
        Ok(item_fn) => item_fn,
        Err(error) => {
            let error = error.into_compile_error();
            return quote!(#item #error);
        }
    };
    let mut errors = Errors::default();
    let options = parse_options(kind, args, &mut errors);
    check_common(kind, &item_fn, &mut errors);
    let result = result_types(kind, &item_fn, &mut errors);
    match (errors.finish(), result) {
        (Ok(()), Some(result)) => {
            let step = StepFn {
                item: &item_fn,
                name: options.name_or(&item_fn.sig.ident),
                retry: options.retry,
                args: item_fn
                    .sig
                    .inputs
                    .iter()
                    .filter_map(|arg| match arg {
                        FnArg::Typed(arg) => Some(arg),
                        FnArg::Receiver(_) => None,
                    })
                    .collect(),
                result,
            };
            expand::step::expand(&step)
        }
        // The untouched function still compiles and can be called, so nothing cascades. A
        // missing result always records an error, so `errors` is never empty.
        (errors, _) => {
            let errors = errors.err().unwrap_or_default();
            quote!(#item #errors)
        }
    }
}
