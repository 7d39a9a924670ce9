//! What the workflow and step expansions share: the retry policy, the source location and
//! optional strings, as expressions.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};

use crate::model::{DurationValue, PrivatePath, RetryOptions};

/// Which runtime default fills the `retry(...)` keys that were not given.
#[derive(Clone, Copy)]
pub(super) enum RetryDefault {
    /// `RetryPolicy::DEFAULT_RUN`, for workflows.
    Run,
    /// `RetryPolicy::DEFAULT_STEP`, for steps.
    Step,
}

/// `Option<RetryPolicy>`: `None` without `retry(...)`, otherwise the given keys over the default.
pub(super) fn retry_policy(
    private: &PrivatePath,
    retry: Option<&RetryOptions>,
    default: RetryDefault,
) -> TokenStream {
    let Some(retry) = retry else {
        return quote!(::core::option::Option::None);
    };
    let mut fields = Vec::new();
    if let Some(max_attempts) = &retry.max_attempts {
        fields.push(quote!(max_attempts: #max_attempts));
    }
    if let Some(initial_interval) = &retry.initial_interval {
        fields.push(quote!(initial_interval: #initial_interval));
    }
    if let Some(backoff) = &retry.backoff {
        fields.push(quote!(backoff_coefficient: #backoff));
    }
    if let Some(max_interval) = &retry.max_interval {
        fields.push(quote!(max_interval: #max_interval));
    }
    // A struct update with nothing left to fill would trip clippy's `needless_update`.
    let rest = (fields.len() < 4).then(|| match default {
        RetryDefault::Run => quote!(..#private::RetryPolicy::DEFAULT_RUN),
        RetryDefault::Step => quote!(..#private::RetryPolicy::DEFAULT_STEP),
    });
    quote! {
        ::core::option::Option::Some(#private::RetryPolicy {
            #(#fields,)*
            #rest
        })
    }
}

/// A `const` item that fails the build when `retry(...)` breaks a rule the macro could not
/// check itself, because a value was a constant or an expression (`max_attempts = ATTEMPTS`).
/// Nothing when every value was a literal, already checked, or without `retry(...)`.
pub(super) fn retry_assertion(
    private: &PrivatePath,
    retry: Option<&RetryOptions>,
    policy: &TokenStream,
) -> TokenStream {
    let Some(retry) = retry else {
        return TokenStream::new();
    };
    let expressions: Vec<&TokenStream> = [&retry.max_attempts, &retry.backoff]
        .into_iter()
        .flatten()
        .filter(|tokens| !is_literal(tokens))
        .collect();
    let durations = [&retry.initial_interval, &retry.max_interval]
        .into_iter()
        .flatten()
        .any(|duration| matches!(duration, DurationValue::Expr(_)));
    if expressions.is_empty() && !durations {
        return TokenStream::new();
    }
    // Spanned on the first expression, so the build error points into the attribute.
    let span = expressions
        .first()
        .and_then(|tokens| (*tokens).clone().into_iter().next())
        .map_or_else(Span::call_site, |token| token.span());
    quote_spanned! {span=>
        const _: () = #private::assert_retry_policy(#policy);
    }
}

/// Whether `tokens` is one literal (what the macro re-emits for a checked literal value).
fn is_literal(tokens: &TokenStream) -> bool {
    let mut tokens = tokens.clone().into_iter();
    matches!(
        (tokens.next(), tokens.next()),
        (Some(proc_macro2::TokenTree::Literal(_)), None)
    )
}

impl ToTokens for DurationValue {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        match self {
            DurationValue::Parsed { value, span, .. } => {
                let millis = value.as_millis() as u64;
                tokens.extend(quote_spanned!(*span=> ::core::time::Duration::from_millis(#millis)));
            }
            DurationValue::Expr(expr) => expr.to_tokens(tokens),
        }
    }
}

/// `SourceLocation` of the item at `span` (the function name).
pub(super) fn source_location(private: &PrivatePath, span: Span) -> TokenStream {
    quote_spanned! {span=>
        #private::SourceLocation {
            file: ::core::file!(),
            line: ::core::line!(),
            column: ::core::column!(),
            module_path: ::core::module_path!(),
        }
    }
}

/// `Some("text")` or `None`.
pub(super) fn optional_str(text: Option<impl ToTokens>) -> TokenStream {
    match text {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    }
}
