//! The code `#[step]` generates: the same signature, with a body that runs the original body
//! through `run_step`, which memoizes its output and calls it again on retries.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{FnArg, Pat, PatIdent, PatType, Signature};

use super::common::{RetryDefault, retry_assertion, retry_policy, source_location};
use crate::model::{DurationValue, ItemFn, Step};

/// Rewrites the step function:
///
/// ```text
/// #[attrs] vis async fn charge(&self, __tasks_arg0: &Order, __tasks_arg1: u32) -> Result<T, E> {
///     assert_step_arg::<&Order>(); assert_step_arg::<u32>(); // and the output and error
///     static __TASKS_STEP_DEFINITION: StepDefinition = ...;
///     run_step_boxed::<T, E, _, _, _>(&__TASKS_STEP_DEFINITION, move |__tasks_recorder| {
///         __tasks_recorder.record(|__tasks_list| { // not with `record_args = false`
///             __tasks_list.push("order", (&ArgProbe(&__tasks_arg0)).__tasks_record_arg());
///             __tasks_list.push("count", (&ArgProbe(&__tasks_arg1)).__tasks_record_arg());
///         });
///         let order: &Order = <&Order as Clone>::clone(&__tasks_arg0);
///         let mut count: u32 = <u32 as Clone>::clone(&__tasks_arg1);
///         async move {
///             if let Some(never) = declared_output::<T, E>() { return never; } // types the block
///             <body>
///         }
///     })
///     .await
/// }
/// ```
///
/// The original parameters, patterns included, are bound again for every attempt from fresh
/// clones of the outer parameters, which get plain generated names. The arguments are recorded
/// from the outer parameters, on the first attempt that runs: `__tasks_record_arg` resolves
/// to the JSON of a `Serialize` type and to a marker naming any other type (autoref
/// specialisation), so a step may still take a pool or a client. The body stays inside the
/// function as an `async` block with its own spans, so `Self` and a `&self` receiver (a shared
/// reference, copied into each attempt) work in steps that are associated functions.
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

    // Each assertion is spanned on the user's type, so a missing trait is reported there, with
    // the reason the marker trait gives; the same bounds on `run_step_boxed` then add nothing.
    let arg_assertions = step.args.iter().map(|arg| {
        let ty = &arg.ty;
        quote_spanned!(ty.span()=> #private::assert_step_arg::<#ty>();)
    });
    let ok = &step.result.ok;
    let err = &step.result.err;
    let ok_assertion = quote_spanned!(ok.span()=> #private::assert_step_output::<#ok>(););
    let err_assertion = quote_spanned!(err.span()=> #private::assert_step_error::<#err, _>(););
    let bindings = step.args.iter().zip(&arg_idents).map(|(arg, ident)| {
        let PatType { attrs, pat, ty, .. } = arg;
        let clone = quote_spanned!(ty.span()=> <#ty as ::core::clone::Clone>::clone(&#ident));
        quote!(#(#attrs)* let #pat: #ty = #clone;)
    });

    let record_args = record_args(step, &arg_idents);

    let name = &step.name;
    let retry_policy = retry_policy(private, step.retry.as_ref(), RetryDefault::Step);
    let retry_assertion = retry_assertion(private, step.retry.as_ref(), &retry_policy);
    let location = source_location(private, sig.ident.span());
    let function = sig.ident.to_string();
    let signature = signature_text(sig, step);
    let (timeout, timeout_assertion) = match &step.timeout {
        None => (quote!(::core::option::Option::None), TokenStream::new()),
        Some(timeout @ DurationValue::Parsed { .. }) => (
            quote!(::core::option::Option::Some(#timeout)),
            TokenStream::new(),
        ),
        Some(DurationValue::Expr(expr)) => (
            quote!(::core::option::Option::Some(#expr)),
            quote_spanned!(expr.span()=> const _: () = #private::assert_step_timeout(#expr);),
        ),
    };

    quote! {
        #(#attrs)*
        #vis #outer_sig {
            #(#arg_assertions)*
            #ok_assertion
            #err_assertion

            #retry_assertion
            #timeout_assertion
            static __TASKS_STEP_DEFINITION: #private::StepDefinition =
                #private::StepDefinition {
                    name: #name,
                    retry_policy: #retry_policy,
                    timeout: #timeout,
                    location: #location,
                    path: ::core::concat!(::core::module_path!(), "::", #function),
                    signature: #signature,
                };
            #private::inventory::submit! {
                #private::StepRegistration(&__TASKS_STEP_DEFINITION)
            }

            #private::run_step_boxed::<#ok, #err, _, _, _>(
                &__TASKS_STEP_DEFINITION,
                move |__tasks_recorder: &mut #private::ArgsRecorder| {
                    #record_args
                    #(#bindings)*
                    async move {
                        // Fixes the block's output type before the body is checked, so a type
                        // error in the body is reported on the user's expression, as in a
                        // function with this return type, not on the attribute.
                        if let ::core::option::Option::Some(__tasks_never) =
                            #private::declared_output::<#ok, #err>()
                        {
                            return __tasks_never;
                        }
                        #body
                    }
                },
            )
            .await
        }
    }
}

/// The step's identity on replay: its receiver and argument types and its `Result` types,
/// as written (`(&Order, u32) -> Result<Receipt, PaymentError>`), with the token spacing
/// of `quote` squeezed out. Only an edit of the signature changes it.
fn signature_text(sig: &Signature, step: &Step) -> String {
    let receiver = sig.inputs.iter().find_map(|arg| match arg {
        FnArg::Receiver(receiver) => Some(squeezed(&quote!(#receiver))),
        FnArg::Typed(_) => None,
    });
    let args = receiver
        .into_iter()
        .chain(step.args.iter().map(|arg| {
            let ty = &arg.ty;
            squeezed(&quote!(#ty))
        }))
        .collect::<Vec<_>>()
        .join(", ");
    let (ok, err) = (&step.result.ok, &step.result.err);
    format!(
        "({args}) -> Result<{}, {}>",
        squeezed(&quote!(#ok)),
        squeezed(&quote!(#err))
    )
}

/// `tokens` as text, with a space kept only between two words (`dyn Error`, `mut T`).
fn squeezed(tokens: &TokenStream) -> String {
    let text = tokens.to_string();
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (index, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let before = out.chars().last().is_some_and(word);
            let after = chars.get(index + 1).copied().is_some_and(word);
            if !(before && after) {
                continue;
            }
        }
        out.push(c);
    }
    out.replace(',', ", ")
}

/// The call that records the arguments on the attempt's recorder; nothing with
/// `record_args = false`.
fn record_args(step: &Step, arg_idents: &[syn::Ident]) -> TokenStream {
    if !step.record_args {
        return TokenStream::new();
    }
    let private = &step.private;
    let pushes = step.args.iter().zip(arg_idents).map(|(arg, ident)| {
        let name = parameter_name(&arg.pat);
        quote! {
            __tasks_list.push(#name, (&#private::ArgProbe(&#ident)).__tasks_record_arg());
        }
    });
    quote! {
        __tasks_recorder.record(|__tasks_list: &mut #private::ArgList| {
            #[allow(unused_imports)]
            use #private::{RecordSerializable as _, RecordUnserializable as _};
            #(#pushes)*
        });
    }
}

/// The name an argument is recorded under: the parameter's identifier (without `mut` or
/// `r#`), or the pattern as written (`(a, b)`).
fn parameter_name(pat: &Pat) -> String {
    match pat {
        Pat::Ident(PatIdent { ident, .. }) => ident.unraw().to_string(),
        other => quote!(#other).to_string(),
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
