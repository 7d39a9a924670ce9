//! `retry(...)`: the keys of a step's or a workflow's retry policy, each checked where it
//! can be at compile time.

use super::duration::{DurationValue, duration};
use super::meta::{Seen, key_of, name_value, parse_metas};
use crate::errors::Errors;
use proc_macro2::{Literal, Span, TokenStream};
use quote::ToTokens;
use syn::{Expr, Lit, Meta, UnOp};

/// The keys given in `retry(...)`; missing keys fall back to the runtime's default policy.
#[derive(Default)]
pub(crate) struct RetryOptions {
    /// `max_attempts = 5`: a `u32` of at least 1, or any `u32` expression.
    pub max_attempts: Option<TokenStream>,
    /// `initial_interval = "1s"`.
    pub initial_interval: Option<DurationValue>,
    /// `backoff = 2.0`: a number of at least 1, or any `f64` expression.
    pub backoff: Option<TokenStream>,
    /// `max_interval = "5m"`.
    pub max_interval: Option<DurationValue>,
}

/// The keys `retry(...)` accepts, for messages.
const RETRY_KEYS: &str = "`max_attempts`, `initial_interval`, `backoff` or `max_interval`";

/// `retry(max_attempts = .., initial_interval = .., backoff = .., max_interval = ..)`.
pub(super) fn parse_retry(meta: &Meta, errors: &mut Errors) -> Option<RetryOptions> {
    let Meta::List(list) = meta else {
        errors.spanned(
            meta,
            "expected `retry(...)`, as in `retry(max_attempts = 5, initial_interval = \"1s\")`",
        );
        return None;
    };
    let metas = parse_metas(list.tokens.clone(), errors)?;
    let mut retry = RetryOptions::default();
    let mut seen = Seen::default();
    for meta in metas {
        let key = key_of(meta.path()).unwrap_or_default();
        let fresh = match key.as_str() {
            "max_attempts" | "initial_interval" | "backoff" | "max_interval" => {
                seen.first(meta.path(), errors)
            }
            "backoff_coefficient" => {
                errors.spanned(
                    meta.path(),
                    "unknown `retry` key `backoff_coefficient`; it is spelled `backoff`",
                );
                continue;
            }
            _ => {
                let key = meta.path().to_token_stream().to_string();
                errors.spanned(
                    meta.path(),
                    format_args!("unknown `retry` key `{key}`; expected {RETRY_KEYS}"),
                );
                continue;
            }
        };
        let Some(expr) = name_value(&meta, "...", errors) else {
            continue;
        };
        match key.as_str() {
            "max_attempts" => {
                keep_first(fresh, &mut retry.max_attempts, max_attempts(expr, errors))
            }
            "backoff" => keep_first(fresh, &mut retry.backoff, backoff(expr, errors)),
            "initial_interval" => keep_first(
                fresh,
                &mut retry.initial_interval,
                duration(&key, expr, errors),
            ),
            _ => keep_first(fresh, &mut retry.max_interval, duration(&key, expr, errors)),
        }
    }
    if let (
        Some(DurationValue::Parsed {
            value: initial,
            text: initial_text,
            ..
        }),
        Some(DurationValue::Parsed {
            value: max,
            text: max_text,
            span,
        }),
    ) = (&retry.initial_interval, &retry.max_interval)
        && initial > max
    {
        errors.at(
            *span,
            format_args!(
                "`max_interval` ({max_text}) is shorter than `initial_interval` ({initial_text})"
            ),
        );
    }
    Some(retry)
}

/// Stores `value` unless the key was a duplicate (the first value given wins).
fn keep_first<T>(fresh: bool, slot: &mut Option<T>, value: Option<T>) {
    if fresh {
        *slot = value;
    }
}

/// `max_attempts`: an integer literal of at least 1 (re-emitted unsuffixed), or an expression.
fn max_attempts(expr: &Expr, errors: &mut Errors) -> Option<TokenStream> {
    const AT_LEAST_ONE: &str = "`max_attempts` counts the first attempt too: it must be at least 1";
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) => match lit.base10_parse::<u32>() {
            Ok(0) => {
                errors.spanned(lit, AT_LEAST_ONE);
                None
            }
            Ok(value) => {
                let mut literal = Literal::u32_unsuffixed(value);
                literal.set_span(lit.span());
                Some(literal.into_token_stream())
            }
            Err(_) => {
                errors.spanned(lit, "`max_attempts` must fit in a `u32`");
                None
            }
        },
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            errors.spanned(expr, AT_LEAST_ONE);
            None
        }
        Expr::Lit(_) => {
            errors.spanned(
                expr,
                "`max_attempts` must be a whole number, as in `max_attempts = 5`",
            );
            None
        }
        _ => Some(expr.to_token_stream()),
    }
}

/// `backoff`: a number of at least 1 (ints are accepted and re-emitted as `f64`), or an
/// expression.
fn backoff(expr: &Expr, errors: &mut Errors) -> Option<TokenStream> {
    const BACKOFF_AT_LEAST_ONE: &str =
        "`backoff` multiplies the delay after each failed attempt: it must be at least 1.0";
    let value = match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Float(lit),
            ..
        }) => lit.base10_parse::<f64>(),
        Expr::Lit(syn::ExprLit {
            lit: Lit::Int(lit), ..
        }) => lit.base10_parse::<f64>(),
        Expr::Lit(_) => {
            errors.spanned(expr, "`backoff` must be a number, as in `backoff = 2.0`");
            return None;
        }
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => {
            errors.spanned(expr, BACKOFF_AT_LEAST_ONE);
            return None;
        }
        _ => return Some(expr.to_token_stream()),
    };
    match value {
        Ok(value) if value.is_finite() && value >= 1.0 => {
            let mut literal = Literal::f64_unsuffixed(value);
            literal.set_span(expr_span(expr));
            Some(literal.into_token_stream())
        }
        _ => {
            errors.spanned(expr, BACKOFF_AT_LEAST_ONE);
            None
        }
    }
}

fn expr_span(expr: &Expr) -> Span {
    expr.to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |token| token.span())
}
