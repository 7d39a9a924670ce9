//! The shape every attribute shares: a list of `key = value` and `key(...)` options, each
//! key given once.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, Meta, Path, Token};

use crate::errors::Errors;

/// Parses `key = value, key(...), ...`; a syntax error is recorded and yields `None`.
pub(super) fn parse_metas(
    args: TokenStream,
    errors: &mut Errors,
) -> Option<Punctuated<Meta, Token![,]>> {
    match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args) {
        Ok(metas) => Some(metas),
        Err(error) => {
            errors.push(error);
            None
        }
    }
}

/// The keys already given, so that a repeated key is reported on its second use.
#[derive(Default)]
pub(super) struct Seen(Vec<String>);

impl Seen {
    /// `true` the first time `key` is seen; later times record a "duplicate" error.
    pub(super) fn first(&mut self, key: &Path, errors: &mut Errors) -> bool {
        let name = key.to_token_stream().to_string();
        if self.0.contains(&name) {
            errors.spanned(key, format_args!("duplicate option `{name}`"));
            false
        } else {
            self.0.push(name);
            true
        }
    }
}

pub(super) fn key_of(path: &Path) -> Option<String> {
    path.get_ident().map(|ident| ident.to_string())
}

/// The expression of `key = expr`, or an error showing the expected form.
pub(super) fn name_value<'a>(
    meta: &'a Meta,
    example: &str,
    errors: &mut Errors,
) -> Option<&'a Expr> {
    match meta {
        Meta::NameValue(name_value) => Some(strip_groups(&name_value.value)),
        _ => {
            let key = meta.path().to_token_stream();
            errors.spanned(meta, format_args!("expected `{key} = {example}`"));
            None
        }
    }
}

/// Looks through the invisible groups that `macro_rules!` puts around `$x:expr`.
fn strip_groups(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}
