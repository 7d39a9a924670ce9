//! Named queues: which runs a worker claims, and limits on a whole queue.
//!
//! Every run belongs to a queue: the one its start named
//! (`StartOptions::queue`), else its workflow's
//! (`#[workflow(queue = "emails")]`, `WorkflowDefinition::queue`), else
//! [`DEFAULT_QUEUE`]. A worker serves every queue unless told otherwise
//! (`WorkerBuilder::queues`); its claim filters in the
//! database ([`ClaimFilter`]).
//!
//! A queue may be configured in the store ([`QueueOptions`], [`QueueStore::put_queue`]), so that
//! every worker of the namespace agrees on its limits:
//!
//! - a concurrency limit: at most N runs of the queue *running* at once, across every
//!   worker. Like a concurrency key's slot, a queue slot is held only while a run is
//!   running: a sleeping, paused or pending run holds none;
//! - a rate limit: at most N runs of the queue *start* (are claimed for the first time) per
//!   period, counted in fixed windows that open at the first start after the previous
//!   window ended. Resumes after a sleep, retries and takeovers are not starts;
//! - a rate limit per key: the same, for each concurrency key of the queue's runs
//!   (`StartOptions::concurrency_key`); runs without
//!   a key are not limited by it. A key's window counts its starts in every queue with a
//!   per-key rate limit, each against its own queue's limit;
//! - a concurrency limit per key: at most N runs of one concurrency key running at once,
//!   for the keyed runs of the queue. It caps each run's own limit: a keyed run of the queue
//!   is claimed only while its key has fewer running runs (counted across the namespace,
//!   like the key's own limit) than the smaller of its own limit and the queue's. Runs
//!   without a key are not limited by it.
//!
//! All are enforced by the claim statement, in the database, and a changed setting applies
//! from the next claim.
//!
//! [`QueueStore::put_queue`]: crate::QueueStore::put_queue

#[cfg(doc)]
use crate::StoreError;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::limits::{self, Field, LimitError};

/// The queue of a run whose start and workflow named none.
pub const DEFAULT_QUEUE: &str = "default";

/// The most runs of a queue running at once: the limit of a queue's concurrency.
pub const MAX_QUEUE_CONCURRENCY: u32 = i32::MAX as u32;

/// "At most `starts` runs start per `period`": a queue's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// The most starts per window.
    pub starts: u32,
    /// The length of a window (at least 1 ms).
    pub period: Duration,
}

impl RateLimit {
    /// Checks the number (1..=`i32::MAX`) and the period (1 ms..=[`limits::MAX_DURATION`]).
    pub fn check(&self) -> Result<(), LimitError> {
        if self.starts == 0 || self.starts > MAX_QUEUE_CONCURRENCY {
            return Err(LimitError::OutOfRange {
                field: Field::RateLimit,
                value: i64::from(self.starts),
                min: 1,
                max: i64::from(MAX_QUEUE_CONCURRENCY),
            });
        }
        limits::check_duration(Field::RatePeriod, self.period)?;
        if self.period < Duration::from_millis(1) {
            return Err(LimitError::OutOfRange {
                field: Field::RatePeriod,
                value: 0,
                min: 1,
                max: i64::MAX,
            });
        }
        Ok(())
    }

    /// The period in whole milliseconds, as stored.
    pub fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The configuration of a queue, written with [`QueueStore::put_queue`](crate::QueueStore::put_queue)
/// (or `Client::put_queue`, or declared by a worker with
/// `WorkerBuilder::queue`).
///
/// ```
/// use std::time::Duration;
/// use tasks_core::queue::QueueOptions;
///
/// // At most 10 emails sending at once, and at most 100 new ones per minute.
/// let emails = QueueOptions::new("emails")
///     .concurrency(10)
///     .rate_limit(100, Duration::from_secs(60));
/// assert!(emails.check().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueOptions {
    name: String,
    concurrency: Option<u32>,
    rate_limit: Option<RateLimit>,
    key_rate_limit: Option<RateLimit>,
    key_concurrency: Option<u32>,
}

impl QueueOptions {
    /// A queue named `name` without limits.
    pub fn new(name: impl Into<String>) -> Self {
        QueueOptions {
            name: name.into(),
            concurrency: None,
            rate_limit: None,
            key_rate_limit: None,
            key_concurrency: None,
        }
    }

    /// At most `limit` runs of the queue running at once, across every worker.
    pub fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(limit);
        self
    }

    /// At most `starts` runs of the queue start per `period` (see [`RateLimit`]).
    pub fn rate_limit(mut self, starts: u32, period: Duration) -> Self {
        self.rate_limit = Some(RateLimit { starts, period });
        self
    }

    /// At most `starts` runs of each concurrency key start per `period`, in this queue (see
    /// [`RateLimit`]; runs without a key are not limited by it).
    pub fn rate_limit_per_key(mut self, starts: u32, period: Duration) -> Self {
        self.key_rate_limit = Some(RateLimit { starts, period });
        self
    }

    /// At most `limit` runs of one concurrency key of this queue running at once, across
    /// every worker
    /// (`StartOptions::concurrency_key`).
    ///
    /// A keyed run of the queue is claimed only while its key has fewer running runs than
    /// the smaller of the run's own limit and this one; the key's running runs are counted
    /// across the namespace, as for the run's own limit. Runs without a key are not limited
    /// by it, and sleeping, paused or pending runs hold no slot.
    ///
    /// ```
    /// use tasks_core::queue::QueueOptions;
    ///
    /// // At most 2 syncs of one customer (their concurrency key) at once.
    /// let syncs = QueueOptions::new("syncs").concurrency_per_key(2);
    /// assert_eq!(syncs.key_concurrency_limit(), Some(2));
    /// ```
    pub fn concurrency_per_key(mut self, limit: u32) -> Self {
        self.key_concurrency = Some(limit);
        self
    }

    /// The concurrency limit per key, if any.
    pub fn key_concurrency_limit(&self) -> Option<u32> {
        self.key_concurrency
    }

    /// The per-key rate limit, if any.
    pub fn key_rate(&self) -> Option<RateLimit> {
        self.key_rate_limit
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The concurrency limit, if any.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The rate limit, if any.
    pub fn rate(&self) -> Option<RateLimit> {
        self.rate_limit
    }

    /// Checks the name ([`limits::check_queue_name`]) and the limits. A store reaches it through
    /// its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_queue_name(&self.name)?;
        for (field, limit) in [
            (Field::QueueConcurrency, self.concurrency),
            (Field::KeyConcurrency, self.key_concurrency),
        ] {
            if let Some(limit) = limit
                && (limit == 0 || limit > MAX_QUEUE_CONCURRENCY)
            {
                return Err(LimitError::OutOfRange {
                    field,
                    value: i64::from(limit),
                    min: 1,
                    max: i64::from(MAX_QUEUE_CONCURRENCY),
                });
            }
        }
        for rate in self.rate_limit.iter().chain(&self.key_rate_limit) {
            rate.check()?;
        }
        Ok(())
    }

    /// The concurrency limit as stored.
    pub fn stored_concurrency(&self) -> Option<i32> {
        self.concurrency
            .map(|limit| i32::try_from(limit).unwrap_or(i32::MAX))
    }

    /// The concurrency limit per key as stored.
    pub fn stored_key_concurrency(&self) -> Option<i32> {
        self.key_concurrency
            .map(|limit| i32::try_from(limit).unwrap_or(i32::MAX))
    }

    /// The rate limit as stored: the number and the period in milliseconds.
    pub fn stored_rate(&self) -> (Option<i32>, Option<i64>) {
        Self::stored(self.rate_limit.as_ref())
    }

    /// The per-key rate limit as stored, like [`QueueOptions::stored_rate`].
    pub fn stored_key_rate(&self) -> (Option<i32>, Option<i64>) {
        Self::stored(self.key_rate_limit.as_ref())
    }

    fn stored(rate: Option<&RateLimit>) -> (Option<i32>, Option<i64>) {
        match rate {
            Some(rate) => (
                Some(i32::try_from(rate.starts).unwrap_or(i32::MAX)),
                Some(rate.period_ms()),
            ),
            None => (None, None),
        }
    }
}

/// A configured queue, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The queue's name.
    pub name: String,
    /// At most this many runs of the queue running at once.
    pub concurrency: Option<u32>,
    /// At most this many starts per period.
    pub rate_limit: Option<RateLimit>,
    /// At most this many starts of each key per period.
    pub key_rate_limit: Option<RateLimit>,
    /// At most this many runs of one concurrency key running at once
    /// ([`QueueOptions::concurrency_per_key`]).
    pub key_concurrency: Option<u32>,
    /// When the current rate window opened (`None` before the first start under a rate
    /// limit).
    pub window_start: Option<DateTime<Utc>>,
    /// How many runs started in the current rate window.
    pub window_starts: u32,
    /// When the queue was first configured, by the store's clock.
    pub created_at: DateTime<Utc>,
    /// When it was last configured.
    pub updated_at: DateTime<Utc>,
}

impl Queue {
    /// A stored rate decoded: its number and period in milliseconds.
    pub fn rate_from_row(starts: Option<i64>, period_ms: Option<i64>) -> Option<RateLimit> {
        match (starts, period_ms) {
            (Some(starts), Some(ms)) => Some(RateLimit {
                starts: u32::try_from(starts).unwrap_or(0),
                period: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            }),
            _ => None,
        }
    }
}

/// Which runs a claim may take ([`LeaseStore::claim_runs_filtered`]): those of the chosen queues
/// and of the chosen workflows. `None` means every one; both filters must match.
///
/// [`LeaseStore::claim_runs_filtered`]: crate::LeaseStore::claim_runs_filtered
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimFilter {
    /// Only runs of these queues (`None`: every queue).
    pub queues: Option<Vec<String>>,
    /// Only runs of these workflow names (`None`: every workflow).
    pub workflows: Option<Vec<String>>,
}

impl ClaimFilter {
    /// Every run.
    pub const ALL: ClaimFilter = ClaimFilter {
        queues: None,
        workflows: None,
    };

    /// Whether it takes every run.
    pub fn is_all(&self) -> bool {
        self.queues.is_none() && self.workflows.is_none()
    }

    /// Checks the names: queue names as [`limits::check_queue_name`], workflow names as
    /// [`limits::MAX_WORKFLOW_NAME_BYTES`] without NUL.
    pub fn check(&self) -> Result<(), LimitError> {
        for queue in self.queues.iter().flatten() {
            limits::check_queue_name(queue)?;
        }
        for workflow in self.workflows.iter().flatten() {
            limits::check_text(
                Field::WorkflowName,
                workflow,
                limits::MAX_WORKFLOW_NAME_BYTES,
            )?;
        }
        Ok(())
    }

    /// Whether a run of `queue` and `workflow` passes the filter (what the claim statements
    /// check in SQL; for tests and in-memory stores).
    pub fn admits(&self, queue: &str, workflow: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|queues| queues.iter().any(|q| q == queue))
            && self
                .workflows
                .as_ref()
                .is_none_or(|workflows| workflows.iter().any(|w| w == workflow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        assert!(QueueOptions::new("emails").check().is_ok());
        assert!(matches!(
            QueueOptions::new("").check(),
            Err(LimitError::InvalidName { .. })
        ));
        assert!(matches!(
            QueueOptions::new("a b").check(),
            Err(LimitError::InvalidName {
                field: Field::Queue,
                ..
            })
        ));
        assert!(matches!(
            QueueOptions::new("q".repeat(256)).check(),
            Err(LimitError::TooLong { .. })
        ));
        assert!(matches!(
            QueueOptions::new("q").concurrency(0).check(),
            Err(LimitError::OutOfRange {
                field: Field::QueueConcurrency,
                ..
            })
        ));
        assert!(matches!(
            QueueOptions::new("q").concurrency_per_key(0).check(),
            Err(LimitError::OutOfRange {
                field: Field::KeyConcurrency,
                ..
            })
        ));
        assert_eq!(
            QueueOptions::new("q")
                .concurrency_per_key(3)
                .stored_key_concurrency(),
            Some(3)
        );
        assert!(matches!(
            QueueOptions::new("q")
                .rate_limit(0, Duration::from_secs(1))
                .check(),
            Err(LimitError::OutOfRange {
                field: Field::RateLimit,
                ..
            })
        ));
        assert!(matches!(
            QueueOptions::new("q")
                .rate_limit(1, Duration::from_micros(10))
                .check(),
            Err(LimitError::OutOfRange {
                field: Field::RatePeriod,
                ..
            })
        ));
        assert_eq!(
            QueueOptions::new("q")
                .rate_limit(5, Duration::from_secs(2))
                .stored_rate(),
            (Some(5), Some(2000))
        );
        assert!(matches!(
            QueueOptions::new("q")
                .rate_limit_per_key(1, Duration::ZERO)
                .check(),
            Err(LimitError::OutOfRange {
                field: Field::RatePeriod,
                ..
            })
        ));
        assert_eq!(
            QueueOptions::new("q")
                .rate_limit_per_key(2, Duration::from_millis(1500))
                .stored_key_rate(),
            (Some(2), Some(1500))
        );
    }

    #[test]
    fn filters_admit_what_they_name() {
        assert!(ClaimFilter::ALL.admits("any", "thing"));
        let filter = ClaimFilter {
            queues: Some(vec!["a".into()]),
            workflows: Some(vec!["w".into()]),
        };
        assert!(filter.admits("a", "w"));
        assert!(!filter.admits("b", "w"));
        assert!(!filter.admits("a", "v"));
        assert!(
            ClaimFilter {
                queues: Some(vec!["bad name".into()]),
                workflows: None
            }
            .check()
            .is_err()
        );
    }
}
