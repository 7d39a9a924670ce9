//! Lifecycle transitions of the SQLite store (issue #14): retry from the failure.
//!
//! The policy is [`RETRY`]; this module only writes its `SET` list in SQLite's dialect.

use uuid::Uuid;

use super::SqliteStore;
use crate::error::StoreResult;
use crate::model::WorkflowRun;
use crate::transition::RETRY;

impl SqliteStore {
    /// [`Store::retry_run`](crate::Store::retry_run), fenced by [`RETRY`], under the write
    /// lock.
    /// `started_at` is kept (a run that failed between attempts has none: it becomes the
    /// run's creation time): the claim then sees that the run executed before and loads its
    /// history, which a first execution skips.
    pub(super) async fn retry_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = "status = 'pending', available_at = ?4, retried_at = ?4,
                   attempts = 0, worker_id = NULL, output = NULL, error = NULL,
                   started_at = COALESCE(started_at, created_at), finished_at = NULL";
        let write = self.begin_write(RETRY.operation).await?;
        self.transition_in(write, &RETRY, set, run_id, None, |q, _| Ok(q))
            .await
    }
}
