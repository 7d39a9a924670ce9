//! Parsing the annotated item: a function whose body is kept as opaque tokens.
//!
//! Like `tracing-attributes`, only the signature is parsed. The body is never parsed, so the
//! macros keep working (and rust-analyzer keeps completing) while the body is half-typed; the
//! body's tokens are emitted again with their own spans, so errors in it land on user code.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Signature, Token, Visibility};

use crate::kind::MacroKind;

/// A function item: attributes, visibility, signature and a braced body.
pub(crate) struct ItemFn {
    /// The outer attributes that remain after the macro's own attribute was removed.
    pub attrs: Vec<Attribute>,
    /// The function's visibility.
    pub vis: Visibility,
    /// The function's signature, parsed.
    pub sig: Signature,
    /// The function's body, `{ ... }`, unparsed.
    pub body: Group,
}

impl ItemFn {
    /// The function's `#[cfg(...)]` attributes, repeated on every item generated next to it
    /// so that they come and go together.
    pub(crate) fn cfg_attrs(&self) -> impl Iterator<Item = &Attribute> {
        self.attrs.iter().filter(|attr| attr.path().is_ident("cfg"))
    }
}

/// Parses `item` as a function, or explains that `kind` applies only to functions.
pub(crate) fn parse_item_fn(kind: MacroKind, item: TokenStream) -> syn::Result<ItemFn> {
    let parser = |input: ParseStream| {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        if !starts_signature(input) {
            return Err(input.error(format_args!(
                "{} can only be applied to an `async fn`",
                kind.attribute()
            )));
        }
        let sig: Signature = input.parse()?;
        let body = input.step(|cursor| match cursor.token_tree() {
            Some((TokenTree::Group(group), rest)) if group.delimiter() == Delimiter::Brace => {
                Ok((group, rest))
            }
            _ => Err(cursor.error(format_args!(
                "{} needs a function body: `{{ ... }}`",
                kind.attribute()
            ))),
        })?;
        Ok(ItemFn {
            attrs,
            vis,
            sig,
            body,
        })
    };
    parser.parse2(item)
}

/// Whether the next tokens can begin a function signature (`async fn`, `fn`, `unsafe fn`, ...).
fn starts_signature(input: ParseStream) -> bool {
    let fork = input.fork();
    fork.parse::<Option<Token![const]>>().is_ok()
        && fork.parse::<Option<Token![async]>>().is_ok()
        && fork.parse::<Option<Token![unsafe]>>().is_ok()
        && fork.parse::<Option<syn::Abi>>().is_ok()
        && fork.peek(Token![fn])
}
