//! Claims, leases and the end of a run ([`LeaseStore`]): a claim's admission walk in
//! `claim`, the fenced transitions in `transitions`, run here under the store's lock.

use crate::MemoryStore;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;
use tasks_core::error::StoreResult;
use tasks_core::model::WorkflowRun;
use tasks_core::queue::ClaimFilter;
use tasks_core::store::{ClaimedRun, FailRun, LeaseStore, RecordStepAttempt, check};
use uuid::Uuid;

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        check::claim_runs(worker_id, lease, filter)?;
        self.claim_runs_impl(worker_id, lease, limit, filter)
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        check::extend_lease(worker_id, lease)?;
        self.extend_lease_impl(run_id, worker_id, lease)
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        check::sleep_run(worker_id, until)?;
        self.sleep_run_impl(run_id, worker_id, until)
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run(worker_id, &output)?;
        self.complete_run_impl(run_id, worker_id, output)
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        self.complete_run_with_steps_impl(run_id, worker_id, output, steps)
            .await
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        check::fail_run(&params)?;
        self.fail_run_impl(params)
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        check::release_run(worker_id, delay, &reason)?;
        self.release_run_impl(run_id, worker_id, delay, reason)
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.heartbeat_impl(worker_id, stale_after)
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.remove_worker_impl(worker_id)
    }
}
