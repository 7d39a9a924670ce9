//! The code `#[step]` generates: the same signature, with a body that runs the original body
//! through `run_step`, which memoizes its output and calls it again on retries.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Pat, PatIdent, Signature};

use super::common::{RetryDefault, retry_policy, source_location};
use crate::model::{ItemFn, Step};

/// Rewrites the step function:
///
/// ```text
/// #[attrs] vis async fn charge(__tasks_arg0: &Order, __tasks_arg1: u32) -> Result<T, E> {
///     assert_step_arg::<&Order>(); assert_step_arg::<u32>(); // and the output and error
///     async fn __tasks_step_impl(order: &Order, mut count: u32) -> Result<T, E> { <body> }
///     static __TASKS_STEP_DEFINITION: StepDefinition = ...;
///     run_step_boxed::<T, E, _, _>(&__TASKS_STEP_DEFINITION, move || __tasks_step_impl(
///         <&Order as Clone>::clone(&__tasks_arg0), <u32 as Clone>::clone(&__tasks_arg1),
///     ))
///     .await
/// }
/// ```
///
/// The original parameters, patterns included, move to the inner function, whose body is the
/// user's block with its own spans. The outer parameters get plain generated names, so every
/// attempt can clone them.
pub(crate) fn step(step: &Step) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        body,
    } = &step.item;
    let private = &step.private;
    let arg_idents: Vec<_> = (0..step.args.len())
        .map(|index| format_ident!("__tasks_arg{}", index))
        .collect();

    let outer_sig = outer_signature(sig, &arg_idents);
    let mut inner_sig = sig.clone();
    inner_sig.ident = format_ident!("__tasks_step_impl", span = sig.ident.span());

    // Each assertion is spanned on the user's type, so a missing trait is reported there, with
    // the reason the marker trait gives; the same bounds on `run_step_boxed` then add nothing.
    let arg_assertions = step.args.iter().map(|arg| {
        let ty = &arg.ty;
        quote_spanned!(ty.span()=> #private::assert_step_arg::<#ty>();)
    });
    let ok = &step.result.ok;
    let err = &step.result.err;
    let ok_assertion = quote_spanned!(ok.span()=> #private::assert_step_output::<#ok>(););
    let err_assertion = quote_spanned!(err.span()=> #private::assert_step_error::<#err>(););
    let clones = step.args.iter().zip(&arg_idents).map(|(arg, ident)| {
        let ty = &arg.ty;
        quote_spanned!(ty.span()=> <#ty as ::core::clone::Clone>::clone(&#ident))
    });

    let name = &step.name;
    let retry_policy = retry_policy(private, step.retry.as_ref(), RetryDefault::Step);
    let location = source_location(private, sig.ident.span());

    quote! {
        #(#attrs)*
        #vis #outer_sig {
            #(#arg_assertions)*
            #ok_assertion
            #err_assertion

            #inner_sig #body

            static __TASKS_STEP_DEFINITION: #private::StepDefinition =
                #private::StepDefinition {
                    name: #name,
                    retry_policy: #retry_policy,
                    location: #location,
                };

            #private::run_step_boxed::<#ok, #err, _, _>(
                &__TASKS_STEP_DEFINITION,
                move || __tasks_step_impl(#(#clones),*),
            )
            .await
        }
    }
}

/// The signature with every parameter renamed to its generated identifier, and without
/// parameter attributes (those stay on the inner function, with the patterns).
fn outer_signature(sig: &Signature, arg_idents: &[syn::Ident]) -> Signature {
    let mut outer = sig.clone();
    let typed = outer.inputs.iter_mut().filter_map(|arg| match arg {
        FnArg::Typed(arg) => Some(arg),
        FnArg::Receiver(_) => None,
    });
    for (arg, ident) in typed.zip(arg_idents) {
        arg.attrs.clear();
        *arg.pat = Pat::Ident(PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident: ident.clone(),
            subpat: None,
        });
    }
    outer
}
