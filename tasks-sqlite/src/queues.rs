//! Named queues on SQLite: the SQL of the queue methods of [`Store`](tasks_core::Store), and the
//! queue limits a claim reads under the write lock.

use crate::{SqliteStore, Write, rows};
use async_trait::async_trait;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::queue::{Queue, QueueOptions};
use tasks_core::store::{QueueStore, check};
use tasks_core::transition::{RateWindow, queue_slots_held};

/// Columns of `tasks_queues`, in the order of [`QueueRow`].
const QUEUE_COLUMNS: &str = "name, concurrency, rate_limit, rate_period_ms, key_rate_limit, \
    key_rate_period_ms, key_concurrency, window_start, window_starts, created_at, updated_at";

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
struct QueueRow {
    name: String,
    concurrency: Option<i64>,
    rate_limit: Option<i64>,
    rate_period_ms: Option<i64>,
    key_rate_limit: Option<i64>,
    key_rate_period_ms: Option<i64>,
    key_concurrency: Option<i64>,
    window_start: Option<String>,
    window_starts: i64,
    created_at: String,
    updated_at: String,
}
);

impl QueueRow {
    fn into_queue(self, operation: Operation) -> StoreResult<Queue> {
        Ok(Queue {
            name: self.name,
            concurrency: self.concurrency.map(|n| u32::try_from(n).unwrap_or(0)),
            rate_limit: Queue::rate_from_row(self.rate_limit, self.rate_period_ms),
            key_rate_limit: Queue::rate_from_row(self.key_rate_limit, self.key_rate_period_ms),
            key_concurrency: self.key_concurrency.map(|n| u32::try_from(n).unwrap_or(0)),
            window_start: self
                .window_start
                .map(|at| rows::parse_ts(&at, operation))
                .transpose()?,
            window_starts: u32::try_from(self.window_starts).unwrap_or(0),
            created_at: rows::parse_ts(&self.created_at, operation)?,
            updated_at: rows::parse_ts(&self.updated_at, operation)?,
        })
    }
}

/// A queue with a limit, as a claim sees it under the write lock.
#[derive(Debug, serde::Serialize)]
pub(super) struct LimitedQueue {
    /// The queue's name.
    pub(super) queue: String,
    /// Its concurrency limit.
    pub(super) concurrency: Option<i64>,
    /// The slots its running runs hold (0 without a concurrency limit).
    pub(super) held: i64,
    /// The starts its rate window has left (`None`: no rate limit).
    pub(super) starts_left: Option<i64>,
    /// Its rate limit per key: the number (`None`: no such limit)...
    pub(super) key_rate: Option<i64>,
    /// ...and the instant a key's window must have opened after to be still open (the
    /// transaction's time minus the period), as stored text.
    pub(super) key_since: Option<String>,
    /// Its concurrency limit per key (`None`: no such limit).
    pub(super) key_concurrency: Option<i64>,
    /// Its rate limit and window, to count the claim's starts.
    #[serde(skip)]
    pub(super) rate: Option<(tasks_core::queue::RateLimit, RateWindow)>,
    /// Its rate limit per key, to count the claim's starts of each key.
    #[serde(skip)]
    pub(super) key_limit: Option<tasks_core::queue::RateLimit>,
}

impl SqliteStore {
    /// The namespace's queues with a limit, with their held slots and the starts their rate
    /// windows have left at the transaction's time.
    pub(super) async fn limited_queues(
        &self,
        write: &mut Write<'_>,
        operation: Operation,
    ) -> StoreResult<Vec<LimitedQueue>> {
        let sql = format!(
            "SELECT {QUEUE_COLUMNS} FROM tasks_queues q
              WHERE q.namespace = ?1
                AND (q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                     OR q.key_rate_limit IS NOT NULL OR q.key_concurrency IS NOT NULL)"
        );
        let queues: Vec<QueueRow> = sqlx::query_as(&sql)
            .bind(&*self.namespace)
            .fetch_all(write.conn())
            .await
            .map_err(db(operation))?;
        let now = write.instant();
        let mut limited = Vec::with_capacity(queues.len());
        for row in queues {
            let queue = row.into_queue(operation)?;
            let held = match queue.concurrency {
                Some(_) => {
                    let sql = queue_slots_held("tasks_workflow_runs", "?1", "?2");
                    sqlx::query_scalar::<_, i64>(&sql)
                        .bind(&*self.namespace)
                        .bind(&queue.name)
                        .fetch_one(write.conn())
                        .await
                        .map_err(db(operation))?
                }
                None => 0,
            };
            let rate = queue.rate_limit.map(|limit| {
                (
                    limit,
                    RateWindow {
                        start: queue.window_start,
                        starts: queue.window_starts,
                    },
                )
            });
            let key_since = queue.key_rate_limit.map(|limit| {
                chrono::Duration::from_std(limit.period)
                    .ok()
                    .and_then(|period| now.checked_sub_signed(period))
                    .map_or_else(
                        || rows::ts_bound(tasks_core::limits::EARLIEST),
                        rows::ts_bound,
                    )
            });
            limited.push(LimitedQueue {
                key_rate: queue.key_rate_limit.map(|limit| i64::from(limit.starts)),
                key_since,
                key_limit: queue.key_rate_limit,
                key_concurrency: queue.key_concurrency.map(i64::from),
                starts_left: rate
                    .as_ref()
                    .map(|(limit, window)| i64::from(window.starts_left(limit, now))),
                queue: queue.name,
                concurrency: queue.concurrency.map(i64::from),
                held,
                rate,
            });
        }
        Ok(limited)
    }

    /// Counts `started` starts of `queue` in its rate window, at the transaction's time.
    pub(super) async fn count_starts(
        &self,
        write: &mut Write<'_>,
        queue: &LimitedQueue,
        started: u32,
        operation: Operation,
    ) -> StoreResult<()> {
        let Some((limit, window)) = &queue.rate else {
            return Ok(());
        };
        let after = window.after(limit, write.instant(), started);
        if after == *window {
            return Ok(());
        }
        sqlx::query(
            "UPDATE tasks_queues SET window_start = ?3, window_starts = ?4
              WHERE namespace = ?1 AND name = ?2",
        )
        .bind(&*self.namespace)
        .bind(&queue.queue)
        .bind(after.start.map(rows::ts_bound))
        .bind(i64::from(after.starts))
        .execute(write.conn())
        .await
        .map_err(db(operation))?;
        Ok(())
    }

    /// Counts the starts of keys that this claim (at the transaction's time) made in queues
    /// with a rate limit per key, in each key's window.
    pub(super) async fn count_key_starts(
        &self,
        write: &mut Write<'_>,
        limited: &[LimitedQueue],
        claimed: &[uuid::Uuid],
        operation: Operation,
    ) -> StoreResult<()> {
        let rated: Vec<&LimitedQueue> = limited
            .iter()
            .filter(|queue| queue.key_limit.is_some())
            .collect();
        if rated.is_empty() || claimed.is_empty() {
            return Ok(());
        }
        let ids =
            serde_json::Value::from(claimed.iter().map(|id| rows::id(*id)).collect::<Vec<_>>())
                .to_string();
        let started: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT concurrency_key, queue, count(*) FROM tasks_workflow_runs
              WHERE namespace = ?1 AND id IN (SELECT value FROM json_each(?2))
                AND started_at = ?3 AND concurrency_key IS NOT NULL
              GROUP BY concurrency_key, queue",
        )
        .bind(&*self.namespace)
        .bind(ids)
        .bind(write.now())
        .fetch_all(write.conn())
        .await
        .map_err(db(operation))?;
        let now = write.instant();
        for (key, queue, count) in started {
            let Some(limit) = rated
                .iter()
                .find(|rated| rated.queue == queue)
                .and_then(|rated| rated.key_limit)
            else {
                continue;
            };
            let current: Option<(String, i64)> = sqlx::query_as(
                "SELECT window_start, window_starts FROM tasks_key_windows
                  WHERE namespace = ?1 AND concurrency_key = ?2",
            )
            .bind(&*self.namespace)
            .bind(&key)
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
            let window = match current {
                Some((start, starts)) => RateWindow {
                    start: Some(rows::parse_ts(&start, operation)?),
                    starts: u32::try_from(starts).unwrap_or(0),
                },
                None => RateWindow {
                    start: None,
                    starts: 0,
                },
            };
            let after = window.after(&limit, now, u32::try_from(count).unwrap_or(u32::MAX));
            let Some(start) = after.start else {
                continue;
            };
            sqlx::query(
                "INSERT INTO tasks_key_windows (namespace, concurrency_key, window_start, window_starts)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (namespace, concurrency_key) DO UPDATE
                    SET window_start = excluded.window_start, window_starts = excluded.window_starts",
            )
            .bind(&*self.namespace)
            .bind(&key)
            .bind(rows::ts_bound(start))
            .bind(i64::from(after.starts))
            .execute(write.conn())
            .await
            .map_err(db(operation))?;
        }
        Ok(())
    }
}

#[async_trait]
impl QueueStore for SqliteStore {
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        const OPERATION: Operation = Operation::PutQueue;
        check::put_queue(&self.namespace, options)?;
        let (rate_limit, rate_period_ms) = options.stored_rate();
        let (key_rate_limit, key_rate_period_ms) = options.stored_key_rate();
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let sql = format!(
            "INSERT INTO tasks_queues
                 (namespace, name, concurrency, rate_limit, rate_period_ms, key_rate_limit,
                  key_rate_period_ms, key_concurrency, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?8, ?9, ?6, ?6)
             ON CONFLICT (namespace, name) DO UPDATE
                SET concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
                    rate_period_ms = excluded.rate_period_ms,
                    key_rate_limit = excluded.key_rate_limit,
                    key_rate_period_ms = excluded.key_rate_period_ms,
                    key_concurrency = excluded.key_concurrency,
                    updated_at = excluded.updated_at
          RETURNING {QUEUE_COLUMNS}"
        );
        let row: QueueRow = sqlx::query_as(&sql)
            .bind(&*self.namespace)
            .bind(options.name())
            .bind(options.stored_concurrency())
            .bind(rate_limit)
            .bind(rate_period_ms)
            .bind(&now)
            .bind(key_rate_limit)
            .bind(key_rate_period_ms)
            .bind(options.stored_key_concurrency())
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?;
        write.commit().await?;
        row.into_queue(OPERATION)
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        const OPERATION: Operation = Operation::GetQueue;
        check::queue_name(name)?;
        let sql =
            format!("SELECT {QUEUE_COLUMNS} FROM tasks_queues WHERE namespace = ?1 AND name = ?2");
        sqlx::query_as::<_, QueueRow>(&sql)
            .bind(&*self.namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_queue(OPERATION))
            .transpose()
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        const OPERATION: Operation = Operation::GetQueue;
        let sql =
            format!("SELECT {QUEUE_COLUMNS} FROM tasks_queues WHERE namespace = ?1 ORDER BY name");
        sqlx::query_as::<_, QueueRow>(&sql)
            .bind(&*self.namespace)
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .into_iter()
            .map(|row| row.into_queue(OPERATION))
            .collect()
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        const OPERATION: Operation = Operation::DeleteQueue;
        check::queue_name(name)?;
        let mut write = self.begin_write(OPERATION).await?;
        let deleted = sqlx::query("DELETE FROM tasks_queues WHERE namespace = ?1 AND name = ?2")
            .bind(&*self.namespace)
            .bind(name)
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?
            .rows_affected();
        write.commit().await?;
        if deleted == 0 {
            return Err(StoreError::QueueNotFound {
                name: name.to_owned(),
            });
        }
        Ok(())
    }
}
