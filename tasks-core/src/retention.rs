//! Retention: deleting terminal runs by status and age, with everything that
//! belongs to them, in bounded batches that are safe while workers run.
//!
//! [`RetentionStore::purge_runs`] deletes one batch: at most [`PurgeRuns::batch_size`] completed,
//! failed or canceled runs of the store's namespace that finished before the cutoff, with
//! their step attempts and events, and clears the links other runs keep to them (a fork's
//! `forked_from_run_id`, a parent step's child run, a child run's parent step). Each batch is
//! one short transaction; `Client::purge` and a worker's
//! retention (`WorkerBuilder::retention`) repeat batches until one comes back short.
//!
//! A worker fleet purges once per period between them, not once per worker: before each
//! periodic purge a worker takes the namespace's turn with [`RetentionStore::take_retention_turn`],
//! which only one worker wins per period.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{StoreError, StoreResult};
use crate::limits::{self, Field, LimitError};
use crate::model::RunStatus;

/// The batch size of a purge that sets none.
pub const DEFAULT_PURGE_BATCH: u32 = 1_000;

/// The largest batch a purge accepts: a batch is one transaction, which should stay short.
pub const MAX_PURGE_BATCH: u32 = 10_000;

/// How often a worker with retention (`WorkerBuilder::retention`) purges, unless
/// `WorkerBuilder::retention_interval` says
/// otherwise.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(60);

/// Which finished runs a purge deletes: those finished before an instant, or longer ago than
/// an age by the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishedBefore {
    /// Runs whose `finished_at` is strictly before this instant.
    Instant(DateTime<Utc>),
    /// Runs whose `finished_at` is strictly before the store's clock minus this age (at
    /// millisecond precision). Zero selects every finished run.
    Age(Duration),
}

/// Parameters of [`RetentionStore::purge_runs`] and `Client::purge`.
///
/// ```
/// use std::time::Duration;
/// use tasks_core::RunStatus;
/// use tasks_core::retention::PurgeRuns;
///
/// // Failed runs that finished more than 30 days ago, 500 per transaction.
/// let purge = PurgeRuns::older_than(Duration::from_secs(30 * 24 * 3600))
///     .statuses([RunStatus::Failed])
///     .batch_size(500);
/// # assert_eq!(purge.batch_size, 500);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRuns {
    /// Delete runs in any of these statuses; empty means every terminal status (completed,
    /// failed and canceled). A live status is refused ([`StoreError::NotTerminal`]).
    pub statuses: Vec<RunStatus>,
    /// The age filter.
    pub finished_before: FinishedBefore,
    /// At most this many runs per batch, in `1..=`[`MAX_PURGE_BATCH`] (default
    /// [`DEFAULT_PURGE_BATCH`]).
    pub batch_size: u32,
}

impl PurgeRuns {
    /// Terminal runs that finished more than `age` ago, by the store's clock.
    pub fn older_than(age: Duration) -> Self {
        PurgeRuns {
            statuses: Vec::new(),
            finished_before: FinishedBefore::Age(age),
            batch_size: DEFAULT_PURGE_BATCH,
        }
    }

    /// Terminal runs that finished before `at`.
    pub fn finished_before(at: DateTime<Utc>) -> Self {
        PurgeRuns {
            finished_before: FinishedBefore::Instant(at),
            ..PurgeRuns::older_than(Duration::ZERO)
        }
    }

    /// Only runs in these statuses (each must be terminal).
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = RunStatus>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// At most `batch_size` runs per transaction.
    pub fn batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Checks the namespace, the statuses (terminal only: [`StoreError::NotTerminal`]), the batch
    /// size and the cutoff against the [`limits`]. A store reaches it through its operation's
    /// function in [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> StoreResult<()> {
        limits::check_namespace(namespace)?;
        if let Some(status) = self.statuses.iter().find(|status| !status.is_terminal()) {
            return Err(StoreError::NotTerminal { status: *status });
        }
        if !(1..=MAX_PURGE_BATCH).contains(&self.batch_size) {
            return Err(LimitError::OutOfRange {
                field: Field::BatchSize,
                value: i64::from(self.batch_size),
                min: 1,
                max: i64::from(MAX_PURGE_BATCH),
            }
            .into());
        }
        match self.finished_before {
            FinishedBefore::Instant(at) => limits::check_time(Field::FinishedBefore, at)?,
            FinishedBefore::Age(age) => limits::check_duration(Field::PurgeAge, age)?,
        }
        Ok(())
    }

    /// The statuses a batch deletes: those asked for, or every terminal one.
    pub fn selected_statuses(&self) -> &[RunStatus] {
        if self.statuses.is_empty() {
            crate::transition::PURGE.from
        } else {
            &self.statuses
        }
    }
}

/// Purging finished runs (see the module docs). A capability: reached through
/// [`Store::retention`](crate::Store::retention).
#[async_trait::async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes one batch of finished runs of this namespace: at most `params.batch_size`
    /// runs in `params`' statuses (every terminal status when none is given) whose
    /// `finished_at` is before the cutoff (an instant, or the store's clock minus an age),
    /// in one short transaction, and returns how many were deleted. With each run go its
    /// step attempts and its events; the links other runs keep to it are cleared in the same
    /// transaction: the `forked_from_run_id` of runs forked from it (their
    /// `forked_from_step` is kept), the child-run columns of a step that started it, and the
    /// parent step of runs its steps started. A caller repeats batches until one returns
    /// fewer than `batch_size` runs.
    ///
    /// Safe while workers run: only completed, failed and canceled runs are ever deleted,
    /// and the delete is fenced on those statuses: a run retried while a purge runs either
    /// is live again and survives, or was deleted first and the retry finds it gone
    /// ([`StoreError::RunNotFound`]). On Postgres a batch
    /// skips rows other transactions hold locked (a retry or fork in progress) instead of
    /// waiting for them, so concurrent purges take disjoint batches; on SQLite a batch holds
    /// the write lock for its one transaction. Deleting announces nothing.
    ///
    /// Errors: [`StoreError::NotTerminal`] for a live status in `params.statuses`,
    /// [`StoreError::Limit`] for a batch size outside `1..=`[`MAX_PURGE_BATCH`]
    /// or a cutoff past the limits; nothing is deleted then.
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64>;

    /// Takes this namespace's retention turn for `worker_id` when it is due: the
    /// namespace's lease row (one per namespace) is written with `worker_id` and its next
    /// turn `every` from now by the store's clock, and its turn counter (from 1) is
    /// returned. Before then every call, from any worker, returns `None` and writes nothing.
    /// Concurrent calls in one period give the turn to one of them. A worker purges only
    /// when it took the turn, so a fleet's periodic purge costs the same whatever its size.
    ///
    /// Errors: [`StoreError::Limit`] for a worker id past the limits or a duration past
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION).
    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>>;
}

/// The turn a namespace's retention lease gives at `now`, given the lease as stored (`None`:
/// the namespace has none yet) as its next turn's instant and its turn counter: the next
/// counter when the turn is due (1 for a namespace without a lease), else `None`.
pub fn next_turn(lease: Option<(DateTime<Utc>, u64)>, now: DateTime<Utc>) -> Option<u64> {
    match lease {
        None => Some(1),
        Some((next_at, turns)) if next_at <= now => Some(turns.saturating_add(1)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_statuses_and_bad_batches_are_refused() {
        for status in [
            RunStatus::Pending,
            RunStatus::Running,
            RunStatus::Sleeping,
            RunStatus::Paused,
        ] {
            let purge = PurgeRuns::older_than(Duration::ZERO).statuses([status]);
            assert!(matches!(
                purge.check("ns"),
                Err(StoreError::NotTerminal { status: s }) if s == status
            ));
        }
        for size in [0, MAX_PURGE_BATCH + 1] {
            assert!(matches!(
                PurgeRuns::older_than(Duration::ZERO)
                    .batch_size(size)
                    .check("ns"),
                Err(StoreError::Limit(LimitError::OutOfRange {
                    field: Field::BatchSize,
                    ..
                }))
            ));
        }
        assert!(matches!(
            PurgeRuns::older_than(limits::MAX_DURATION + Duration::from_secs(1)).check("ns"),
            Err(StoreError::Limit(LimitError::DurationTooLong { .. }))
        ));
        let all = PurgeRuns::finished_before(Utc::now());
        assert!(all.check("ns").is_ok());
        assert_eq!(
            all.selected_statuses(),
            [RunStatus::Completed, RunStatus::Failed, RunStatus::Canceled]
        );
    }

    #[test]
    fn a_turn_is_taken_once_per_period() {
        let now = Utc::now();
        assert_eq!(next_turn(None, now), Some(1));
        assert_eq!(next_turn(Some((now, 3)), now), Some(4));
        assert_eq!(
            next_turn(Some((now, 3)), now - chrono::TimeDelta::seconds(1)),
            None
        );
    }
}
