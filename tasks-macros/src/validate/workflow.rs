//! The checks only `#[workflow]` makes: the context parameter, the single input, and the
//! doc comment that becomes the description.

use syn::punctuated::Punctuated;
use syn::{Expr, FnArg, Lit, Meta, PatType, Token, Type};

use super::common::{borrows, repeats_attribute, strip_parens};
use crate::errors::Errors;
use crate::kind::MacroKind;
use crate::model::WorkflowInput;
use crate::parse::ItemFn;

/// Whether the failed function still needs a stand-in type. Not inside an `impl` (a
/// receiver says we are in one, and a struct would not be allowed there), and not when a
/// second `#[workflow]` on the same function will define the type itself.
pub(super) fn needs_stand_in(item: &ItemFn) -> bool {
    let in_impl = item
        .sig
        .inputs
        .iter()
        .any(|arg| matches!(arg, FnArg::Receiver(_)));
    !in_impl && !repeats_attribute(MacroKind::Workflow, item)
}

/// Checks `(ctx: WorkflowContext)` or `(ctx: WorkflowContext, input: In)` and returns the
/// context's type as written and the input, or `None` after recording why the parameters
/// are wrong.
pub(super) fn workflow_input(
    item: &ItemFn,
    errors: &mut Errors,
) -> Option<(Box<Type>, WorkflowInput)> {
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
            // Not spelled `WorkflowContext`: an alias or a renamed import still is the context,
            // and `expand` checks the type itself with a spanned assertion. Only a context
            // named in a later position is surely misplaced.
            let later = inputs
                .iter()
                .find(|arg| context_type(&arg.ty) != ContextType::Other);
            if let Some(context) = later {
                errors.spanned(
                    context,
                    format_args!("the `WorkflowContext` parameter must come first: {SHAPE}"),
                );
                return None;
            }
        }
    }
    match inputs {
        [] => Some((first.ty.clone(), WorkflowInput::Unit)),
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
            if borrows(&input.ty) {
                errors.spanned(
                    &input.ty,
                    "a workflow input is decoded from JSON for every attempt, so it must be owned: use an owned type (`String` for `&str`, `Vec<T>` for `&[T]`) without borrowed lifetimes",
                );
                return None;
            }
            if context_type(&input.ty) != ContextType::Other {
                errors.spanned(input, "a workflow takes the `WorkflowContext` only once");
                return None;
            }
            Some((first.ty.clone(), WorkflowInput::Typed(input.ty.clone())))
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
pub(super) fn description(item: &ItemFn) -> Option<String> {
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
