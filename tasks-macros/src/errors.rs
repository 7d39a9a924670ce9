//! Collected errors: every problem is reported at once, each on its own token, instead of
//! stopping at the first one (the `Ctxt` of serde_derive).

use proc_macro2::TokenStream;
use quote::ToTokens;
use std::fmt::Display;

/// The errors found so far while parsing and validating one macro invocation.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    /// Records an error that syn or a sub-parser produced.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// Records an error spanned on `tokens` (all of them, first to last).
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at one span.
    pub(crate) fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// `Ok` when nothing was recorded, otherwise all errors as one `compile_error!` stream.
    pub(crate) fn finish(self) -> Result<(), TokenStream> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self
                .errors
                .into_iter()
                .map(syn::Error::into_compile_error)
                .collect())
        }
    }
}
