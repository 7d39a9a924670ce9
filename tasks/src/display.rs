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
