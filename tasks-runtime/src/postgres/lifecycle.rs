//! Lifecycle transitions of the Postgres store (issue #14): retry from the failure.
//!
//! The policy is [`RETRY`]; this module only writes its `SET` list in Postgres' dialect.

use uuid::Uuid;

use super::PgStore;
use crate::error::StoreResult;
use crate::model::WorkflowRun;
use crate::transition::RETRY;

impl PgStore {
    /// [`Store::retry_run`](crate::Store::retry_run), fenced by [`RETRY`].
    /// `started_at` is kept (a run that failed between attempts has none: it becomes the
    /// run's creation time): the claim then sees that the run executed before and loads its
    /// history, which a first execution skips.
    pub(super) async fn retry_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = "status = 'pending', available_at = now(), retried_at = now(),
                   attempts = 0, worker_id = NULL, output = NULL, error = NULL,
                   started_at = COALESCE(started_at, created_at), finished_at = NULL";
        self.transition(&RETRY, set, run_id, None, |q| q).await
    }
}
