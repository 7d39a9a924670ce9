//! The overview's figures on Postgres: the SQL of [`OverviewStore`]. Each statement reads
//! live runs through their partial indexes, heartbeat rows, or the index of terminal runs by
//! finishing time over a window: none reads the namespace's whole history.

use crate::PgStore;
use crate::reconnect::{db, retrying};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tasks_core::error::{Operation, StoreResult};
use tasks_core::store::check;
use tasks_core::store::overview::{
    FinishedRuns, FinishedWindow, OverviewStore, QueueBacklog, WorkerInfo,
};

/// A count as the contract's `u64`.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

type BacklogRow = (String, i64, i64, i64, Option<DateTime<Utc>>);
type WorkerRow = (String, DateTime<Utc>, DateTime<Utc>, bool, i64);

#[async_trait]
impl OverviewStore for PgStore {
    async fn queue_backlogs(&self, limit: u32) -> StoreResult<Vec<QueueBacklog>> {
        check::overview_rows(limit)?;
        retrying(Operation::QueueBacklogs, move || async move {
            // Pending runs through `workflow_runs_claim_pending`, running ones through
            // `workflow_runs_claim_due`: the live runs only.
            let rows: Vec<BacklogRow> = sqlx::query_as(
                "SELECT queue,
                        count(*) FILTER (WHERE status = 'pending'
                            AND coalesce(available_at, created_at) <= now()),
                        count(*) FILTER (WHERE status = 'pending'
                            AND coalesce(available_at, created_at) > now()),
                        count(*) FILTER (WHERE status = 'running'),
                        min(coalesce(available_at, created_at)) FILTER (WHERE status = 'pending'
                            AND coalesce(available_at, created_at) <= now())
                   FROM tasks.workflow_runs
                  WHERE namespace = $1 AND status IN ('pending', 'running')
                  GROUP BY queue ORDER BY queue LIMIT $2",
            )
            .bind(&*self.namespace)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db(Operation::QueueBacklogs))?;
            Ok(rows
                .into_iter()
                .map(
                    |(queue, ready, delayed, running, oldest_ready_at)| QueueBacklog {
                        queue,
                        ready: count(ready),
                        delayed: count(delayed),
                        running: count(running),
                        oldest_ready_at,
                    },
                )
                .collect())
        })
        .await
    }

    async fn list_workers(&self, limit: u32) -> StoreResult<Vec<WorkerInfo>> {
        check::overview_rows(limit)?;
        retrying(Operation::ListWorkers, move || async move {
            // Each worker's running runs through `workflow_runs_running_worker`.
            let rows: Vec<WorkerRow> = sqlx::query_as(
                "SELECT w.worker_id, w.beat_at, w.stale_at, w.stale_at > now(),
                        (SELECT count(*) FROM tasks.workflow_runs r
                          WHERE r.namespace = w.namespace AND r.worker_id = w.worker_id
                            AND r.status = 'running')
                   FROM tasks.workers w
                  WHERE w.namespace = $1
                  ORDER BY w.stale_at > now() DESC, w.worker_id LIMIT $2",
            )
            .bind(&*self.namespace)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db(Operation::ListWorkers))?;
            Ok(rows
                .into_iter()
                .map(|(worker_id, beat_at, stale_at, live, running)| WorkerInfo {
                    worker_id,
                    beat_at,
                    stale_at,
                    live,
                    running: count(running),
                })
                .collect())
        })
        .await
    }

    async fn finished_runs(&self, window: FinishedWindow) -> StoreResult<FinishedRuns> {
        check::finished_runs(&window)?;
        retrying(Operation::FinishedRuns, move || async move {
            // The window's start comes from the database clock; the counts read
            // `workflow_runs_purge` (namespace, status, finished_at) over the window only.
            let rows: Vec<(DateTime<Utc>, Option<i64>, Option<String>, Option<i64>)> =
                sqlx::query_as(
                    "SELECT w.since, r.bucket, r.status, r.n
                       FROM (SELECT now() - $2 * INTERVAL '1 millisecond' AS since) w
                       LEFT JOIN LATERAL (
                            SELECT floor(extract(epoch FROM (finished_at - w.since)) * 1000
                                         / $3)::bigint AS bucket,
                                   status, count(*) AS n
                              FROM tasks.workflow_runs
                             WHERE namespace = $1
                               AND status IN ('completed', 'failed', 'canceled')
                               AND finished_at >= w.since
                             GROUP BY 1, 2
                       ) r ON true",
                )
                .bind(&*self.namespace)
                .bind(window.span_ms())
                .bind(window.bucket_ms())
                .fetch_all(&self.pool)
                .await
                .map_err(db(Operation::FinishedRuns))?;
            let since = rows.first().map_or_else(Utc::now, |row| row.0);
            let counts = rows
                .into_iter()
                .filter_map(|(_, bucket, status, n)| Some((bucket?, status?, n?)));
            Ok(window.finish(since, counts))
        })
        .await
    }
}
