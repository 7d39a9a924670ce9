//! Continue-as-new in memory: [`ContinueStore`] applied to the rows under the lock. The
//! rules (the fence, which runs may continue, what the successor copies, where events go)
//! are [`tasks_core::continuation`]'s.

use crate::MemoryStore;
use crate::tables::{Row, Space, absent_if_null};
use crate::transitions::transition_in;
use async_trait::async_trait;
use tasks_core::continuation::{ContinueRun, ContinueStore, ContinuedRun, refusal};
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{Notification, check};
use tasks_core::transition::{CONTINUE, CONTINUED, CREATED};
use uuid::Uuid;

#[async_trait]
impl ContinueStore for MemoryStore {
    async fn continue_run(&self, params: ContinueRun) -> StoreResult<ContinuedRun> {
        check::continue_run(&params)?;
        self.write(|tx| {
            let successor_id = Uuid::now_v7();
            let mut before = None;
            let finished = transition_in(
                tx,
                &CONTINUE,
                params.run_id,
                Some(&params.holder),
                |run, tx| {
                    if let Some(refused) = refusal(run) {
                        return Err(refused);
                    }
                    before = Some(run.clone());
                    CONTINUED.apply(run, tx.now);
                    run.continued_as_run_id = Some(successor_id);
                    Ok(())
                },
            )?;
            let (Some(before), Some(row)) = (before, tx.space.runs.get(&params.run_id).cloned())
            else {
                return Err(StoreError::RunNotFound { id: params.run_id });
            };
            let now = tx.now;
            let successor = WorkflowRun {
                id: successor_id,
                status: CREATED,
                idempotency_key: before.idempotency_key.clone(),
                input: absent_if_null(Some(params.input)),
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
                forked_from_run_id: None,
                forked_from_step: None,
                parent_run_id: None,
                cancel_with_parent: true,
                lineage_root_id: Some(before.lineage_id()),
                continued_from_run_id: Some(before.id),
                continued_as_run_id: None,
                ..before
            };
            tx.space.runs.insert(
                successor_id,
                Row {
                    priority: row.priority,
                    concurrency: row.concurrency.clone(),
                    key_scope: row.key_scope,
                    ..Row::new(successor.clone())
                },
            );
            // Events the finished run did not consume are the successor's now.
            for event in tx.space.events.values_mut() {
                if event.workflow_run_id == params.run_id && event.consumed_at.is_none() {
                    event.workflow_run_id = successor_id;
                }
            }
            tx.notes.push(Notification::RunAvailable {
                namespace: successor.namespace.clone(),
            });
            Ok(ContinuedRun {
                finished,
                successor,
            })
        })
    }

    async fn lineage_head(&self, lineage_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        Ok(self.read(|space| head(space, lineage_id)))
    }
}

/// The current run of lineage `lineage_id`: the run of the lineage that did not continue.
pub(crate) fn head(space: &Space, lineage_id: Uuid) -> Option<WorkflowRun> {
    space
        .runs
        .values()
        .map(|row| &row.run)
        .filter(|run| run.lineage_id() == lineage_id && run.continued_as_run_id.is_none())
        .max_by_key(|run| (run.created_at, run.id))
        .cloned()
}
