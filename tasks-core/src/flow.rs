//! Flow control: priorities and per-key concurrency limits of runs.
//!
//! A run may carry a [`Concurrency`]: a key (a customer, a tenant, an account) and the most
//! runs of that key that may be *running* at once in the namespace, across every worker. The
//! claim enforces it in the database (see the claim policy in the runtime's `transition`
//! module); a run holds its key's slot only while it is running, so a sleeping, paused or
//! pending run holds none. A run's priority (default 0) orders the pending runs a claim
//! takes: higher first, then by `available_at` and `created_at`.
//!
//! The key is given with a start (`StartOptions::concurrency_key`) or derived from the
//! input by the workflow's definition ([`DerivedConcurrency`], what
//! `#[workflow(concurrency(key = customer_of, limit = 2))]` declares), on every start path:
//! typed and JSON starts, child starts and schedule slots.
//!

use serde_json::Value;

use crate::limits::{self, Field, LimitError};

/// The concurrency key of a run and the most runs of that key running at once.
///
/// ```
/// use tasks_core::flow::Concurrency;
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
    pub fn stored_limit(&self) -> i32 {
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

/// How a workflow derives the concurrency key of each run from its input: what
/// `#[workflow(concurrency(key = customer_of, limit = 2))]` puts into
/// `WorkflowDefinition::concurrency`.
///
/// Every start of the workflow that gives no key of its own gets `key(input)` with `limit`:
/// typed and JSON starts, child starts, and the runs a schedule fires. The derived key is
/// checked against the [`limits`] like one given with the start (by
/// [`CreateRun::check`](crate::store::CreateRun::check), on every path), so a key with NUL
/// or past [`limits::MAX_CONCURRENCY_KEY_BYTES`] is a [`LimitError`] and nothing is stored.
#[derive(Debug, Clone, Copy)]
pub struct DerivedConcurrency {
    /// The key of a run, from its JSON input. `#[workflow]` decodes the input into the input
    /// type, calls the key function on it and formats the key with `Display`; a panic of the
    /// function is caught and returned as [`DeriveKeyError::Panicked`].
    pub key: fn(&Value) -> Result<String, DeriveKeyError>,
    /// The most runs of one key running at once.
    pub limit: u32,
    /// The key function as written in the attribute (`customer_of`), for messages.
    pub expression: &'static str,
}

impl DerivedConcurrency {
    /// The concurrency of a run of `workflow` (its display name, for the error) with `input`;
    /// not yet checked against the [`limits`] ([`Concurrency::check`] does that).
    pub fn derive(
        &self,
        workflow: &str,
        input: &Value,
    ) -> Result<Concurrency, ConcurrencyKeyError> {
        let key = (self.key)(input).map_err(|source| ConcurrencyKeyError {
            workflow: workflow.to_owned(),
            expression: self.expression,
            source,
        })?;
        Ok(Concurrency::new(key, self.limit))
    }
}

/// Why a key function gave no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveKeyError {
    /// The input does not decode into the workflow's input type.
    #[error("the input does not decode into the workflow's input type: {0}")]
    Input(String),
    /// The key function (or the key's `Display`) panicked; the message is the panic's.
    #[error("the key function panicked: {0}")]
    Panicked(String),
}

/// A run's concurrency key could not be derived from its input; nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot derive the concurrency key of workflow {workflow} with `{expression}`: {source}")]
pub struct ConcurrencyKeyError {
    /// The workflow (`name` or `name@version`).
    pub workflow: String,
    /// The key function as written in the attribute.
    pub expression: &'static str,
    /// Why.
    #[source]
    pub source: DeriveKeyError,
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
