//! The overview's figures on SQLite: the SQL of [`OverviewStore`], reading live runs through
//! their partial indexes, heartbeat rows, and terminal runs by finishing time over a window.
//! Instants are the store's clock, like every write's.

use crate::SqliteStore;
use crate::rows::{self, parse_ts};
use async_trait::async_trait;
use chrono::SubsecRound;
use std::sync::LazyLock;
use tasks_core::error::{Operation, StoreResult, db};
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

type BacklogRow = (String, i64, i64, i64, Option<String>);

#[async_trait]
impl OverviewStore for SqliteStore {
    async fn queue_backlogs(&self, limit: u32) -> StoreResult<Vec<QueueBacklog>> {
        check::overview_rows(limit)?;
        const OPERATION: Operation = Operation::QueueBacklogs;
        let now = rows::ts_bound(self.clock.now().trunc_subsecs(6));
        // One read per status, each through its partial index (`tasks_workflow_runs_claim_queue`
        // for pending runs, `tasks_workflow_runs_queue_running` for running ones): with both
        // statuses in one `IN`, the planner may read the whole table.
        let found: Vec<BacklogRow> = sqlx::query_as(&BACKLOG_SQL)
            .bind(&*self.namespace)
            .bind(&now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        found
            .into_iter()
            .map(|(queue, ready, delayed, running, oldest)| {
                Ok(QueueBacklog {
                    queue,
                    ready: count(ready),
                    delayed: count(delayed),
                    running: count(running),
                    oldest_ready_at: oldest.map(|text| parse_ts(&text, OPERATION)).transpose()?,
                })
            })
            .collect()
    }

    async fn list_workers(&self, limit: u32) -> StoreResult<Vec<WorkerInfo>> {
        check::overview_rows(limit)?;
        const OPERATION: Operation = Operation::ListWorkers;
        let now = rows::ts_bound(self.clock.now().trunc_subsecs(6));
        let found: Vec<(String, String, String, bool, i64)> = sqlx::query_as(&WORKERS_SQL)
            .bind(&*self.namespace)
            .bind(&now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        found
            .into_iter()
            .map(|(worker_id, beat_at, stale_at, live, running)| {
                Ok(WorkerInfo {
                    worker_id,
                    beat_at: parse_ts(&beat_at, OPERATION)?,
                    stale_at: parse_ts(&stale_at, OPERATION)?,
                    live,
                    running: count(running),
                })
            })
            .collect()
    }

    async fn finished_runs(&self, window: FinishedWindow) -> StoreResult<FinishedRuns> {
        check::finished_runs(&window)?;
        const OPERATION: Operation = Operation::FinishedRuns;
        let now = self.clock.now().trunc_subsecs(6);
        let since = now - chrono::Duration::milliseconds(window.span_ms());
        let since_text = rows::ts_bound(since);
        // `tasks_workflow_runs_purge` (namespace, status, finished_at), over the window only.
        let counts: Vec<(i64, String, i64)> = sqlx::query_as(&FINISHED_SQL)
            .bind(&*self.namespace)
            .bind(&since_text)
            .bind(window.bucket_ms())
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        Ok(window.finish(since, counts))
    }
}

/// Each queue's live runs in namespace `?1` at `?2`, at most `?3` queues: one read per
/// status, each through its partial index (`tasks_workflow_runs_claim_queue` for pending
/// runs, `tasks_workflow_runs_queue_running` for running ones).
static BACKLOG_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT queue, sum(ready), sum(delayed), sum(running), min(oldest)
           FROM (SELECT queue,
                        coalesce(available_at, created_at) <= ?2 AS ready,
                        coalesce(available_at, created_at) > ?2 AS delayed,
                        0 AS running,
                        CASE WHEN coalesce(available_at, created_at) <= ?2
                             THEN coalesce(available_at, created_at) END AS oldest
                   FROM tasks_workflow_runs
                  WHERE namespace = ?1 AND status = '{pending}'
                 UNION ALL
                 SELECT queue, 0, 0, 1, NULL
                   FROM tasks_workflow_runs
                  WHERE namespace = ?1 AND status = '{running}')
          GROUP BY queue ORDER BY queue LIMIT ?3",
        pending = RunStatus::Pending.as_str(),
        running = RunStatus::Running.as_str(),
    )
});

/// The workers of namespace `?1` with their heartbeats and running runs at `?2`, live ones
/// first, at most `?3`.
static WORKERS_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT w.worker_id, w.beat_at, w.stale_at, w.stale_at > ?2,
                (SELECT count(*) FROM tasks_workflow_runs r
                  WHERE r.namespace = w.namespace AND r.worker_id = w.worker_id
                    AND r.status = '{running}')
           FROM tasks_workers w
          WHERE w.namespace = ?1
          ORDER BY w.stale_at > ?2 DESC, w.worker_id LIMIT ?3",
        running = RunStatus::Running.as_str(),
    )
});

/// The runs of namespace `?1` finished since `?2`, per bucket of `?3` ms and status,
/// through `tasks_workflow_runs_purge` (namespace, status, finished_at).
static FINISHED_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT CAST((julianday(finished_at) - julianday(?2)) * 86400000.0 / ?3 AS INTEGER),
                status, count(*)
           FROM tasks_workflow_runs
          WHERE namespace = ?1 AND {finished}
            AND finished_at >= ?2
          GROUP BY 1, 2",
        finished = status_in(
            "",
            &[RunStatus::Completed, RunStatus::Failed, RunStatus::Canceled]
        ),
    )
});
