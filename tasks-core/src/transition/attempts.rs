//! How a run's attempts are counted (a claim counts one, unless it wakes a sleep; a release
//! gives it back; an operator's retry starts again from zero, [`RETRIED`]) and when a failed
//! attempt gives up for its deadline: pure rules, with their SQL for the stores that apply
//! them in a statement.
//!
//! [`RETRIED`]: super::RETRIED

use chrono::{DateTime, Utc};

use super::runs::CLAIM_DUE;
use super::status_in;
use crate::model::{RunStatus, WorkflowRun};

// Attempt counting.

/// The attempt counter after a claim of a run in `status` whose counter is `attempts`:
/// a claim counts an attempt, except a claim of a sleeping run ([`CLAIM_DUE`]), whose
/// wake-up continues the attempt that slept.
pub fn claimed_attempts(status: RunStatus, attempts: i32) -> i32 {
    if CLAIM_DUE.from.contains(&status) {
        attempts
    } else {
        attempts.saturating_add(1)
    }
}

/// [`claimed_attempts`] in SQL, for the run aliased `alias` (with its dot, or empty).
pub fn claimed_attempts_sql(alias: &str) -> String {
    format!(
        "{alias}attempts + CASE WHEN {} THEN 0 ELSE 1 END",
        status_in(alias, CLAIM_DUE.from)
    )
}

/// The claim epoch after a claim of a run whose epoch is `epoch`: one more, whatever the
/// claim (a start, a wake-up, a takeover); nothing else changes it, so each claim of a run
/// has an epoch of its own, and the [`Holder`](crate::Holder) of an earlier claim never
/// matches a later one.
pub fn claimed_epoch(epoch: i64) -> i64 {
    epoch.saturating_add(1)
}

/// [`claimed_epoch`] in SQL, for the run aliased `alias` (with its dot, or empty).
pub fn claimed_epoch_sql(alias: &str) -> String {
    format!("{alias}claim_epoch + 1")
}

/// `started_at` after a claim at `now`: set by the first claim, kept by every later one
/// (so a rate limit counts only first claims as starts).
pub fn claimed_started_at(
    started_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    started_at.or(Some(now))
}

/// [`claimed_started_at`] in SQL, for the run aliased `alias` (with its dot, or empty),
/// with `now` the claim's clock expression.
pub fn claimed_started_at_sql(alias: &str, now: &str) -> String {
    format!("COALESCE({alias}started_at, {now})")
}

/// Whether the execution a claim just began is the run's first: nothing can have been
/// recorded for it. True when the claim left the counter at one, set `started_at` now
/// (no claim or operator's retry set it before) and the run was not forked (a fork starts
/// with copied history).
pub fn first_execution(run: &WorkflowRun, now: DateTime<Utc>) -> bool {
    run.attempts == 1 && run.started_at == Some(now) && run.forked_from_run_id.is_none()
}

/// [`first_execution`] in SQL, on the claimed row aliased `alias`, with `now` the claim's
/// clock expression.
pub fn first_execution_sql(alias: &str, now: &str) -> String {
    format!(
        "({alias}attempts = 1 AND {alias}started_at = {now} AND {alias}forked_from_run_id IS NULL)"
    )
}

/// The attempt counter after a release: the attempt the claim counted is given back,
/// never below zero.
pub fn released_attempts(attempts: i32) -> i32 {
    attempts.saturating_sub(1).max(0)
}

/// [`released_attempts`] in SQL, in any dialect.
pub const RELEASED_ATTEMPTS_SQL: &str = "CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END";

// The deadline's give-up.

/// Whether a failed attempt fails for good: no retry (`retry_at` `None`, see
/// [`retry_after`](super::retry_after)), or a retry that would start at or after the run's
/// deadline.
pub fn gives_up(retry_at: Option<DateTime<Utc>>, deadline: Option<DateTime<Utc>>) -> bool {
    match retry_at {
        None => true,
        Some(at) => deadline.is_some_and(|deadline| at >= deadline),
    }
}

/// [`gives_up`] in SQL: `retry_at` is the SQL expression of the retry's start (`NULL`: no
/// retry), `deadline` the run's deadline column.
pub fn gives_up_sql(retry_at: &str, deadline: &str) -> String {
    format!("({retry_at} IS NULL OR ({deadline} IS NOT NULL AND {retry_at} >= {deadline}))")
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunStatus::{Pending, Running, Sleeping};

    fn run(status: RunStatus) -> WorkflowRun {
        WorkflowRun::for_tests(status, Some("w".into()))
    }

    #[test]
    fn a_claim_counts_an_attempt_unless_it_wakes_a_sleep() {
        assert_eq!(claimed_attempts(Pending, 0), 1);
        assert_eq!(
            claimed_attempts(Running, 1),
            2,
            "a takeover is a new attempt"
        );
        assert_eq!(claimed_attempts(Sleeping, 1), 1);
        assert_eq!(
            claimed_attempts_sql("wr."),
            "wr.attempts + CASE WHEN wr.status IN ('sleeping') THEN 0 ELSE 1 END"
        );
        assert_eq!(claimed_epoch(0), 1);
        assert_eq!(
            claimed_epoch(7),
            8,
            "every claim, whatever the status it takes"
        );
        assert_eq!(claimed_epoch_sql("wr."), "wr.claim_epoch + 1");
        assert_eq!(released_attempts(1), 0);
        assert_eq!(released_attempts(0), 0);
        assert_eq!(released_attempts(4), 3);
        let now = Utc::now();
        let earlier = now - chrono::TimeDelta::seconds(1);
        assert_eq!(claimed_started_at(None, now), Some(now));
        assert_eq!(claimed_started_at(Some(earlier), now), Some(earlier));
        assert_eq!(
            claimed_started_at_sql("wr.", "now()"),
            "COALESCE(wr.started_at, now())"
        );
        let mut first = run(Running);
        first.attempts = 1;
        first.started_at = Some(now);
        assert!(first_execution(&first, now));
        first.forked_from_run_id = Some(uuid::Uuid::now_v7());
        assert!(!first_execution(&first, now));
        assert!(first_execution_sql("wr.", "now()").starts_with("(wr.attempts = 1 AND"));
    }

    #[test]
    fn a_retry_at_or_after_the_deadline_gives_up() {
        let now = Utc::now();
        let later = now + chrono::TimeDelta::seconds(5);
        assert!(gives_up(None, None));
        assert!(!gives_up(Some(now), None));
        assert!(!gives_up(Some(now), Some(later)));
        assert!(gives_up(Some(later), Some(later)));
        assert!(gives_up(Some(later), Some(now)));
        assert_eq!(
            gives_up_sql("$5", "deadline_at"),
            "($5 IS NULL OR (deadline_at IS NOT NULL AND $5 >= deadline_at))"
        );
    }
}
