//! `schedule = "0 */5 * * * *"`, `timezone = "Europe/Paris"` and `catch_up = "latest"`
//! (workflows only): a cron schedule declared on the workflow. The expression and the
//! timezone are checked here, with the runtime's own cron parser (`croner`) and timezone
//! database (`chrono-tz`), so a bad one is a compile error on its literal.

use proc_macro2::Span;
use syn::LitStr;

use crate::errors::Errors;

/// A declared schedule, checked.
pub(crate) struct ScheduleOptions {
    /// The cron expression.
    pub cron: LitStr,
    /// The IANA timezone (default `UTC`).
    pub timezone: Option<LitStr>,
    /// What it does with missed slots (default: the runtime's, `latest`).
    pub catch_up: Option<CatchUpValue>,
}

/// `catch_up = "skip" | "latest" | "all(N)"`.
#[derive(Clone, Copy)]
pub(crate) enum CatchUpValue {
    Skip,
    Latest,
    All(u32),
}

/// The bound of `all(N)`: the runtime's `limits::MAX_CATCH_UP`.
const MAX_CATCH_UP: u32 = 1000;

/// Checks a cron expression; records why it does not parse on the literal.
pub(crate) fn check_cron(lit: &LitStr, errors: &mut Errors) -> bool {
    #[cfg(feature = "schedules")]
    {
        use croner::parser::{CronParser, Seconds, Year};
        match CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(&lit.value())
        {
            Ok(_) => true,
            Err(error) => {
                errors.spanned(
                    lit,
                    format_args!(
                        "invalid cron expression {:?}: {error}; expected 5 fields \
                         (`minute hour day month weekday`) or 6 with seconds first, \
                         as in \"0 */5 * * * *\"",
                        lit.value()
                    ),
                );
                false
            }
        }
    }
    #[cfg(not(feature = "schedules"))]
    {
        errors.spanned(
            lit,
            "`schedule` needs the `schedules` feature of `tasks` (on by default)",
        );
        false
    }
}

/// Checks a timezone name; records why it is unknown on the literal.
pub(crate) fn check_timezone(lit: &LitStr, errors: &mut Errors) -> bool {
    #[cfg(feature = "schedules")]
    {
        if lit.value().parse::<chrono_tz::Tz>().is_ok() {
            return true;
        }
        errors.spanned(
            lit,
            format_args!(
                "unknown timezone {:?}; expected an IANA name such as \"UTC\" or \"Europe/Paris\"",
                lit.value()
            ),
        );
        false
    }
    #[cfg(not(feature = "schedules"))]
    {
        errors.spanned(
            lit,
            "`timezone` needs the `schedules` feature of `tasks` (on by default)",
        );
        false
    }
}

/// Parses `catch_up = "..."`; records what is accepted on the literal.
pub(crate) fn parse_catch_up(lit: &LitStr, errors: &mut Errors) -> Option<CatchUpValue> {
    let value = lit.value();
    let parsed = match value.trim() {
        "skip" => Some(CatchUpValue::Skip),
        "latest" => Some(CatchUpValue::Latest),
        other => other
            .strip_prefix("all(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|max| max.trim().parse::<u32>().ok())
            .filter(|max| (1..=MAX_CATCH_UP).contains(max))
            .map(CatchUpValue::All),
    };
    if parsed.is_none() {
        errors.spanned(
            lit,
            format_args!(
                "invalid `catch_up` {value:?}; expected \"skip\", \"latest\" or \"all(N)\" \
                 with N in 1..={MAX_CATCH_UP}"
            ),
        );
    }
    parsed
}

/// Reports `timezone` or `catch_up` given without `schedule`.
pub(crate) fn without_schedule(span: Span, key: &str, errors: &mut Errors) {
    errors.at(
        span,
        format_args!("`{key}` applies to a declared schedule: add `schedule = \"...\"`"),
    );
}
