//! Parsing the macro arguments: `name = "..."`, `version = "..."`, `retry(...)`,
//! `timeout = "..."` and `record_args = false` (steps), `events(...)`, the schedule's keys
//! and `concurrency(...)` (workflows) and `crate = "..."`.
//!
//! The keys of `retry(...)` are parsed in `retry`, duration values in `duration`.
//!
//! Every key has one setter that rejects duplicates on the repeated key (as tokio-macros
//! does), and every problem is collected rather than returned on the first one.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Lit, LitStr, Meta, Path, Token};

use super::concurrency::{ConcurrencyOptions, parse_concurrency};
use super::duration::{DurationValue, duration};
use super::meta::{Seen, key_of, name_value, parse_metas};
use super::retry::{RetryOptions, parse_retry};
use super::schedule::{
    ScheduleOptions, check_cron, check_timezone, parse_catch_up, without_schedule,
};
use crate::errors::Errors;
use crate::kind::MacroKind;

/// The options given in `#[workflow(...)]` or `#[step(...)]`, each validated.
#[derive(Default)]
pub(crate) struct Options {
    /// `name = "..."`: a non-empty string literal.
    pub name: Option<LitStr>,
    /// `version = "..."` (workflows only): a non-empty string literal.
    pub version: Option<LitStr>,
    /// `retry(...)`.
    pub retry: Option<RetryOptions>,
    /// `crate = "..."`: the path of the `tasks` crate, for crates that re-export it.
    pub krate: Option<Path>,
    /// `timeout = "30s"` (steps only): the limit of each attempt.
    pub timeout: Option<DurationValue>,
    /// `record_args = false` (steps only): store none of the step's arguments.
    pub record_args: Option<bool>,
    /// `events(Approval, Payment)` (workflows only): the event types the workflow accepts.
    pub events: Vec<Path>,
    /// `queue = "..."` (workflows only): the queue of the workflow's runs, a valid name.
    pub queue: Option<LitStr>,
    /// `schedule = "..."`, `timezone = "..."`, `catch_up = "..."` (workflows only).
    pub schedule: Option<ScheduleOptions>,
    /// `concurrency(key = .., limit = ..)` (workflows only).
    pub concurrency: Option<ConcurrencyOptions>,
}

impl Options {
    /// `name = "..."`, or else the function's name (without `r#`).
    pub(crate) fn name_or(&self, ident: &Ident) -> LitStr {
        self.name
            .clone()
            .unwrap_or_else(|| LitStr::new(&ident.unraw().to_string(), ident.span()))
    }
}

/// Parses the attribute arguments of `kind`, recording every problem in `errors`.
pub(crate) fn parse_options(kind: MacroKind, args: TokenStream, errors: &mut Errors) -> Options {
    let mut options = Options::default();
    let Some(metas) = parse_metas(args, errors) else {
        return options;
    };
    let mut seen = Seen::default();
    // The schedule's keys, checked one by one and put together after the loop.
    let mut cron: Option<LitStr> = None;
    let mut timezone: Option<LitStr> = None;
    let mut catch_up = None;
    let mut schedule_keys_without_cron = Vec::new();
    let mut schedule_given = false;
    for meta in metas {
        let Some(key) = key_of(meta.path()) else {
            errors.spanned(
                meta.path(),
                unknown_option(kind, &meta.path().to_token_stream().to_string()),
            );
            continue;
        };
        match key.as_str() {
            "name" => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(lit) = non_empty_string(&meta, "name", kind.example_name(), errors)
                    .and_then(|lit| allowed_name(lit, "name", errors))
                    && fresh
                {
                    options.name = Some(lit);
                }
            }
            "version" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(lit) = non_empty_string(&meta, "version", "2", errors)
                    .and_then(|lit| allowed_name(lit, "version", errors))
                    && fresh
                {
                    options.version = Some(lit);
                }
            }
            "queue" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(lit) = non_empty_string(&meta, "queue", "emails", errors)
                    .and_then(|lit| allowed_name(lit, "queue", errors))
                    && fresh
                {
                    options.queue = Some(lit);
                }
            }
            "retry" => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(retry) = parse_retry(&meta, errors)
                    && fresh
                {
                    options.retry = Some(retry);
                }
            }
            "events" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(events) = parse_events(&meta, errors)
                    && fresh
                {
                    options.events = events;
                }
            }
            "crate" => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(path) = crate_path(&meta, errors)
                    && fresh
                {
                    options.krate = Some(path);
                }
            }
            "timeout" if kind == MacroKind::Step => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(timeout) =
                    name_value(&meta, "\"30s\"", errors).and_then(|expr| step_timeout(expr, errors))
                    && fresh
                {
                    options.timeout = Some(timeout);
                }
            }
            "record_args" if kind == MacroKind::Step => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(record) = name_value(&meta, "false", errors)
                    .and_then(|expr| bool_literal("record_args", expr, errors))
                    && fresh
                {
                    options.record_args = Some(record);
                }
            }
            "schedule" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                schedule_given = true;
                if let Some(lit) = non_empty_string(&meta, "schedule", "0 */5 * * * *", errors)
                    && check_cron(&lit, errors)
                    && fresh
                {
                    cron = Some(lit);
                }
            }
            "timezone" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                schedule_keys_without_cron.push((meta.path().clone(), "timezone"));
                if let Some(lit) = non_empty_string(&meta, "timezone", "Europe/Paris", errors)
                    && check_timezone(&lit, errors)
                    && fresh
                {
                    timezone = Some(lit);
                }
            }
            "catch_up" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                schedule_keys_without_cron.push((meta.path().clone(), "catch_up"));
                if let Some(value) = non_empty_string(&meta, "catch_up", "latest", errors)
                    .and_then(|lit| parse_catch_up(&lit, errors))
                    && fresh
                {
                    catch_up = Some(value);
                }
            }
            "concurrency" if kind == MacroKind::Workflow => {
                let fresh = seen.first(meta.path(), errors);
                if let Some(concurrency) = parse_concurrency(&meta, errors)
                    && fresh
                {
                    options.concurrency = Some(concurrency);
                }
            }
            other => errors.spanned(meta.path(), unknown_option(kind, other)),
        }
    }
    if !schedule_given {
        for (path, key) in schedule_keys_without_cron {
            without_schedule(syn::spanned::Spanned::span(&path), key, errors);
        }
    }
    options.schedule = cron.map(|cron| ScheduleOptions {
        cron,
        timezone,
        catch_up,
    });
    options
}

/// `record_args = false`: a `bool` literal.
fn bool_literal(key: &str, expr: &Expr, errors: &mut Errors) -> Option<bool> {
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Bool(lit),
            ..
        }) => Some(lit.value),
        _ => {
            errors.spanned(
                expr,
                format_args!(
                    "`{key}` must be `true` or `false`, as in `{key} = false` (for a step whose \
                     arguments hold secrets)"
                ),
            );
            None
        }
    }
}

/// `timeout = "30s"`: a duration longer than zero (a literal is checked here, an expression
/// by a `const` assertion).
fn step_timeout(expr: &Expr, errors: &mut Errors) -> Option<DurationValue> {
    let timeout = duration("timeout", expr, errors)?;
    if let DurationValue::Parsed { value, span, .. } = &timeout
        && value.is_zero()
    {
        errors.at(
            *span,
            "`timeout` limits each attempt of the step: it must be longer than zero",
        );
        return None;
    }
    Some(timeout)
}

fn unknown_option(kind: MacroKind, key: &str) -> String {
    match kind {
        MacroKind::Workflow if key == "record_args" => {
            "#[workflow] has no `record_args`: a run's input is always stored; set it on a `#[step]`".to_owned()
        }
        MacroKind::Workflow if key == "timeout" => {
            "#[workflow] has no `timeout`: set it on each `#[step]`, or give the run a deadline when it starts".to_owned()
        }
        MacroKind::Workflow if matches!(key, "concurrency_key" | "concurrency_limit" | "limit") => {
            format!(
                "#[workflow] has no `{key}`: the key function and the limit go together, as in `concurrency(key = customer_of, limit = 2)`"
            )
        }
        MacroKind::Workflow => {
            format!(
                "unknown #[workflow] option `{key}`; expected `name`, `version`, `queue`, `retry`, `events`, `schedule`, `timezone`, `catch_up`, `concurrency` or `crate`"
            )
        }
        MacroKind::Step if key == "events" => {
            "#[step] has no `events`: declare them on the workflow that waits for them, \
             `#[workflow(events(...))]`"
                .to_owned()
        }
        MacroKind::Step if key == "concurrency" => {
            "#[step] has no `concurrency`: a concurrency key limits whole runs; declare it on the `#[workflow]`, `concurrency(key = customer_of, limit = 2)`".to_owned()
        }
        MacroKind::Step if key == "queue" => {
            "#[step] has no `queue`: a step runs inside its workflow's run; put the workflow on \
             a queue, `#[workflow(queue = \"...\")]`"
                .to_owned()
        }
        MacroKind::Step if key == "version" => {
            "#[step] has no `version`: a step is versioned by the workflow that calls it".to_owned()
        }
        MacroKind::Step => {
            format!(
                "unknown #[step] option `{key}`; expected `name`, `retry`, `timeout`, `record_args` or `crate`"
            )
        }
    }
}

/// `key = "..."` with a non-empty string literal.
fn non_empty_string(meta: &Meta, key: &str, example: &str, errors: &mut Errors) -> Option<LitStr> {
    let expr = name_value(meta, &format!("\"{example}\""), errors)?;
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            if lit.value().trim().is_empty() {
                errors.spanned(lit, format_args!("`{key}` must not be empty"));
                None
            } else {
                Some(lit.clone())
            }
        }
        _ => {
            errors.spanned(
                expr,
                format_args!("`{key}` must be a string literal, as in `{key} = \"{example}\"`"),
            );
            None
        }
    }
}

/// The characters a name or version may hold: letters and digits (any script, as in Rust
/// identifiers), `_`, `-`, `.` and `/`. The runtime refuses the same at `Registry::register`
/// and at start; this reports a literal on its token.
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// `lit` when every character of it is allowed in a name.
/// The most bytes a store holds of a `name` or `queue` (`MAX_WORKFLOW_NAME_BYTES`,
/// `MAX_STEP_NAME_BYTES` and `MAX_QUEUE_NAME_BYTES` of `tasks::limits`) and of a `version`
/// (`MAX_VERSION_BYTES`). A proc-macro crate cannot read the runtime's constants; the test
/// `limits::the_macros_refuse_names_the_stores_cannot_hold` holds the two to each other.
const MAX_NAME_BYTES: usize = 255;
const MAX_VERSION_BYTES: usize = 64;

fn allowed_name(lit: LitStr, key: &str, errors: &mut Errors) -> Option<LitStr> {
    let value = lit.value();
    let limit = if key == "version" {
        MAX_VERSION_BYTES
    } else {
        MAX_NAME_BYTES
    };
    if value.len() > limit {
        errors.spanned(
            &lit,
            format_args!(
                "`{key}` is {} bytes; the stores hold at most {limit}, so it could never be started",
                value.len()
            ),
        );
        return None;
    }
    match value.char_indices().find(|(_, c)| !is_name_char(*c)) {
        None => Some(lit),
        Some((at, c)) => {
            errors.spanned(
                &lit,
                format_args!(
                    "`{key}` may hold only letters, digits, `_`, `-`, `.` and `/`; {c:?} at byte {at} of {value:?} is not allowed"
                ),
            );
            None
        }
    }
}

/// `events(Approval, Payment)`: a non-empty list of distinct type paths (each must
/// implement `tasks::Event`, which the generated code checks on the path).
fn parse_events(meta: &Meta, errors: &mut Errors) -> Option<Vec<Path>> {
    const EXAMPLE: &str = "expected a list of event types, as in `events(Approval, Payment)`";
    let Meta::List(list) = meta else {
        errors.spanned(meta, EXAMPLE);
        return None;
    };
    let paths = match list.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated) {
        Ok(paths) => paths,
        Err(error) => {
            errors.push(syn::Error::new(error.span(), EXAMPLE));
            return None;
        }
    };
    if paths.is_empty() {
        errors.spanned(meta, "`events()` is empty; list the event types the workflow accepts, as in `events(Approval)`, or leave `events` out");
        return None;
    }
    let mut seen: Vec<String> = Vec::new();
    let mut events = Vec::new();
    for path in paths {
        let text = path.to_token_stream().to_string();
        if seen.contains(&text) {
            errors.spanned(&path, format_args!("event type `{text}` is listed twice"));
            continue;
        }
        seen.push(text);
        events.push(path);
    }
    Some(events)
}

/// `crate = "path::to::tasks"`: a string literal holding a module-style path (no generics),
/// re-spanned on the literal so that a path that does not resolve is reported there.
fn crate_path(meta: &Meta, errors: &mut Errors) -> Option<Path> {
    const EXAMPLE: &str = "my_crate::tasks";
    let lit = non_empty_string(meta, "crate", EXAMPLE, errors)?;
    match lit.parse_with(Path::parse_mod_style) {
        Ok(path) => Some(path),
        Err(_) => {
            errors.spanned(
                &lit,
                format_args!(
                    "`crate` must be the path of the `tasks` crate, as in `crate = \"{EXAMPLE}\"`; found {:?}",
                    lit.value()
                ),
            );
            None
        }
    }
}
