//! Signature checks shared by `#[workflow]` and `#[step]`.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{FnArg, GenericArgument, GenericParam, PathArguments, ReturnType, Type, WherePredicate};

use crate::errors::Errors;
use crate::kind::MacroKind;
use crate::model::ResultTypes;
use crate::parse::ItemFn;

/// Whether `item` carries another `kind` attribute besides the one being expanded.
pub(crate) fn repeats_attribute(kind: MacroKind, item: &ItemFn) -> bool {
    item.attrs.iter().any(|attr| {
        attr.path()
            .segments
            .last()
            .is_some_and(|last| last.ident == kind.segment())
    })
}

/// Checks what both attributes require of a function: `async`, not `unsafe`/`const`/`extern`,
/// no `self` (but `&self` for steps), no `impl Trait` parameters, no second `#[workflow]`/`#[step]`, and generics only
/// where `kind` supports them (steps accept lifetime parameters, workflows nothing).
pub(crate) fn check_common(kind: MacroKind, item: &ItemFn, errors: &mut Errors) {
    let attribute = kind.attribute();
    for attr in &item.attrs {
        let Some(last) = attr.path().segments.last() else {
            continue;
        };
        if last.ident == kind.segment() {
            errors.spanned(attr, format_args!("{attribute} is applied twice"));
        } else if last.ident == "step" || last.ident == "workflow" {
            errors.spanned(
                attr,
                "a function cannot be both a #[workflow] and a #[step]: a workflow calls steps; keep one attribute",
            );
        }
    }

    let sig = &item.sig;
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            format_args!("{attribute} functions must be `async fn`"),
        );
    }
    if let Some(constness) = &sig.constness {
        errors.spanned(
            constness,
            format_args!("{attribute} functions cannot be `const`"),
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.spanned(
            unsafety,
            format_args!("{attribute} functions cannot be `unsafe`"),
        );
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(
            abi,
            format_args!("{attribute} functions cannot be `extern`"),
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(
            variadic,
            format_args!("{attribute} functions cannot be variadic"),
        );
    }
    check_generics(kind, item, errors);

    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => match kind {
                MacroKind::Workflow => errors.spanned(
                    receiver,
                    "#[workflow] functions cannot take `self`: the runtime calls them with only a context and an input; make it a free function, or an associated function without `self` that a module-level #[workflow] calls",
                ),
                // `&self` is a shared reference: each attempt gets a copy of it.
                MacroKind::Step if is_shared_self(receiver) => {}
                MacroKind::Step => errors.spanned(
                    receiver,
                    "#[step] methods take `&self`: a retry calls the step again, so it cannot consume `self` or hold a `&mut self` borrow across attempts; use `&self` (with interior mutability if it must change), or pass what the step needs as arguments",
                ),
            },
            FnArg::Typed(arg) => {
                if let Type::ImplTrait(_) = strip_parens(&arg.ty) {
                    errors.spanned(
                        &arg.ty,
                        format_args!("{attribute} parameters cannot be `impl Trait`; name a concrete type"),
                    );
                }
            }
        }
    }
}

/// `&self`, or `self: &Self`.
fn is_shared_self(receiver: &syn::Receiver) -> bool {
    match &receiver.reference {
        Some(_) => receiver.mutability.is_none() && receiver.colon_token.is_none(),
        None => match strip_parens(&receiver.ty) {
            Type::Reference(reference) => {
                reference.mutability.is_none()
                    && matches!(strip_parens(&reference.elem), Type::Path(path) if path.path.is_ident("Self"))
            }
            _ => false,
        },
    }
}

fn check_generics(kind: MacroKind, item: &ItemFn, errors: &mut Errors) {
    let generics = &item.sig.generics;
    match kind {
        MacroKind::Workflow => {
            if !generics.params.is_empty() {
                errors.spanned(
                    generics,
                    "#[workflow] functions cannot be generic: the runtime must know the input and output types",
                );
            }
            if let Some(where_clause) = &generics.where_clause {
                errors.spanned(
                    where_clause,
                    "#[workflow] functions cannot have a `where` clause",
                );
            }
        }
        MacroKind::Step => {
            for param in &generics.params {
                if !matches!(param, GenericParam::Lifetime(_)) {
                    errors.spanned(
                        param,
                        "#[step] functions cannot have type or const parameters (lifetimes are fine)",
                    );
                }
            }
            let predicates = generics.where_clause.iter().flat_map(|w| &w.predicates);
            for predicate in predicates {
                if !matches!(predicate, WherePredicate::Lifetime(_)) {
                    errors.spanned(
                        predicate,
                        "#[step] `where` clauses may only bound lifetimes",
                    );
                }
            }
        }
    }
}

/// The `Ok` and `Err` types of the return type, which must be `Result<Ok, Err>` with both
/// written out (any path ending in `Result`, so `std::result::Result` works too).
pub(crate) fn result_types(
    kind: MacroKind,
    item: &ItemFn,
    errors: &mut Errors,
) -> Option<ResultTypes> {
    let attribute = kind.attribute();
    let ty = match &item.sig.output {
        ReturnType::Type(_, ty) => &**ty,
        ReturnType::Default => {
            errors.spanned(
                &item.sig.ident,
                format_args!(
                    "{attribute} functions must return `Result<Output, Error>`; add a return type"
                ),
            );
            return None;
        }
    };
    let not_result = format_args!(
        "{attribute} functions must return `Result<Output, Error>`, with both types written out"
    );
    let Type::Path(path) = strip_parens(ty) else {
        errors.spanned(ty, not_result);
        return None;
    };
    let last = path.path.segments.last().filter(|_| path.qself.is_none());
    let Some(last) = last.filter(|last| last.ident == "Result") else {
        errors.spanned(ty, not_result);
        return None;
    };
    let args: Vec<&Type> = match &last.arguments {
        PathArguments::AngleBracketed(args) => args
            .args
            .iter()
            .filter_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    match args.as_slice() {
        [ok, err] => {
            let impl_trait: Vec<&&Type> = [ok, err]
                .into_iter()
                .filter(|ty| matches!(strip_parens(ty), Type::ImplTrait(_)))
                .collect();
            for ty in &impl_trait {
                errors.spanned(
                    ty,
                    format_args!(
                        "{attribute} functions cannot return `impl Trait`; name a concrete type"
                    ),
                );
            }
            let borrowed = borrows(ok);
            if borrowed {
                errors.spanned(
                    ok,
                    format_args!(
                        "the output of {attribute} functions is stored as JSON and read back later, so it must be owned: use an owned type (`String` for `&str`, `Vec<T>` for `&[T]`) without borrowed lifetimes"
                    ),
                );
            }
            (impl_trait.is_empty() && !borrowed).then(|| ResultTypes {
                ok: (*ok).clone(),
                err: (*err).clone(),
            })
        }
        _ => {
            errors.spanned(
                ty,
                format_args!(
                    "{attribute} functions must return `Result<Output, Error>` with both types written out; an alias such as `io::Result<T>` hides the error type from the macro"
                ),
            );
            None
        }
    }
}

/// Whether `ty` borrows: it has a `&` or a lifetime other than `'static`. Such a type cannot
/// be `DeserializeOwned`, and rustc would say so with a higher-ranked lifetime error (or E0637
/// for `'_`) instead of the reason.
pub(crate) fn borrows(ty: &Type) -> bool {
    fn scan(tokens: TokenStream) -> bool {
        let mut tokens = tokens.into_iter();
        while let Some(token) = tokens.next() {
            let borrows = match token {
                TokenTree::Group(group) => scan(group.stream()),
                TokenTree::Punct(punct) if punct.as_char() == '&' => true,
                TokenTree::Punct(punct) if punct.as_char() == '\'' => {
                    !matches!(tokens.next(), Some(TokenTree::Ident(name)) if name == "static")
                }
                _ => false,
            };
            if borrows {
                return true;
            }
        }
        false
    }
    scan(ty.to_token_stream())
}

/// Looks through parentheses and invisible groups around a type.
pub(crate) fn strip_parens(mut ty: &Type) -> &Type {
    loop {
        match ty {
            Type::Paren(inner) => ty = &inner.elem,
            Type::Group(inner) => ty = &inner.elem,
            _ => return ty,
        }
    }
}
