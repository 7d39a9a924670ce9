//! Retry policies for runs and steps: exponential backoff with a cap.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a failed run or step is retried.
///
/// Attempt `n` (1-based) that fails is retried after
/// `min(initial_interval * backoff_coefficient^(n-1), max_interval)`, until `max_attempts`
/// attempts have been made.
///
/// ```
/// use std::time::Duration;
/// use tasks_core::RetryPolicy;
///
/// let policy = RetryPolicy::new(4)
///     .with_initial_interval(Duration::from_millis(100))
///     .with_backoff_coefficient(3.0);
/// assert_eq!(policy.delay_after(1), Some(Duration::from_millis(100)));
/// assert_eq!(policy.delay_after(3), Some(Duration::from_millis(900)));
/// assert_eq!(policy.delay_after(4), None); // attempts exhausted
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Total attempts, the first one included. `1` means "never retry".
    pub max_attempts: u32,
    /// Delay before the first retry.
    #[serde(rename = "initialIntervalMs", with = "millis")]
    pub initial_interval: Duration,
    /// Factor applied to the delay after every failed attempt.
    pub backoff_coefficient: f64,
    /// Upper bound for any single delay.
    #[serde(rename = "maximumIntervalMs", with = "millis")]
    pub max_interval: Duration,
}

impl RetryPolicy {
    /// Checks the policy against the [limits](crate::limits): intervals at most
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION), a finite non-negative backoff
    /// coefficient.
    pub fn check(&self) -> Result<(), crate::limits::LimitError> {
        use crate::limits::{Field, LimitError, check_duration};
        check_duration(Field::RetryInterval, self.initial_interval)?;
        check_duration(Field::RetryInterval, self.max_interval)?;
        let coefficient = self.backoff_coefficient;
        if !coefficient.is_finite() || coefficient < 0.0 {
            return Err(LimitError::NotFinite {
                field: Field::BackoffCoefficient,
                value: coefficient,
            });
        }
        Ok(())
    }

    /// The policy runs use when their workflow sets none: 3 attempts, 1 s, ×2, capped at 100 s.
    pub const DEFAULT_RUN: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        initial_interval: Duration::from_secs(1),
        backoff_coefficient: 2.0,
        max_interval: Duration::from_secs(100),
    };

    /// The policy steps use when they set none: 3 attempts, 1 s, ×2, capped at 100 s.
    pub const DEFAULT_STEP: RetryPolicy = RetryPolicy::DEFAULT_RUN;

    /// A policy that never retries.
    pub const NONE: RetryPolicy = RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::DEFAULT_RUN
    };

    /// What is wrong with this policy, or `None` when it is valid: at least one attempt, a
    /// `backoff_coefficient` of at least 1.0, and an `initial_interval` no longer than the
    /// `max_interval`. `#[workflow(retry(...))]` and `#[step(retry(...))]` check this at
    /// compile time, constants and expressions included.
    ///
    /// ```
    /// use tasks_core::RetryPolicy;
    ///
    /// assert_eq!(RetryPolicy::DEFAULT_STEP.problem(), None);
    /// assert!(RetryPolicy::new(0).problem().is_some());
    /// ```
    pub const fn problem(&self) -> Option<&'static str> {
        if self.max_attempts == 0 {
            return Some("`max_attempts` counts the first attempt too: it must be at least 1");
        }
        if self.backoff_coefficient.is_nan() || self.backoff_coefficient < 1.0 {
            return Some(
                "`backoff` multiplies the delay after each failed attempt: it must be at least 1.0",
            );
        }
        if self.initial_interval.as_nanos() > self.max_interval.as_nanos() {
            return Some("`max_interval` is shorter than `initial_interval`");
        }
        None
    }

    /// A policy with `max_attempts` and the default intervals.
    pub const fn new(max_attempts: u32) -> Self {
        RetryPolicy {
            max_attempts,
            ..RetryPolicy::DEFAULT_RUN
        }
    }

    /// Sets the delay before the first retry.
    pub const fn with_initial_interval(mut self, interval: Duration) -> Self {
        self.initial_interval = interval;
        self
    }

    /// Sets the growth factor between retries.
    pub const fn with_backoff_coefficient(mut self, coefficient: f64) -> Self {
        self.backoff_coefficient = coefficient;
        self
    }

    /// Sets the cap on any single delay.
    pub const fn with_max_interval(mut self, interval: Duration) -> Self {
        self.max_interval = interval;
        self
    }

    /// The delay before retrying after attempt `attempt` (1-based) failed, or `None` when
    /// no attempts are left. Never longer than
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION).
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let exponent = attempt.saturating_sub(1).min(i32::MAX as u32) as i32;
        let millis =
            self.initial_interval.as_millis() as f64 * self.backoff_coefficient.powi(exponent);
        let cap = self.max_interval.min(crate::limits::MAX_DURATION);
        let capped = millis.min(cap.as_millis() as f64).max(0.0);
        Some(Duration::from_millis(capped as u64))
    }
}

impl RetryPolicy {
    /// The workflow policy stored in a run's config (`config.retryPolicy`). Each field that
    /// is missing or not a number falls back to [`RetryPolicy::DEFAULT_RUN`].
    pub fn from_run_config(config: &serde_json::Value) -> Self {
        let defaults = RetryPolicy::DEFAULT_RUN;
        let stored = config.get("retryPolicy");
        let number = |key: &str| stored.and_then(|policy| policy.get(key)?.as_f64());
        let millis = |key: &str, default: Duration| {
            number(key)
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map_or(default, |ms| {
                    Duration::from_millis(ms.min(u64::MAX as f64) as u64)
                })
        };
        RetryPolicy {
            max_attempts: number("maxAttempts").map_or(defaults.max_attempts, |n| {
                n.clamp(0.0, f64::from(u32::MAX)) as u32
            }),
            initial_interval: millis("initialIntervalMs", defaults.initial_interval),
            backoff_coefficient: number("backoffCoefficient")
                .unwrap_or(defaults.backoff_coefficient),
            max_interval: millis("maximumIntervalMs", defaults.max_interval),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::DEFAULT_RUN
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis().min(u64::MAX as u128) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
