//! Named queues on Postgres: the SQL of the queue methods of [`Store`](tasks_core::Store). The
//! claim reads the rows written here (see the claim statement in the parent module).

use crate::PgStore;
use crate::reconnect::{db, retrying};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::queue::{Queue, QueueOptions};
use tasks_core::store::{QueueStore, check};

/// Columns of `queues`, in the order of [`QueueRow`].
const QUEUE_COLUMNS: &str = "name, concurrency, rate_limit, rate_period_ms, key_rate_limit, \
    key_rate_period_ms, key_concurrency, window_start, window_starts, created_at, updated_at";

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
struct QueueRow {
    name: String,
    concurrency: Option<i32>,
    rate_limit: Option<i32>,
    rate_period_ms: Option<i64>,
    key_rate_limit: Option<i32>,
    key_rate_period_ms: Option<i64>,
    key_concurrency: Option<i32>,
    window_start: Option<DateTime<Utc>>,
    window_starts: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}
);

impl From<QueueRow> for Queue {
    fn from(row: QueueRow) -> Self {
        Queue {
            name: row.name,
            concurrency: row.concurrency.map(|n| u32::try_from(n).unwrap_or(0)),
            rate_limit: Queue::rate_from_row(row.rate_limit.map(i64::from), row.rate_period_ms),
            key_rate_limit: Queue::rate_from_row(
                row.key_rate_limit.map(i64::from),
                row.key_rate_period_ms,
            ),
            key_concurrency: row.key_concurrency.map(|n| u32::try_from(n).unwrap_or(0)),
            window_start: row.window_start,
            window_starts: u32::try_from(row.window_starts).unwrap_or(0),
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[async_trait]
impl QueueStore for PgStore {
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        check::put_queue(&self.namespace, options)?; // An upsert of the same values: tried again on a broken connection, like a read.

        retrying(Operation::PutQueue, move || async move {
            const OPERATION: Operation = Operation::PutQueue;
            let (rate_limit, rate_period_ms) = options.stored_rate();
            let (key_rate_limit, key_rate_period_ms) = options.stored_key_rate();
            let sql = format!(
                "INSERT INTO tasks.queues
                 (namespace, name, concurrency, rate_limit, rate_period_ms, key_rate_limit,
                  key_rate_period_ms, key_concurrency, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now(), now())
             ON CONFLICT (namespace, name) DO UPDATE
                SET concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
                    rate_period_ms = excluded.rate_period_ms,
                    key_rate_limit = excluded.key_rate_limit,
                    key_rate_period_ms = excluded.key_rate_period_ms,
                    key_concurrency = excluded.key_concurrency, updated_at = now(),
                    -- A claim whose snapshot read the former limits takes nothing of the
                    -- queue (its row changed since), like after a concurrent claim.
                    claims = tasks.queues.claims + 1
          RETURNING {QUEUE_COLUMNS}"
            );
            let row: QueueRow = sqlx::query_as(&sql)
                .bind(&*self.namespace)
                .bind(options.name())
                .bind(options.stored_concurrency())
                .bind(rate_limit)
                .bind(rate_period_ms)
                .bind(key_rate_limit)
                .bind(key_rate_period_ms)
                .bind(options.stored_key_concurrency())
                .fetch_one(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(row.into())
        })
        .await
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        check::queue_name(name)?;
        retrying(Operation::GetQueue, move || async move {
            const OPERATION: Operation = Operation::GetQueue;
            let sql = format!(
                "SELECT {QUEUE_COLUMNS} FROM tasks.queues WHERE namespace = $1 AND name = $2"
            );
            let row: Option<QueueRow> = sqlx::query_as(&sql)
                .bind(&*self.namespace)
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(row.map(Queue::from))
        })
        .await
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        retrying(Operation::GetQueue, move || async move {
            const OPERATION: Operation = Operation::GetQueue;
            let sql = format!(
                "SELECT {QUEUE_COLUMNS} FROM tasks.queues WHERE namespace = $1 ORDER BY name"
            );
            let rows: Vec<QueueRow> = sqlx::query_as(&sql)
                .bind(&*self.namespace)
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(rows.into_iter().map(Queue::from).collect())
        })
        .await
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        const OPERATION: Operation = Operation::DeleteQueue;
        check::queue_name(name)?;
        let deleted = sqlx::query("DELETE FROM tasks.queues WHERE namespace = $1 AND name = $2")
            .bind(&*self.namespace)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::QueueNotFound {
                name: name.to_owned(),
            });
        }
        Ok(())
    }
}
