//! Compile-time parsing of duration strings such as `"250ms"`, `"1s"` or `"1m30s"`, and
//! the duration options they give (a string parsed here, or a `Duration` expression).

use std::fmt;
use std::time::Duration;

use proc_macro2::Span;
use syn::{Expr, Lit};

use crate::errors::Errors;

/// A duration option: a string parsed at compile time, or a `Duration` expression kept as is.
pub(crate) enum DurationValue {
    /// A string literal such as `"1m30s"`, already parsed.
    Parsed {
        /// The parsed value.
        value: Duration,
        /// The string as written, for messages.
        text: String,
        /// The literal's span.
        span: Span,
    },
    /// Any other expression; the compiler checks that it is a `const` `Duration`.
    Expr(Expr),
}

/// A duration: a string literal parsed now, or any other expression kept as is.
pub(super) fn duration(key: &str, expr: &Expr, errors: &mut Errors) -> Option<DurationValue> {
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => match parse_duration(&lit.value()) {
            Ok(value) => Some(DurationValue::Parsed {
                value,
                text: lit.value(),
                span: lit.span(),
            }),
            Err(reason) => {
                errors.spanned(
                    lit,
                    format_args!("invalid duration {:?}: {reason}", lit.value()),
                );
                None
            }
        },
        Expr::Lit(_) => {
            errors.spanned(
                expr,
                format_args!(
                    "`{key}` must be a duration string such as \"250ms\", \"1s\" or \"1m30s\", or a `std::time::Duration` expression"
                ),
            );
            None
        }
        _ => Some(DurationValue::Expr(expr.clone())),
    }
}

/// The units a duration string may use, largest first, with their length in milliseconds.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// The longest duration accepted, in milliseconds: 100 years of 365.25 days, the
/// `tasks_runtime::limits::MAX_DURATION` every store accepts (a longer retry interval would
/// be cut to it at run time).
pub(crate) const MAX_MILLIS: u64 = 36_525 * 86_400_000;

/// Why a duration string was rejected. Its `Display` completes the sentence
/// "invalid duration `...`: ".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// The string is empty.
    Empty,
    /// A unit with no number in front of it, or a stray character.
    ExpectedNumber { found: String },
    /// A number with no unit after it.
    MissingUnit { number: String },
    /// Letters that are not one of [`UNITS`].
    UnknownUnit { unit: String },
    /// Spaces anywhere in the string.
    Whitespace,
    /// A decimal point: only whole numbers are accepted.
    Fraction,
    /// A unit repeated, or smaller units before larger ones.
    Order { unit: String },
    /// More milliseconds than fit in a `u64`.
    Overflow,
    /// Longer than [`MAX_MILLIS`].
    TooLong,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNIT_LIST: &str = "`ms`, `s`, `m`, `h` or `d`";
        match self {
            DurationError::Empty => {
                write!(
                    f,
                    "it is empty; write a number and a unit, e.g. \"250ms\", \"1s\" or \"1m30s\""
                )
            }
            DurationError::ExpectedNumber { found } => {
                write!(f, "expected a number, found `{found}`")
            }
            DurationError::MissingUnit { number } => {
                write!(f, "`{number}` has no unit; use {UNIT_LIST}")
            }
            DurationError::UnknownUnit { unit } => {
                write!(f, "unknown unit `{unit}`; use {UNIT_LIST}")
            }
            DurationError::Whitespace => {
                write!(f, "it contains spaces; write \"1m30s\", not \"1m 30s\"")
            }
            DurationError::Fraction => {
                write!(
                    f,
                    "fractions are not supported; write \"1s500ms\" instead of \"1.5s\""
                )
            }
            DurationError::Order { unit } => write!(
                f,
                "`{unit}` comes after a unit that is not larger; write units from largest to smallest, each once, as in \"1h30m\""
            ),
            DurationError::Overflow => write!(f, "it is too large"),
            DurationError::TooLong => write!(
                f,
                "it is longer than 100 years (36525d), the longest duration the stores accept"
            ),
        }
    }
}

/// Parses one or more `<whole number><unit>` parts, largest unit first, without spaces:
/// `"250ms"`, `"90s"`, `"1m30s"`, `"1h"`, `"2d12h"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.contains(char::is_whitespace) {
        return Err(DurationError::Whitespace);
    }
    let mut rest = text;
    let mut total_millis: u64 = 0;
    // Index into UNITS of the last unit used; the next one must be strictly smaller.
    let mut last_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (number, after_number) = rest.split_at(digits_len);
        if number.is_empty() {
            let found: String = after_number
                .chars()
                .take_while(|c| !c.is_ascii_digit())
                .collect();
            return Err(DurationError::ExpectedNumber { found });
        }
        if after_number.starts_with('.') {
            return Err(DurationError::Fraction);
        }
        let unit_len = after_number
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        if unit.is_empty() {
            if after_number.is_empty() {
                return Err(DurationError::MissingUnit {
                    number: number.to_owned(),
                });
            }
            let found: String = after_number.chars().take(1).collect();
            return Err(DurationError::UnknownUnit { unit: found });
        }
        let unit_index = UNITS
            .iter()
            .position(|(name, _)| *name == unit)
            .ok_or_else(|| DurationError::UnknownUnit {
                unit: unit.to_owned(),
            })?;
        if last_unit.is_some_and(|last| unit_index <= last) {
            return Err(DurationError::Order {
                unit: unit.to_owned(),
            });
        }
        last_unit = Some(unit_index);
        let value: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        let part = value
            .checked_mul(UNITS[unit_index].1)
            .ok_or(DurationError::Overflow)?;
        total_millis = total_millis
            .checked_add(part)
            .ok_or(DurationError::Overflow)?;
        rest = after_unit;
    }
    if total_millis > MAX_MILLIS {
        return Err(DurationError::TooLong);
    }
    Ok(Duration::from_millis(total_millis))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any durations written largest unit first parse to their sum, or are too long.
        #[test]
        fn written_durations_parse_to_their_sum(
            parts in prop::collection::vec(proptest::option::of(0u64..100_000), 5)
        ) {
            let mut text = String::new();
            let mut total: u128 = 0;
            for ((unit, millis), part) in UNITS.iter().zip(&parts) {
                if let Some(value) = part {
                    text.push_str(&format!("{value}{unit}"));
                    total += u128::from(*value) * u128::from(*millis);
                }
            }
            let parsed = parse_duration(&text);
            if text.is_empty() {
                prop_assert_eq!(parsed, Err(DurationError::Empty));
            } else if total > u128::from(MAX_MILLIS) {
                prop_assert_eq!(parsed, Err(DurationError::TooLong));
            } else {
                prop_assert_eq!(parsed, Ok(Duration::from_millis(total as u64)));
            }
        }

        /// Any text is parsed or refused, never a panic, and what parses is within the limit.
        #[test]
        fn any_text_is_parsed_or_refused(text in prop_oneof!["[0-9dhms. -]{0,14}", ".{0,14}"]) {
            if let Ok(duration) = parse_duration(&text) {
                prop_assert!(duration <= Duration::from_millis(MAX_MILLIS));
            }
        }
    }

    #[test]
    fn the_limit_is_one_hundred_years() {
        assert_eq!(parse_duration("36525d"), ms(MAX_MILLIS));
        assert_eq!(parse_duration("36525d1ms"), Err(DurationError::TooLong));
    }

    fn ms(millis: u64) -> Result<Duration, DurationError> {
        Ok(Duration::from_millis(millis))
    }

    #[test]
    fn single_units() {
        assert_eq!(parse_duration("250ms"), ms(250));
        assert_eq!(parse_duration("1s"), ms(1_000));
        assert_eq!(parse_duration("5m"), ms(300_000));
        assert_eq!(parse_duration("1h"), ms(3_600_000));
        assert_eq!(parse_duration("2d"), ms(172_800_000));
        assert_eq!(parse_duration("0s"), ms(0));
        assert_eq!(parse_duration("90s"), ms(90_000));
    }

    #[test]
    fn compound_durations() {
        assert_eq!(parse_duration("1m30s"), ms(90_000));
        assert_eq!(parse_duration("1h30m"), ms(5_400_000));
        assert_eq!(parse_duration("1s500ms"), ms(1_500));
        assert_eq!(parse_duration("1d2h3m4s5ms"), ms(93_784_005));
        assert_eq!(parse_duration("007s"), ms(7_000));
    }

    #[test]
    fn rejects_empty_and_missing_parts() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_duration("10"),
            Err(DurationError::MissingUnit {
                number: "10".into()
            })
        );
        assert_eq!(
            parse_duration("s"),
            Err(DurationError::ExpectedNumber { found: "s".into() })
        );
        assert_eq!(parse_duration("1m s"), Err(DurationError::Whitespace));
        assert_eq!(parse_duration(" 1s"), Err(DurationError::Whitespace));
        assert_eq!(
            parse_duration("1m-30s"),
            Err(DurationError::ExpectedNumber { found: "-".into() })
        );
        assert_eq!(
            parse_duration("-1s"),
            Err(DurationError::ExpectedNumber { found: "-".into() })
        );
    }

    #[test]
    fn rejects_unknown_units() {
        assert_eq!(
            parse_duration("5x"),
            Err(DurationError::UnknownUnit { unit: "x".into() })
        );
        assert_eq!(
            parse_duration("5sec"),
            Err(DurationError::UnknownUnit { unit: "sec".into() })
        );
        assert_eq!(
            parse_duration("5S"),
            Err(DurationError::UnknownUnit { unit: "S".into() })
        );
        assert_eq!(
            parse_duration("1µs"),
            Err(DurationError::UnknownUnit { unit: "µ".into() })
        );
    }

    #[test]
    fn rejects_fractions() {
        assert_eq!(parse_duration("1.5s"), Err(DurationError::Fraction));
    }

    #[test]
    fn rejects_units_out_of_order_or_repeated() {
        assert_eq!(
            parse_duration("30s1m"),
            Err(DurationError::Order { unit: "m".into() })
        );
        assert_eq!(
            parse_duration("1s1s"),
            Err(DurationError::Order { unit: "s".into() })
        );
    }

    #[test]
    fn rejects_overflow() {
        assert_eq!(
            parse_duration("99999999999999999999ms"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_duration("18446744073709551615d"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_duration("18446744073709551615ms1ms"),
            Err(DurationError::Order { unit: "ms".into() })
        );
        assert_eq!(
            parse_duration("1d18446744073709551615s"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn messages_read_as_sentences() {
        let message = parse_duration("5x").unwrap_err().to_string();
        assert_eq!(message, "unknown unit `x`; use `ms`, `s`, `m`, `h` or `d`");
    }
}
