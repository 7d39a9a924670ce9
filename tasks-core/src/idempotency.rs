//! Idempotency scopes: how long a run holds its idempotency key.
//!
//! A key is unique per namespace and workflow name (a unique index). A run started with a
//! scope other than [`IdempotencyScope::ForEver`] records its scope (and, for a time to
//! live, when the key expires); a later start of the same key first releases the key from
//! the run that holds it when that run's scope has lapsed (one condition, the same
//! condition in both stores), then inserts as before: the insert either takes the key or
//! finds it held and hands back the holder. Releasing only ever touches a key whose scope
//! has lapsed, so it needs no transaction with the insert: of concurrent starts, one
//! releases, and every insert then meets the unique index, which lets exactly one through.

use std::time::Duration;

use crate::limits::{self, Field, LimitError};
use crate::model::RunStatus;
use chrono::{DateTime, Utc};

/// How long a run holds its idempotency key: while it holds it, a start with the same
/// workflow name and key returns that run instead of creating one.
///
/// A start chooses it with its key (`StartOptions::idempotency_scope` of the engine):
///
/// ```
/// use std::time::Duration;
/// use tasks_core::IdempotencyScope;
///
/// // One sync per account at a time; a new one may start once the last has finished.
/// let one_at_a_time = IdempotencyScope::WhileActive;
/// // At most one digest per hour and user.
/// let hourly = IdempotencyScope::Ttl(Duration::from_secs(3600));
/// # let _ = (one_at_a_time, hourly);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IdempotencyScope {
    /// For ever: the key stays with its run, whatever happens to the run (the default).
    #[default]
    ForEver,
    /// While the run is live (pending, running, sleeping or paused): once it has completed,
    /// failed or been canceled, a start with the key creates a new run (singleton
    /// behaviour). A finished run that is retried (`Client::retry`)
    /// holds its key again unless a newer run took it meanwhile.
    WhileActive,
    /// For this long from the run's creation (by the store's clock), whatever the run's
    /// status: then a start with the key creates a new run. At least 1 ms and at most
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION).
    Ttl(Duration),
}

/// The stored `idempotency_scope` of a run holding its key while it is live.
pub const WHILE_ACTIVE: &str = "while_active";
/// The stored `idempotency_scope` of a run holding its key until `idempotency_expires_at`.
pub const TTL: &str = "ttl";

/// The statuses in which a run no longer holds a [`IdempotencyScope::WhileActive`] key.
const FINISHED: &[RunStatus] = &[RunStatus::Completed, RunStatus::Failed, RunStatus::Canceled];

impl IdempotencyScope {
    /// Checks the time to live: at least 1 ms, at most
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION).
    pub fn check(&self) -> Result<(), LimitError> {
        if let IdempotencyScope::Ttl(ttl) = *self {
            limits::check_duration(Field::IdempotencyTtl, ttl)?;
            if ttl.as_millis() == 0 {
                return Err(LimitError::OutOfRange {
                    field: Field::IdempotencyTtl,
                    value: 0,
                    min: 1,
                    max: i64::try_from(limits::MAX_DURATION.as_millis()).unwrap_or(i64::MAX),
                });
            }
        }
        Ok(())
    }

    /// What is stored with the run: its scope's name (`None` for ever) and, for a time to
    /// live, its length in milliseconds.
    pub fn stored(&self) -> (Option<&'static str>, Option<i64>) {
        match *self {
            IdempotencyScope::ForEver => (None, None),
            IdempotencyScope::WhileActive => (Some(WHILE_ACTIVE), None),
            IdempotencyScope::Ttl(ttl) => (
                Some(TTL),
                Some(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
            ),
        }
    }
}

/// The condition under which the run `{alias}` no longer holds its key, with `now` the
/// store's expression for the current instant (a bound parameter or `now()`).
pub fn lapsed(alias: &str, now: &str) -> String {
    format!(
        "(({alias}idempotency_scope = '{WHILE_ACTIVE}' AND {finished})
          OR ({alias}idempotency_scope = '{TTL}' AND {alias}idempotency_expires_at <= {now}))",
        finished = crate::transition::status_in(alias, FINISHED),
    )
}

/// The statement that releases a lapsed key, run before the insert of a new run with that
/// key: on the table `runs`, with the namespace, workflow name and key bound as `p1`, `p2`,
/// `p3` and `now` the store's current instant. The released run keeps its key in
/// `released_idempotency_key`, for the record.
pub fn release_sql(runs: &str, p1: &str, p2: &str, p3: &str, now: &str) -> String {
    format!(
        "UPDATE {runs} SET released_idempotency_key = idempotency_key, idempotency_key = NULL
          WHERE namespace = {p1} AND workflow_name = {p2} AND idempotency_key = {p3}
            AND {lapsed}",
        lapsed = lapsed("", now),
    )
}

/// How long a stored run holds its idempotency key: its [`IdempotencyScope`] with the
/// instant a time to live ends (by the store's clock, from the run's creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHold {
    /// For ever (also a run without a key, and a scope a store does not know: the safe
    /// side).
    ForEver,
    /// While the run is live.
    WhileActive,
    /// Until this instant.
    Until(DateTime<Utc>),
}

impl KeyHold {
    /// Whether a run in `status` no longer holds its key at `now`: the rule [`lapsed`]
    /// renders in SQL. A start with a lapsed key releases it ([`release_sql`]) and creates a
    /// new run.
    pub fn lapsed(&self, status: RunStatus, now: DateTime<Utc>) -> bool {
        match *self {
            KeyHold::ForEver => false,
            KeyHold::WhileActive => FINISHED.contains(&status),
            KeyHold::Until(expires_at) => expires_at <= now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_checked() {
        assert!(
            IdempotencyScope::Ttl(Duration::from_millis(1))
                .check()
                .is_ok()
        );
        assert!(IdempotencyScope::Ttl(Duration::ZERO).check().is_err());
        assert!(
            IdempotencyScope::Ttl(Duration::from_micros(999))
                .check()
                .is_err()
        );
        let too_long = limits::MAX_DURATION + Duration::from_secs(1);
        assert!(IdempotencyScope::Ttl(too_long).check().is_err());
        assert!(IdempotencyScope::WhileActive.check().is_ok());
    }

    #[test]
    fn the_release_names_only_our_own_constants() {
        let sql = release_sql("t", "$1", "$2", "$3", "now()");
        assert!(
            sql.contains("status IN ('completed', 'failed', 'canceled')"),
            "{sql}"
        );
        assert!(sql.contains("idempotency_expires_at <= now()"), "{sql}");
    }

    #[test]
    fn keys_lapse_by_their_scope() {
        let now = Utc::now();
        for status in RunStatus::ALL {
            assert!(!KeyHold::ForEver.lapsed(status, now));
            assert_eq!(
                KeyHold::WhileActive.lapsed(status, now),
                status.is_terminal()
            );
        }
        assert!(KeyHold::Until(now).lapsed(RunStatus::Pending, now));
        assert!(
            !KeyHold::Until(now + chrono::TimeDelta::milliseconds(1))
                .lapsed(RunStatus::Completed, now)
        );
    }
}
