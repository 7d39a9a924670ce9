//! Flow control (issue #12): priorities and per-key concurrency limits of runs.
//!
//! A run may carry a [`Concurrency`]: a key (a customer, a tenant, an account) and the most
//! runs of that key that may be *running* at once in the namespace, across every worker. The
//! claim enforces it in the database (see the claim policy in the runtime's `transition`
//! module); a run holds its key's slot only while it is running, so a sleeping, paused or
//! pending run holds none. A run's priority (default 0) orders the pending runs a claim
//! takes: higher first, then by `available_at` and `created_at`.

use crate::limits::{self, Field, LimitError};

/// The concurrency key of a run and the most runs of that key running at once.
///
/// ```
/// use tasks_runtime::flow::Concurrency;
///
/// // At most two runs of customer 7 execute at once, however many workers there are.
/// let per_customer = Concurrency::new("customer-7", 2);
/// assert_eq!(per_customer.key(), "customer-7");
/// assert_eq!(per_customer.limit(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Concurrency {
    key: String,
    limit: u32,
}

impl Concurrency {
    /// At most `limit` runs of `key` running at once. The values are checked by
    /// [`Concurrency::check`] (and by every store before writing): the key against
    /// [`limits::MAX_CONCURRENCY_KEY_BYTES`], the limit in 1..=[`limits::MAX_CONCURRENCY_LIMIT`].
    pub fn new(key: impl Into<String>, limit: u32) -> Self {
        Concurrency {
            key: key.into(),
            limit,
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The most runs of the key running at once.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The limit as stored (checked to fit by [`Concurrency::check`]).
    pub(crate) fn stored_limit(&self) -> i32 {
        i32::try_from(self.limit).unwrap_or(i32::MAX)
    }

    /// Checks the key and the limit against the [`limits`].
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_text(
            Field::ConcurrencyKey,
            &self.key,
            limits::MAX_CONCURRENCY_KEY_BYTES,
        )?;
        if self.limit == 0 || self.limit > limits::MAX_CONCURRENCY_LIMIT {
            return Err(LimitError::OutOfRange {
                field: Field::ConcurrencyLimit,
                value: i64::from(self.limit),
                min: 1,
                max: i64::from(limits::MAX_CONCURRENCY_LIMIT),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(Concurrency::new("a", 1).check().is_ok());
        assert!(matches!(
            Concurrency::new("a", 0).check(),
            Err(LimitError::OutOfRange {
                field: Field::ConcurrencyLimit,
                ..
            })
        ));
        assert!(matches!(
            Concurrency::new("a", u32::MAX).check(),
            Err(LimitError::OutOfRange { .. })
        ));
        assert!(matches!(
            Concurrency::new("a\0", 1).check(),
            Err(LimitError::Nul { .. })
        ));
        assert!(matches!(
            Concurrency::new("k".repeat(513), 1).check(),
            Err(LimitError::TooLong { .. })
        ));
    }
}
