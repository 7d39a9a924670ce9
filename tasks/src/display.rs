//! How the operator's faces (the command line and the dashboard) print times, durations,
//! workflow names and step attempts, so that both show a run the same way.

use std::collections::HashMap;

use crate::chrono::{DateTime, TimeDelta, Utc};
use crate::{ErrorRecord, StepAttempt, WorkflowRun};

/// `12ms`, `1.25s`, `3m04s`, `2h03m`.
pub(crate) fn duration(elapsed: TimeDelta) -> String {
    let millis = elapsed.num_milliseconds().max(0);
    if millis < 1_000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.2}s", millis as f64 / 1_000.0)
    } else if millis < 3_600_000 {
        format!("{}m{:02}s", millis / 60_000, millis % 60_000 / 1_000)
    } else {
        format!("{}h{:02}m", millis / 3_600_000, millis % 3_600_000 / 60_000)
    }
}

/// A timestamp to the millisecond, in UTC.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

/// An optional timestamp; `-` when unset.
pub(crate) fn maybe_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), time)
}

/// `name` or `name@version`.
pub(crate) fn workflow_of(run: &WorkflowRun) -> String {
    match &run.version {
        Some(version) => format!("{}@{version}", run.workflow_name),
        None => run.workflow_name.clone(),
    }
}

/// The message of a stored error.
pub(crate) fn error_text(error: &serde_json::Value) -> String {
    ErrorRecord::from_json(error).to_string()
}

/// Each attempt's number among the attempts of the same step, oldest first.
pub(crate) fn attempt_numbers(steps: &[StepAttempt]) -> Vec<u32> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    steps
        .iter()
        .map(|step| {
            let count = seen.entry(step.step_name.as_str()).or_insert(0);
            *count += 1;
            *count
        })
        .collect()
}

/// How long an attempt ran (so far, while running).
pub(crate) fn step_duration(step: &StepAttempt) -> String {
    let started = step.started_at.unwrap_or(step.created_at);
    match step.finished_at {
        Some(finished) => duration(finished - started),
        None => format!("{} so far", duration(Utc::now() - started)),
    }
}

/// The recorded arguments of a step call, one `(name, text)` per parameter: the value as
/// compact JSON, or why it was not recorded (see `StepAttempt::args`).
pub(crate) fn argument_texts(args: &serde_json::Value) -> Vec<(String, String)> {
    let Some(entries) = args.as_array() else {
        return vec![("?".to_owned(), args.to_string())];
    };
    entries
        .iter()
        .map(|entry| {
            let name = entry
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let text = match (entry.get("value"), entry.get("unrecorded")) {
                (Some(value), _) => value.to_string(),
                (None, Some(reason)) => {
                    let why = match reason.as_str().unwrap_or_default() {
                        "not_serializable" => "its type is not Serialize",
                        "non_finite_float" => "it holds a NaN or infinite float",
                        "exceeds_limits" => "it is past the store's limits",
                        "serialize_error" => "it failed to serialize",
                        _ => "unknown reason",
                    };
                    match entry.get("type").and_then(serde_json::Value::as_str) {
                        Some(ty) => format!("<not recorded: {why}; {ty}>"),
                        None => format!("<not recorded: {why}>"),
                    }
                }
                (None, None) => entry.to_string(),
            };
            (name, text)
        })
        .collect()
}

/// The recorded arguments on one line: `order={"id":7}, count=2`.
#[cfg(feature = "cli")]
pub(crate) fn arguments_line(args: &serde_json::Value) -> String {
    argument_texts(args)
        .into_iter()
        .map(|(name, text)| format!("{name}={text}"))
        .collect::<Vec<_>>()
        .join(", ")
}
