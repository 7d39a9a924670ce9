//! The clock a store reads durable instants from: the system clock, or a virtual clock that
//! a test moves forward.
//!
//! Every durable instant of the SQLite store (`sqlite::SqliteStore`; when a run was created, when
//! its sleep ends, when an event wait times out, when a failed attempt is retried, whether its
//! deadline passed, whether a schedule's slot is due, when a lease or a worker's heartbeat
//! goes stale) is computed from the time its write transaction reads from the store's
//! [`Clock`]. [`Clock::system`] (the default) is the process clock; [`Clock::manual`] is the
//! process clock plus an offset that only [`Clock::advance`] moves, so a test skips past an
//! hour-long durable sleep without waiting an hour (see `tasks::testing`, feature `testing`,
//! which sets this up).
//!
//! The Postgres store always uses the database's `now()`: one clock for
//! every worker on every machine, which a process cannot move. A virtual clock is therefore
//! a SQLite feature.
//!
//! Reading the clock allocates nothing: the system clock is a plain call, a manual one adds
//! an atomically read offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// Where a store reads the current time from. Cloning is cheap; clones of a manual clock
/// share its offset, so advancing one advances all.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// The offset from the system clock in microseconds; `None` for the system clock.
    offset: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The process's system clock (`Utc::now()`), the default.
    pub fn system() -> Self {
        Clock { offset: None }
    }

    /// A virtual clock: the system clock plus an offset, zero at first, that only
    /// [`Clock::advance`] moves. Time keeps passing at the normal rate between advances (so
    /// writes keep their order and leases their meaning); an advance adds a jump.
    pub fn manual() -> Self {
        Clock {
            offset: Some(Arc::new(AtomicI64::new(0))),
        }
    }

    /// Whether this is a [manual](Clock::manual) clock.
    pub fn is_manual(&self) -> bool {
        self.offset.is_some()
    }

    /// The current time of this clock.
    pub fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        match &self.offset {
            None => now,
            Some(offset) => {
                let offset = TimeDelta::microseconds(offset.load(Ordering::Acquire));
                now.checked_add_signed(offset).unwrap_or(now)
            }
        }
    }

    /// How far a manual clock has been advanced in total (zero for the system clock).
    pub fn offset(&self) -> Duration {
        let micros = self
            .offset
            .as_ref()
            .map_or(0, |offset| offset.load(Ordering::Acquire));
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }

    /// Moves a manual clock forward by `by` (to the microsecond). Time never goes back.
    ///
    /// Errors: [`ClockError::NotManual`] on the system clock; [`ClockError::OutOfRange`] when
    /// the total offset would pass [`limits::MAX_DURATION`](crate::limits::MAX_DURATION)
    /// (nothing is changed then).
    pub fn advance(&self, by: Duration) -> Result<(), ClockError> {
        let offset = self.offset.as_ref().ok_or(ClockError::NotManual)?;
        let max = i64::try_from(crate::limits::MAX_DURATION.as_micros()).unwrap_or(i64::MAX);
        let by_micros = i64::try_from(by.as_micros())
            .ok()
            .filter(|micros| *micros <= max)
            .ok_or(ClockError::OutOfRange { by })?;
        offset
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                current.checked_add(by_micros).filter(|total| *total <= max)
            })
            .map(drop)
            .map_err(|_| ClockError::OutOfRange { by })
    }
}

/// Why a [`Clock`] could not be advanced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClockError {
    /// Only a [manual](Clock::manual) clock can be advanced.
    #[error("the system clock cannot be advanced; use Clock::manual()")]
    NotManual,
    /// The clock's total offset would pass `limits::MAX_DURATION`.
    #[error("advancing the clock by {by:?} would take it past the longest supported duration")]
    OutOfRange {
        /// The advance asked for.
        by: Duration,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_jumps_and_its_clones_follow() {
        let clock = Clock::manual();
        let clone = clock.clone();
        let before = Utc::now();
        clock.advance(Duration::from_secs(3600)).unwrap();
        let now = clone.now();
        assert!(now >= before + TimeDelta::hours(1));
        assert!(now < before + TimeDelta::hours(1) + TimeDelta::minutes(1));
        assert_eq!(clone.offset(), Duration::from_secs(3600));
    }

    #[test]
    fn the_system_clock_cannot_be_advanced() {
        let clock = Clock::system();
        assert_eq!(
            clock.advance(Duration::from_secs(1)),
            Err(ClockError::NotManual)
        );
        assert_eq!(clock.offset(), Duration::ZERO);
        assert!(!clock.is_manual());
    }

    #[test]
    fn an_advance_past_the_limit_changes_nothing() {
        let clock = Clock::manual();
        clock.advance(Duration::from_secs(10)).unwrap();
        let too_far = crate::limits::MAX_DURATION;
        assert_eq!(
            clock.advance(too_far),
            Err(ClockError::OutOfRange { by: too_far })
        );
        assert_eq!(clock.offset(), Duration::from_secs(10));
    }
}
