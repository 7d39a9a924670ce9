//! The overview's figures on Postgres: the SQL of [`OverviewStore`]. Each statement reads
//! live runs through their partial indexes, heartbeat rows, or the index of terminal runs by
//! finishing time over a window: none reads the namespace's whole history.

use crate::PgStore;
use crate::reconnect::{db, retrying};
use async_trait::async_trait;
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::RunStatus;
use tasks_core::store::check;
use tasks_core::store::overview::{
    FinishedRuns, FinishedWindow, OverviewStore, QueueBacklog, WorkerInfo,
};
use tasks_core::transition::status_in;

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
            let rows: Vec<BacklogRow> = sqlx::query_as(&BACKLOG_SQL)
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
            let rows: Vec<WorkerRow> = sqlx::query_as(&WORKERS_SQL)
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
            const OPERATION: Operation = Operation::FinishedRuns;
            // The window's start comes from the database clock.
            let since: DateTime<Utc> =
                sqlx::query_scalar("SELECT now() - $1 * INTERVAL '1 millisecond'")
                    .bind(window.span_ms())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db(OPERATION))?;
            let rows: Vec<(i64, String, i64)> = sqlx::query(&FINISHED_SQL)
                .bind(&*self.namespace)
                .bind(since)
                .bind(window.bucket_ms())
                .try_map(|row: sqlx::postgres::PgRow| {
                    use sqlx::Row as _;
                    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
                })
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(window.finish(since, rows))
        })
        .await
    }
}

/// Each queue's live runs: ready and delayed pending runs, running runs, and the oldest
/// ready one's start, for namespace `$1`, at most `$2` queues.
static BACKLOG_SQL: LazyLock<String> = LazyLock::new(|| {
    let pending = RunStatus::Pending.as_str();
    let running = RunStatus::Running.as_str();
    format!(
        "SELECT queue,
                count(*) FILTER (WHERE status = '{pending}'
                    AND coalesce(available_at, created_at) <= now()),
                count(*) FILTER (WHERE status = '{pending}'
                    AND coalesce(available_at, created_at) > now()),
                count(*) FILTER (WHERE status = '{running}'),
                min(coalesce(available_at, created_at)) FILTER (WHERE status = '{pending}'
                    AND coalesce(available_at, created_at) <= now())
           FROM tasks.workflow_runs
          WHERE namespace = $1 AND {live}
          GROUP BY queue ORDER BY queue LIMIT $2",
        live = status_in("", &[RunStatus::Pending, RunStatus::Running]),
    )
});

/// The workers of namespace `$1` with their heartbeats and running runs, live ones first,
/// at most `$2`.
static WORKERS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT w.worker_id, w.beat_at, w.stale_at, w.stale_at > now(),
                (SELECT count(*) FROM tasks.workflow_runs r
                  WHERE r.namespace = w.namespace AND r.worker_id = w.worker_id
                    AND r.status = '{running}')
           FROM tasks.workers w
          WHERE w.namespace = $1
          ORDER BY w.stale_at > now() DESC, w.worker_id LIMIT $2",
        running = RunStatus::Running.as_str(),
    )
});

/// The runs finished since `$2`, per bucket of `$3` ms and status: one range of
/// `workflow_runs_purge` (namespace, status, finished_at) per terminal status. With the
/// statuses as one `IN` list, the planner proves the index's predicate from it, drops it
/// from the index condition and reads every finished run of the namespace; one status per
/// read (`status IN ('completed')` is `status = 'completed'`) keeps each read to the window.
static FINISHED_SQL: LazyLock<String> = LazyLock::new(|| {
    [RunStatus::Completed, RunStatus::Failed, RunStatus::Canceled]
        .iter()
        .map(|status| {
            format!(
                "SELECT floor(extract(epoch FROM (finished_at - $2)) * 1000 / $3)::bigint,
                        status, count(*)
                   FROM tasks.workflow_runs
                  WHERE namespace = $1 AND {status} AND finished_at >= $2
                  GROUP BY 1, 2",
                status = status_in("", &[*status])
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
});
