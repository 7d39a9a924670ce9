//! What an operator's overview reads ([`OverviewStore`]): the backlog of each queue, the
//! workers and their heartbeats, and the runs that finished in a recent window. Every read
//! is bounded: by a partial index of live runs, by a `LIMIT`, or by a time window over the
//! index of finished runs; none reads the whole history of a namespace.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{StoreError, StoreResult};
use crate::model::RunStatus;

#[cfg(doc)]
use crate::Store;

/// The most rows one overview read returns ([`OverviewStore::queue_backlogs`],
/// [`OverviewStore::list_workers`]).
pub const MAX_OVERVIEW_ROWS: u32 = 1000;

/// The longest window of [`OverviewStore::finished_runs`]: one day.
pub const MAX_FINISHED_SPAN: Duration = Duration::from_secs(24 * 60 * 60);

/// The most buckets of [`OverviewStore::finished_runs`]: one a minute over a day.
pub const MAX_FINISHED_BUCKETS: u32 = 1440;

/// The live runs of one queue: what waits, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueBacklog {
    /// The queue's name.
    pub queue: String,
    /// Pending runs a worker may claim now (their `available_at` has passed).
    pub ready: u64,
    /// Pending runs that may not start yet (delayed, or retrying later).
    pub delayed: u64,
    /// Running runs.
    pub running: u64,
    /// When the longest-waiting ready run became claimable (its `available_at`, or its
    /// creation when it had none): the age of the backlog is the time since.
    pub oldest_ready_at: Option<DateTime<Utc>>,
}

/// A worker as its heartbeat row shows it (see [`LeaseStore::heartbeat`](crate::LeaseStore::heartbeat)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's id.
    pub worker_id: String,
    /// Its last heartbeat, by the store's clock.
    pub beat_at: DateTime<Utc>,
    /// When it is presumed dead unless it beats again.
    pub stale_at: DateTime<Utc>,
    /// Its heartbeat is not stale, by the store's clock when it was read.
    pub live: bool,
    /// The runs it holds running.
    pub running: u64,
}

/// Parameters of [`OverviewStore::finished_runs`]: the window ending now (by the store's
/// clock) of `span`, cut into `buckets` buckets of equal length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedWindow {
    /// The length of the window (at most [`MAX_FINISHED_SPAN`]).
    pub span: Duration,
    /// How many buckets it is cut into (1 to [`MAX_FINISHED_BUCKETS`]).
    pub buckets: u32,
}

impl FinishedWindow {
    /// The last hour, a bucket a minute.
    pub const LAST_HOUR: FinishedWindow = FinishedWindow {
        span: Duration::from_secs(3600),
        buckets: 60,
    };

    /// Checks the span (1 s to [`MAX_FINISHED_SPAN`], a whole number of milliseconds per
    /// bucket) and the number of buckets. A store reaches it through
    /// [`check::finished_runs`](crate::store::check::finished_runs).
    pub fn check(&self) -> StoreResult<()> {
        if self.buckets == 0 || self.buckets > MAX_FINISHED_BUCKETS {
            return Err(StoreError::InvalidArgument(format!(
                "a window has 1 to {MAX_FINISHED_BUCKETS} buckets, not {}",
                self.buckets
            )));
        }
        if self.span < Duration::from_secs(1) || self.span > MAX_FINISHED_SPAN {
            return Err(StoreError::InvalidArgument(format!(
                "a window spans 1 s to {} s, not {:?}",
                MAX_FINISHED_SPAN.as_secs(),
                self.span
            )));
        }
        Ok(())
    }

    /// The length of one bucket in whole milliseconds (at least 1).
    pub fn bucket_ms(&self) -> i64 {
        let span = i64::try_from(self.span.as_millis()).unwrap_or(i64::MAX);
        (span / i64::from(self.buckets.max(1))).max(1)
    }

    /// The window's span in whole milliseconds.
    pub fn span_ms(&self) -> i64 {
        self.bucket_ms() * i64::from(self.buckets)
    }

    /// The finished runs of a window that started at `since`, from a store's rows of
    /// `(bucket index, status, count)`: every bucket in order, zeros included. Rows of an
    /// index outside the window or of a status that is not terminal are left out.
    pub fn finish(
        &self,
        since: DateTime<Utc>,
        rows: impl IntoIterator<Item = (i64, String, i64)>,
    ) -> FinishedRuns {
        let bucket = Duration::from_millis(u64::try_from(self.bucket_ms()).unwrap_or(1));
        let mut buckets: Vec<FinishedBucket> = (0..self.buckets)
            .map(|index| FinishedBucket {
                start: since + chrono::Duration::milliseconds(self.bucket_ms() * i64::from(index)),
                completed: 0,
                failed: 0,
                canceled: 0,
            })
            .collect();
        for (index, status, count) in rows {
            let Some(slot) = usize::try_from(index)
                .ok()
                .and_then(|index| buckets.get_mut(index))
            else {
                continue;
            };
            let count = u64::try_from(count).unwrap_or(0);
            match status.parse::<RunStatus>() {
                Ok(RunStatus::Completed) => slot.completed += count,
                Ok(RunStatus::Failed) => slot.failed += count,
                Ok(RunStatus::Canceled) => slot.canceled += count,
                _ => {}
            }
        }
        FinishedRuns {
            since,
            bucket,
            buckets,
        }
    }
}

/// The runs that finished in one bucket of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedBucket {
    /// The start of the bucket.
    pub start: DateTime<Utc>,
    /// Runs completed in it.
    pub completed: u64,
    /// Runs failed in it (for good: a failure that retries leaves the run pending).
    pub failed: u64,
    /// Runs canceled in it.
    pub canceled: u64,
}

/// What [`OverviewStore::finished_runs`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRuns {
    /// The start of the window, by the store's clock.
    pub since: DateTime<Utc>,
    /// The length of each bucket.
    pub bucket: Duration,
    /// Every bucket of the window, oldest first.
    pub buckets: Vec<FinishedBucket>,
}

impl FinishedRuns {
    /// The totals of the window: completed, failed and canceled runs.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.buckets.iter().fold((0, 0, 0), |(c, f, x), bucket| {
            (c + bucket.completed, f + bucket.failed, x + bucket.canceled)
        })
    }
}

/// The figures of an operator's overview: queue backlogs, workers, and the runs finished in
/// a recent window. A capability: reached through [`Store::overview`].
///
/// Each method is bounded however many runs the namespace keeps: backlogs read the live
/// runs only (pending and running, through their partial indexes), workers read the
/// heartbeat rows and each worker's running runs, and finished runs read the index of
/// terminal runs by finishing time over the window only.
#[async_trait::async_trait]
pub trait OverviewStore: Send + Sync {
    /// The backlog of every queue that has pending or running runs, by queue name, at most
    /// `limit` queues (at most [`MAX_OVERVIEW_ROWS`]). A queue whose runs all finished is
    /// not listed, configured or not.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a limit of 0 or past
    /// [`MAX_OVERVIEW_ROWS`], else the database's.
    async fn queue_backlogs(&self, limit: u32) -> StoreResult<Vec<QueueBacklog>>;

    /// The workers with a heartbeat row in this namespace (live, and stale ones not yet
    /// forgotten), live ones first, then by id; at most `limit` (at most
    /// [`MAX_OVERVIEW_ROWS`]).
    ///
    /// Errors: as [`OverviewStore::queue_backlogs`].
    async fn list_workers(&self, limit: u32) -> StoreResult<Vec<WorkerInfo>>;

    /// The runs that finished (completed, failed for good, canceled) in the window of
    /// `window.span` ending now, by the store's clock, counted per bucket.
    ///
    /// Errors: a refused window ([`StoreError::InvalidArgument`], see
    /// [`FinishedWindow::check`]), else the database's.
    async fn finished_runs(&self, window: FinishedWindow) -> StoreResult<FinishedRuns>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_checked_and_cut_into_buckets() {
        assert!(FinishedWindow::LAST_HOUR.check().is_ok());
        assert_eq!(FinishedWindow::LAST_HOUR.bucket_ms(), 60_000);
        let none = FinishedWindow {
            buckets: 0,
            ..FinishedWindow::LAST_HOUR
        };
        assert!(matches!(none.check(), Err(StoreError::InvalidArgument(_))));
        let long = FinishedWindow {
            span: MAX_FINISHED_SPAN + Duration::from_secs(1),
            ..FinishedWindow::LAST_HOUR
        };
        assert!(matches!(long.check(), Err(StoreError::InvalidArgument(_))));
    }

    #[test]
    fn rows_fill_their_buckets_and_others_are_zero() {
        let since = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let runs = FinishedWindow::LAST_HOUR.finish(
            since,
            [
                (0, "completed".to_owned(), 2),
                (0, "failed".to_owned(), 1),
                (59, "canceled".to_owned(), 4),
                (60, "completed".to_owned(), 9),
                (-1, "completed".to_owned(), 9),
                (3, "running".to_owned(), 9),
            ],
        );
        assert_eq!(runs.buckets.len(), 60);
        assert_eq!(runs.buckets[0].completed, 2);
        assert_eq!(runs.buckets[0].failed, 1);
        assert_eq!(runs.buckets[59].canceled, 4);
        assert_eq!(runs.buckets[1].start, since + chrono::Duration::minutes(1));
        assert_eq!(runs.totals(), (2, 1, 4));
    }
}
