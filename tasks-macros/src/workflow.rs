//! `#[workflow]`: parse, validate, then expand (or fall back to stubs on error).

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::punctuated::Punctuated;
use syn::{Expr, FnArg, Lit, LitStr, Meta, PatType, Token, Type};

use crate::attr::{parse_options, RetryOptions};
use crate::check::{
    check_common, repeats_attribute, result_types, strip_parens, MacroKind, ResultTypes,
};
use crate::errors::Errors;
use crate::expand;
use crate::item::{parse_item_fn, ItemFn};

/// A `#[workflow]` function that passed every check.
pub(crate) struct WorkflowFn<'a> {
    /// The function itself.
    pub item: &'a ItemFn,
    /// The registered name: `name = "..."` or the function name.
    pub name: LitStr,
    /// `version = "..."`.
    pub version: Option<LitStr>,
    /// The function's doc comment.
    pub description: Option<String>,
    /// `retry(...)`.
    pub retry: Option<RetryOptions>,
    /// What the workflow takes after its context.
    pub input: WorkflowInput<'a>,
    /// The return type's halves.
    pub result: ResultTypes<'a>,
}

/// What a workflow takes after its context.
#[derive(Clone, Copy)]
pub(crate) enum WorkflowInput<'a> {
    /// `async fn nightly(ctx: WorkflowContext)`: the input type is `()`.
    Unit,
    /// `async fn checkout(ctx: WorkflowContext, order: Order)`.
    Typed(&'a Type),
}

/// Expands `#[workflow(args)] item`.
pub(crate) fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let kind = MacroKind::Workflow;
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
    let input = workflow_input(&item_fn, &mut errors);
    let result = result_types(kind, &item_fn, &mut errors);
    match (errors.finish(), input, result) {
        (Ok(()), Some(input), Some(result)) => {
            let workflow = WorkflowFn {
                item: &item_fn,
                name: options.name_or(&item_fn.sig.ident),
                version: options.version,
                description: description(&item_fn),
                retry: options.retry,
                input,
                result,
            };
            expand::workflow::expand(item, &workflow)
        }
        (errors, input, result) => {
            // A missing input or result always records an error, so `errors` is never empty.
            let errors = errors.err().unwrap_or_default();
            let fallback = if needs_fallback(&item_fn) {
                expand::fallback::workflow(&item_fn, input, result)
            } else {
                TokenStream::new()
            };
            quote!(#item #fallback #errors)
        }
    }
}

/// Whether the failed function still needs a stand-in type. Not inside an `impl` (a
/// receiver says we are in one, and a struct would not be allowed there), and not when a
/// second `#[workflow]` on the same function will define the type itself.
fn needs_fallback(item: &ItemFn) -> bool {
    let in_impl = item
        .sig
        .inputs
        .iter()
        .any(|arg| matches!(arg, FnArg::Receiver(_)));
    !in_impl && !repeats_attribute(MacroKind::Workflow, item)
}

/// Checks `(ctx: WorkflowContext)` or `(ctx: WorkflowContext, input: In)` and returns the
/// input, or `None` after recording why the parameters are wrong.
fn workflow_input<'a>(item: &'a ItemFn, errors: &mut Errors) -> Option<WorkflowInput<'a>> {
    const SHAPE: &str = "`async fn name(ctx: WorkflowContext, input: Input)`";
    let params: Vec<&PatType> = item
        .sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(arg) => Some(arg),
            FnArg::Receiver(_) => None, // reported by `check_common`
        })
        .collect();
    let Some((first, inputs)) = params.split_first() else {
        errors.at(
            item.sig.paren_token.span.join(),
            format_args!(
                "a workflow takes `ctx: WorkflowContext` first, then its input if it has one: {SHAPE}"
            ),
        );
        return None;
    };
    match context_type(&first.ty) {
        ContextType::Owned => {}
        ContextType::Borrowed => {
            errors.spanned(
                &first.ty,
                "take the context by value: `ctx: WorkflowContext` (it is cheap to clone)",
            );
            return None;
        }
        ContextType::Other => {
            let later = inputs
                .iter()
                .find(|arg| context_type(&arg.ty) != ContextType::Other);
            match later {
                Some(context) => errors.spanned(
                    context,
                    format_args!("the `WorkflowContext` parameter must come first: {SHAPE}"),
                ),
                None => errors.spanned(
                    first,
                    format_args!(
                        "the first parameter of a workflow must be `ctx: WorkflowContext`: {SHAPE}"
                    ),
                ),
            }
            return None;
        }
    }
    match inputs {
        [] => Some(WorkflowInput::Unit),
        [input] => {
            if let Type::ImplTrait(_) = strip_parens(&input.ty) {
                return None; // reported by `check_common`
            }
            if let Type::Reference(reference) = strip_parens(&input.ty) {
                errors.spanned(
                    reference,
                    "a workflow input is decoded from JSON and must be owned; remove the `&`",
                );
                return None;
            }
            if context_type(&input.ty) != ContextType::Other {
                errors.spanned(input, "a workflow takes the `WorkflowContext` only once");
                return None;
            }
            Some(WorkflowInput::Typed(&input.ty))
        }
        [_, extra @ ..] => {
            let extra: Punctuated<&PatType, Token![,]> = extra.iter().copied().collect();
            errors.spanned(
                extra,
                "a workflow takes a single input after the context; put these values into one struct together with the first input",
            );
            None
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContextType {
    /// A path ending in `WorkflowContext`.
    Owned,
    /// `&WorkflowContext` or `&mut WorkflowContext`.
    Borrowed,
    /// Anything else.
    Other,
}

fn context_type(ty: &Type) -> ContextType {
    match strip_parens(ty) {
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last();
            if last.is_some_and(|last| last.ident == "WorkflowContext") {
                ContextType::Owned
            } else {
                ContextType::Other
            }
        }
        Type::Reference(reference) if context_type(&reference.elem) == ContextType::Owned => {
            ContextType::Borrowed
        }
        _ => ContextType::Other,
    }
}

/// The doc comment, one string: lines joined with `\n`, the space after `///` removed, and
/// leading and trailing blank lines dropped. Non-literal docs (`#[doc = include_str!(..)]`)
/// are skipped.
fn description(item: &ItemFn) -> Option<String> {
    let lines: Vec<String> = item
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(doc) => match &doc.value {
                Expr::Lit(syn::ExprLit {
                    lit: Lit::Str(text),
                    ..
                }) => Some(text.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|text| text.split('\n').map(str::to_owned).collect::<Vec<_>>())
        .map(|line| {
            line.strip_prefix(' ')
                .unwrap_or(&line)
                .trim_end()
                .to_owned()
        })
        .collect();
    let text = lines.join("\n");
    let text = text.trim_matches('\n');
    (!text.trim().is_empty()).then(|| text.to_owned())
}

impl ToTokens for WorkflowInput<'_> {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            WorkflowInput::Unit => tokens.extend(quote!(())),
            WorkflowInput::Typed(ty) => ty.to_tokens(tokens),
        }
    }
}
