//! Operators' transitions ([`LifecycleStore`]): cancel, pause and resume a run, and a
//! finished run again: retried in place ([`RETRY`]) or forked into a new run that replays
//! the history before a step ([`FORK`]).

use crate::MemoryStore;
use crate::tables::Row;
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::{StepAttempt, WorkflowRun};
use tasks_core::store::{LifecycleStore, check};
use tasks_core::transition::{
    CANCEL, CANCELED, CREATED, FORK, PAUSE, PAUSED, RESUME, RESUMED, RETRIED, RETRY, fork_boundary,
};
use uuid::Uuid;

#[async_trait]
impl LifecycleStore for MemoryStore {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&CANCEL, run_id, None, |run, tx| {
            CANCELED.apply(run, tx.now);
            Ok(())
        })
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&PAUSE, run_id, None, |run, tx| {
            PAUSED.apply(run, tx.now);
            Ok(())
        })
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&RESUME, run_id, None, |run, tx| {
            RESUMED.apply(run, tx.now);
            Ok(())
        })
    }

    /// [`RETRY`]: pending now, with its output, error, worker and attempt counter cleared
    /// and `retried_at` set. `started_at` is kept (a run that failed between attempts has
    /// none: it becomes the run's creation time), so the claim sees that the run executed
    /// before and loads its history.
    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.transition(&RETRY, run_id, None, |run, tx| {
            RETRIED.apply(run, tx.now);
            run.started_at = run.started_at.or(Some(run.created_at));
            Ok(())
        })
    }

    /// [`FORK`] in one write: the source is checked under the lock, then the new run and
    /// copies of the attempts before the first attempt of `from_step` are stored. The new
    /// run keeps the source's workflow, version, input, config, context, trace context and
    /// queue, and nothing else (no key, deadline, priority or concurrency key).
    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        check::fork_run(from_step)?;
        self.write(|tx| {
            let source = match tx.space.run(run_id) {
                Some(run) if FORK.admits(&run, None) => run,
                current => return Err(FORK.miss(run_id, None, current.as_ref())),
            };
            let history: Vec<StepAttempt> = tx.space.history(run_id).into_iter().cloned().collect();
            let boundary = fork_boundary(
                history.iter().map(|step| step.step_name.as_str()),
                from_step,
            )
            .ok_or_else(|| StoreError::UnknownStep {
                run_id,
                step_name: from_step.to_owned(),
            })?;
            let now = tx.now;
            let forked = WorkflowRun {
                id: Uuid::now_v7(),
                status: CREATED,
                idempotency_key: None,
                output: None,
                error: None,
                attempts: 0,
                parent_step_attempt_namespace: None,
                parent_step_attempt_id: None,
                worker_id: None,
                claim_epoch: 0,
                available_at: Some(now),
                deadline_at: None,
                started_at: None,
                finished_at: None,
                created_at: now,
                updated_at: now,
                retried_at: None,
                forked_from_run_id: Some(run_id),
                forked_from_step: Some(from_step.to_owned()),
                parent_run_id: None,
                cancel_with_parent: true,
                lineage_root_id: None,
                continued_from_run_id: None,
                continued_as_run_id: None,
                ..source
            };
            tx.space.runs.insert(forked.id, Row::new(forked.clone()));
            for attempt in &history[..boundary] {
                let copy = StepAttempt {
                    id: Uuid::now_v7(),
                    workflow_run_id: forked.id,
                    ..attempt.clone()
                };
                tx.space.steps.insert(copy.id, copy);
            }
            tx.notes.extend(FORK.announcements(&forked));
            Ok(forked)
        })
    }
}
