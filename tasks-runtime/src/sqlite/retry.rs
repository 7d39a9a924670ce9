//! The retry arithmetic of `fail_run`, done in Rust inside the write transaction (SQLite
//! cannot do microsecond timestamp arithmetic on the stored text).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use super::millis;
use crate::error::{StoreError, StoreResult};
use crate::retry::RetryPolicy;

/// What [`Store::fail_run`](crate::Store::fail_run) does with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RetryDecision {
    /// Fail for good.
    pub(super) give_up: bool,
    /// The delay before the retry.
    pub(super) wait: TimeDelta,
}

/// A number in the run config, read like Postgres' `(config #>> '{...}')::float8`: a JSON
/// number or a numeric string; anything else (or nothing) means "use the default".
fn config_number(config: &Value, key: &str) -> Option<f64> {
    match config.get("retryPolicy")?.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The retry arithmetic of the Postgres store, field for field: the run's policy (each field
/// defaulting to [`RetryPolicy::DEFAULT_RUN`]), exhausted after `max_attempts` attempts,
/// a delay of `min(initial * coefficient^(attempts - 1), maximum)` unless `custom_delay` is
/// given, and giving up when the retry would start at or after the deadline.
pub(super) fn decide(
    config: &Value,
    attempts: i32,
    deadline: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    force: bool,
    custom_delay: Option<Duration>,
) -> StoreResult<RetryDecision> {
    let defaults = RetryPolicy::DEFAULT_RUN;
    let max_attempts = config_number(config, "maxAttempts")
        .map(|n| n.trunc())
        .unwrap_or(f64::from(defaults.max_attempts));
    let initial_ms = config_number(config, "initialIntervalMs")
        .unwrap_or(millis(defaults.initial_interval) as f64);
    let coefficient =
        config_number(config, "backoffCoefficient").unwrap_or(defaults.backoff_coefficient);
    let maximum_ms =
        config_number(config, "maximumIntervalMs").unwrap_or(millis(defaults.max_interval) as f64);

    let exhausted = force || f64::from(attempts) >= max_attempts;
    let wait_ms = match custom_delay {
        Some(delay) => millis(delay) as f64,
        None => (initial_ms * coefficient.powi((attempts - 1).max(0))).min(maximum_ms),
    };
    let wait_us = (wait_ms * 1000.0).round();
    // Beyond ±100 000 years: a policy no run can honour.
    if !wait_us.is_finite() || wait_us.abs() > 3.2e18 {
        return Err(StoreError::InvalidArgument(format!(
            "a retry delay of {wait_ms} ms is out of range"
        )));
    }
    let wait = TimeDelta::microseconds(wait_us as i64);
    let give_up = exhausted
        || match deadline {
            Some(deadline) => now
                .checked_add_signed(wait)
                .is_none_or(|retry_at| retry_at >= deadline),
            None => false,
        };
    Ok(RetryDecision { give_up, wait })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn backoff_follows_the_policy_and_defaults() {
        let config = json!({ "retryPolicy": RetryPolicy::new(5)
            .with_initial_interval(Duration::from_millis(250))
            .with_backoff_coefficient(3.0)
            .with_max_interval(Duration::from_secs(2)) });
        let wait = |attempts| decide(&config, attempts, None, at(0), false, None).unwrap();
        assert_eq!(wait(1).wait, TimeDelta::milliseconds(250));
        assert_eq!(wait(2).wait, TimeDelta::milliseconds(750));
        assert_eq!(wait(3).wait, TimeDelta::milliseconds(2000));
        assert!(!wait(4).give_up);
        assert!(wait(5).give_up);

        let default = decide(&json!({}), 1, None, at(0), false, None).unwrap();
        assert_eq!(default.wait, TimeDelta::seconds(1));
        assert!(!default.give_up);
        assert!(
            decide(&json!({}), 3, None, at(0), false, None)
                .unwrap()
                .give_up
        );
    }

    #[test]
    fn force_custom_delay_and_deadline() {
        let config = json!({});
        assert!(decide(&config, 1, None, at(0), true, None).unwrap().give_up);
        let custom = decide(
            &config,
            1,
            None,
            at(0),
            false,
            Some(Duration::from_secs(30)),
        )
        .unwrap();
        assert_eq!(custom.wait, TimeDelta::seconds(30));
        // The retry would start exactly at the deadline: give up.
        assert!(
            decide(&config, 1, Some(at(1)), at(0), false, None)
                .unwrap()
                .give_up
        );
        assert!(
            !decide(&config, 1, Some(at(2)), at(0), false, None)
                .unwrap()
                .give_up
        );
    }
}
