//! The overview's figures in memory ([`OverviewStore`]): the same reads as the SQL stores',
//! over the namespace's rows under the lock, by the store's clock.

use std::collections::BTreeMap;

use crate::MemoryStore;
use crate::tables::stored;
use async_trait::async_trait;
use tasks_core::error::StoreResult;
use tasks_core::model::RunStatus;
use tasks_core::store::check;
use tasks_core::store::overview::{
    FinishedRuns, FinishedWindow, OverviewStore, QueueBacklog, WorkerInfo,
};

#[async_trait]
impl OverviewStore for MemoryStore {
    async fn queue_backlogs(&self, limit: u32) -> StoreResult<Vec<QueueBacklog>> {
        check::overview_rows(limit)?;
        let now = stored(self.clock.now());
        let mut queues: BTreeMap<String, QueueBacklog> = BTreeMap::new();
        self.read(|space| {
            for row in space.runs.values() {
                let run = &row.run;
                if !matches!(run.status, RunStatus::Pending | RunStatus::Running) {
                    continue;
                }
                let backlog = queues
                    .entry(run.queue.clone())
                    .or_insert_with(|| QueueBacklog {
                        queue: run.queue.clone(),
                        ready: 0,
                        delayed: 0,
                        running: 0,
                        oldest_ready_at: None,
                    });
                let available = run.available_at.unwrap_or(run.created_at);
                match run.status {
                    RunStatus::Running => backlog.running += 1,
                    _ if available <= now => {
                        backlog.ready += 1;
                        backlog.oldest_ready_at = Some(
                            backlog
                                .oldest_ready_at
                                .map_or(available, |oldest| oldest.min(available)),
                        );
                    }
                    _ => backlog.delayed += 1,
                }
            }
        });
        Ok(queues.into_values().take(limit as usize).collect())
    }

    async fn list_workers(&self, limit: u32) -> StoreResult<Vec<WorkerInfo>> {
        check::overview_rows(limit)?;
        let now = stored(self.clock.now());
        let mut workers: Vec<WorkerInfo> = self.read(|space| {
            space
                .workers
                .iter()
                .map(|(worker_id, heartbeat)| WorkerInfo {
                    worker_id: worker_id.clone(),
                    beat_at: heartbeat.beat_at,
                    stale_at: heartbeat.stale_at,
                    live: heartbeat.stale_at > now,
                    running: space
                        .runs
                        .values()
                        .filter(|row| {
                            row.run.status == RunStatus::Running
                                && row.run.worker_id.as_deref() == Some(worker_id.as_str())
                        })
                        .count() as u64,
                })
                .collect()
        });
        workers.sort_by(|a, b| {
            b.live
                .cmp(&a.live)
                .then_with(|| a.worker_id.cmp(&b.worker_id))
        });
        workers.truncate(limit as usize);
        Ok(workers)
    }

    async fn finished_runs(&self, window: FinishedWindow) -> StoreResult<FinishedRuns> {
        check::finished_runs(&window)?;
        let now = stored(self.clock.now());
        let since = now - chrono::Duration::milliseconds(window.span_ms());
        let bucket_ms = window.bucket_ms();
        let mut counts: BTreeMap<(i64, &'static str), i64> = BTreeMap::new();
        self.read(|space| {
            for row in space.runs.values() {
                let run = &row.run;
                let Some(finished_at) = run.finished_at else {
                    continue;
                };
                if !run.status.is_terminal() || finished_at < since {
                    continue;
                }
                let index = (finished_at - since).num_milliseconds() / bucket_ms;
                *counts.entry((index, run.status.as_str())).or_default() += 1;
            }
        });
        Ok(window.finish(
            since,
            counts
                .into_iter()
                .map(|((index, status), n)| (index, status.to_owned(), n)),
        ))
    }
}
