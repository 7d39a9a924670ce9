//! `concurrency(key = customer_of, limit = 2)` (workflows only): the concurrency key each run
//! derives from its input, and the most runs of one key running at once.
//!
//! One list rather than two top-level keys (`concurrency_key = .., concurrency_limit = ..`):
//! the key and the limit only mean something together, as in `retry(...)` and in
//! `StartOptions::concurrency_key(key, limit)`, so a missing half is reported on the list
//! that lacks it, and the attribute reads as one rule.

use proc_macro2::{Literal, Span, TokenStream};
use quote::ToTokens;
use syn::{Expr, Lit, Meta, UnOp};

use super::meta::{Seen, key_of, name_value, parse_metas};
use crate::errors::Errors;

/// A checked `concurrency(...)`.
pub(crate) struct ConcurrencyOptions {
    /// The key function, as written: a path, a closure, or any expression of a function
    /// type (the generated code checks its type on these tokens).
    pub key: Expr,
    /// `limit = 2`: a checked literal (re-emitted as an unsuffixed `u32`), or an expression
    /// checked by a `const` assertion.
    pub limit: LimitValue,
}

/// The limit of a key.
pub(crate) enum LimitValue {
    /// An integer literal in `1..=i32::MAX`, re-emitted unsuffixed on its span.
    Literal(TokenStream),
    /// Any other expression; the compiler checks that it is a `const` `u32` of at least 1.
    Expr(Expr),
}

impl ToTokens for LimitValue {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            LimitValue::Literal(literal) => literal.to_tokens(tokens),
            LimitValue::Expr(expr) => expr.to_tokens(tokens),
        }
    }
}

/// The attribute's form, for messages.
const EXAMPLE: &str = "concurrency(key = customer_of, limit = 2)";

/// The most a limit may be: the runtime's `limits::MAX_CONCURRENCY_LIMIT`.
const MAX_LIMIT: u32 = i32::MAX as u32;

/// Parses `concurrency(key = .., limit = ..)`, recording every problem.
pub(crate) fn parse_concurrency(meta: &Meta, errors: &mut Errors) -> Option<ConcurrencyOptions> {
    let Meta::List(list) = meta else {
        errors.spanned(
            meta,
            format_args!(
                "expected `{EXAMPLE}`: a function that derives each run's key from its input, \
                 and the most runs of one key running at once"
            ),
        );
        return None;
    };
    let metas = parse_metas(list.tokens.clone(), errors)?;
    let mut seen = Seen::default();
    let mut key = None;
    let mut limit = None;
    // Whether `key` or `limit` was given, even if its value was wrong: a wrong value is
    // reported on itself, not as missing.
    let (mut key_given, mut limit_given) = (false, false);
    for meta in metas {
        match key_of(meta.path()).as_deref() {
            Some("key") => {
                key_given = true;
                let fresh = seen.first(meta.path(), errors);
                if let Some(expr) = name_value(&meta, "customer_of", errors)
                    .and_then(|expr| key_function(expr, errors))
                    && fresh
                {
                    key = Some(expr);
                }
            }
            Some("limit") => {
                limit_given = true;
                let fresh = seen.first(meta.path(), errors);
                if let Some(value) =
                    name_value(&meta, "2", errors).and_then(|expr| limit_value(expr, errors))
                    && fresh
                {
                    limit = Some(value);
                }
            }
            _ => {
                let key = meta.path().to_token_stream().to_string();
                errors.spanned(
                    meta.path(),
                    format_args!(
                        "unknown `concurrency` key `{key}`; expected `key` and `limit`, as in `{EXAMPLE}`"
                    ),
                );
            }
        }
    }
    if !key_given {
        errors.spanned(
            meta,
            format_args!(
                "`concurrency(...)` needs `key = ...`: the function that derives each run's key \
                 from its input, as in `{EXAMPLE}`"
            ),
        );
    }
    if !limit_given {
        errors.spanned(
            meta,
            format_args!(
                "`concurrency(...)` needs `limit = N`: the most runs of one key running at \
                 once, as in `{EXAMPLE}`"
            ),
        );
    }
    Some(ConcurrencyOptions {
        key: key?,
        limit: limit?,
    })
}

/// `key = ...`: anything but a literal, which would be one key for every run.
fn key_function(expr: &Expr, errors: &mut Errors) -> Option<Expr> {
    if let Expr::Lit(_) = expr {
        errors.spanned(
            expr,
            "`key` is a function that derives each run's key from its input, as in \
             `key = customer_of` or `key = |order: &Order| order.customer.clone()`; a fixed \
             key for a single start is `StartOptions::concurrency_key`",
        );
        return None;
    }
    Some(expr.clone())
}

/// `limit = 2`: an integer literal in `1..=i32::MAX`, or an expression.
fn limit_value(expr: &Expr, errors: &mut Errors) -> Option<LimitValue> {
    const AT_LEAST_ONE: &str =
        "`limit` is the most runs of one key running at once: it must be at least 1";
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) => match lit.base10_parse::<u32>() {
            Ok(0) => {
                errors.spanned(lit, AT_LEAST_ONE);
                None
            }
            Ok(value) if value <= MAX_LIMIT => {
                let mut literal = Literal::u32_unsuffixed(value);
                literal.set_span(lit.span());
                Some(LimitValue::Literal(literal.into_token_stream()))
            }
            _ => {
                errors.spanned(
                    lit,
                    format_args!("`limit` must be at most {MAX_LIMIT} (it is stored as an `i32`)"),
                );
                None
            }
        },
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            errors.spanned(expr, AT_LEAST_ONE);
            None
        }
        Expr::Lit(_) => {
            errors.spanned(expr, "`limit` must be a whole number, as in `limit = 2`");
            None
        }
        _ => Some(LimitValue::Expr(expr.clone())),
    }
}

/// The key function as written, for the runtime's messages: the tokens without the spaces
/// that printing a token stream puts around every punctuation.
pub(crate) fn key_text(key: &Expr) -> String {
    let text = key.to_token_stream().to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut previous = ' ';
    while let Some(c) = chars.next() {
        if c == ' ' {
            let next = chars.peek().copied().unwrap_or(' ');
            // `&` of a reference (not of `&&`), and the closure's opening `|`.
            // `&` of a reference (not of `&&`), a unary `!`, the closure's opening `|`, and
            // the `!` of a macro call.
            let reference = previous == '&' && !out.ends_with("&&");
            let not = previous == '!' && (out == "!" || out.ends_with(" !") || out.ends_with("(!"));
            let tight_after = matches!(previous, ':' | '.' | '(' | '[')
                || reference
                || not
                || (previous == '|' && out.matches('|').count() == 1);
            let macro_call = next == '!' && (previous.is_alphanumeric() || previous == '_');
            let tight_before = matches!(next, ':' | '.' | '(' | ')' | '[' | ']' | ',' | ';' | '?')
                || macro_call
                || (next == '|' && out.matches('|').count() == 1);
            // `a: T` keeps its space after a single colon.
            let colon_space = previous == ':' && !out.ends_with("::") && next != ':';
            if (tight_after || tight_before) && !colon_space {
                continue;
            }
        }
        out.push(c);
        previous = c;
    }
    out
}

/// The span of the first token of `expr`, where a `const` assertion of the limit points.
pub(crate) fn first_span(expr: &Expr) -> Span {
    expr.to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |token| token.span())
}

#[cfg(test)]
mod tests {
    use super::key_text;

    fn text(source: &str) -> String {
        key_text(&syn::parse_str(source).unwrap())
    }

    #[test]
    fn key_text_reads_as_written() {
        assert_eq!(text("customer_of"), "customer_of");
        assert_eq!(text("Order::customer_key"), "Order::customer_key");
        assert_eq!(
            text("|order: &Order| order.customer.clone()"),
            "|order: &Order| order.customer.clone()"
        );
        assert_eq!(
            text("|o: &Order| format!(\"{}-{}\", o.region, o.customer)"),
            "|o: &Order| format!(\"{}-{}\", o.region, o.customer)"
        );
        assert_eq!(text("|o: &Order| o.a && !o.b"), "|o: &Order| o.a && !o.b");
    }
}
