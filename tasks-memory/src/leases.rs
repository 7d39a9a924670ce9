//! Claims, leases and the end of a run ([`LeaseStore`]): a claim's admission walk in
//! `claim`, the fenced transitions in `transitions`, run here under the store's lock.

use crate::MemoryStore;
use crate::claim::{admit, expire, holds_running, start};
use crate::steps::{RunState, insert_finished, run_state, stored_record};
use crate::tables::{Heartbeat, storable};
use crate::transitions::{complete_in, transition_in};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;
use tasks_core::Holder;
use tasks_core::error::StoreResult;
use tasks_core::model::WorkflowRun;
use tasks_core::queue::ClaimFilter;
use tasks_core::store::{
    ClaimedRun, FailRun, LeaseStore, RecordStepAttempt, check, complete_separately,
};
use tasks_core::transition::{
    BACKED_OFF, CLAIM_PENDING, COMPLETE, EXTEND_LEASE, FAIL, FAILED_FOR_GOOD, RELEASE, RELEASED,
    SLEEP, SLEEPING, forgettable_worker, gives_up, released_attempts, retry_after,
};
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
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.write(|tx| {
            let lease_end = tx.plus(lease)?;
            let now = tx.now;
            expire(tx);
            let taken = admit(tx.space, worker_id, now, limit, filter);
            let runs = &mut tx.space.runs;
            let mut claimed: Vec<ClaimedRun> = taken
                .into_iter()
                .filter_map(|id| {
                    runs.get_mut(&id)
                        .map(|row| start(row, worker_id, lease_end, now))
                })
                .collect();
            // Oldest first, so callers start work in the order it was queued.
            claimed.sort_by_key(|claimed| (claimed.run.created_at, claimed.run.id));
            for claimed in &claimed {
                tx.notes.extend(CLAIM_PENDING.announcements(&claimed.run));
            }
            Ok(claimed)
        })
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        holder: &Holder,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        check::extend_lease(holder, lease)?;
        self.transition(&EXTEND_LEASE, run_id, Some(holder), |run, tx| {
            run.available_at = Some(tx.plus(lease)?);
            Ok(())
        })
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        check::sleep_run(holder, until)?;
        let until = storable(until)?;
        self.transition(&SLEEP, run_id, Some(holder), |run, tx| {
            SLEEPING.apply(run, tx.now);
            run.available_at = Some(until);
            Ok(())
        })
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run(holder, &output)?;
        self.write(|tx| complete_in(tx, run_id, holder, output))
    }

    /// The run's last attempts and its completion in one write when the run is still this
    /// claim's; otherwise the separate writes, which keep and report exactly what
    /// `record_step_attempt` and `complete_run` would.
    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run_with_steps(run_id, holder, &output, &steps)?;
        // `None`: the run is not this claim's, and the separate writes classify.
        let completed = self.write(|tx| {
            if !matches!(
                run_state(tx.space, &COMPLETE, run_id, holder),
                RunState::Owned
            ) {
                return Ok(None);
            }
            // Everything that may fail first: an id stored already must be this run's
            // finished attempt, and every start must be an instant a store holds.
            for params in &steps {
                tx.minus(params.elapsed)?;
                if tx.space.steps.contains_key(&params.id) {
                    stored_record(tx.space, params)?;
                }
            }
            for (nth, params) in steps.iter().enumerate() {
                insert_finished(tx, params, None, nth)?;
            }
            complete_in(tx, run_id, holder, output.clone()).map(Some)
        })?;
        match completed {
            Some(run) => Ok(run),
            None => complete_separately(self, run_id, holder, output, steps).await,
        }
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        check::fail_run(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            let current = tx.space.run(params.run_id);
            let run = match current {
                Some(run) if FAIL.admits(&run, worker) => run,
                current => return Err(FAIL.miss(params.run_id, worker, current.as_ref())),
            };
            // Decided under the lock, on the attempt just read.
            let retry_at = retry_after(&run, params.force)
                .map(|wait| tx.plus(wait))
                .transpose()?;
            let retry_at = retry_at.filter(|_| !gives_up(retry_at, run.deadline_at));
            transition_in(tx, &FAIL, params.run_id, worker, |run, tx| {
                match retry_at {
                    Some(at) => {
                        BACKED_OFF.apply(run, tx.now);
                        run.available_at = Some(at);
                    }
                    None => FAILED_FOR_GOOD.apply(run, tx.now),
                }
                run.error = Some(params.error);
                Ok(())
            })
        })
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        check::release_run(holder, delay, &reason)?;
        self.transition(&RELEASE, run_id, Some(holder), |run, tx| {
            let available_at = tx.plus(delay)?;
            RELEASED.apply(run, tx.now);
            run.available_at = Some(available_at);
            run.error = Some(reason);
            run.attempts = released_attempts(run.attempts);
            Ok(())
        })
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.write(|tx| {
            let stale_at = tx.plus(stale_after)?;
            let now = tx.now;
            let runs = &tx.space.runs;
            // Forget the namespace's dead workers whose runs were all claimed.
            tx.space.workers.retain(|worker, heartbeat| {
                worker == worker_id
                    || !forgettable_worker(heartbeat.stale_at, now, holds_running(runs, worker))
            });
            tx.space.workers.insert(
                worker_id.to_owned(),
                Heartbeat {
                    beat_at: now,
                    stale_at,
                },
            );
            Ok(())
        })
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.write(|tx| {
            tx.space.workers.remove(worker_id);
            Ok(())
        })
    }
}
