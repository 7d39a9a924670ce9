//! Selects: the look of a select and its park ([`SelectStore::wait_for_any`]). The policy
//! is `tasks-core`'s [`WAIT_ANY`] and [`parks`]; the lock serializes the look with a send
//! and a child's end, so a wake-up is never lost.
//!
//! [`SelectStore::wait_for_any`]: tasks_core::SelectStore::wait_for_any

use crate::MemoryStore;
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::{StepKind, StepStatus};
use tasks_core::select::{AnyWait, Readiness, WaitForAny, parks};
use tasks_core::store::{SelectStore, check};
use tasks_core::transition::{FINISHED, PARKED_IN_SELECT, WAIT_ANY};

#[async_trait]
impl SelectStore for MemoryStore {
    async fn wait_for_any(&self, params: WaitForAny) -> StoreResult<AnyWait> {
        check::wait_for_any(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            match tx.space.runs.get(&params.run_id) {
                Some(row) if WAIT_ANY.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(WAIT_ANY.miss(params.run_id, worker, current));
                }
            }
            let topics = params
                .topics
                .iter()
                .filter(|topic| {
                    tx.space.events.values().any(|event| {
                        event.workflow_run_id == params.run_id
                            && &event.topic == *topic
                            && event.consumed_at.is_none()
                    })
                })
                .cloned()
                .collect();
            let mut children = Vec::new();
            for name in &params.child_steps {
                let step = tx
                    .space
                    .last_step(params.run_id, name, StepKind::Child)
                    .ok_or_else(|| StoreError::UnknownStep {
                        run_id: params.run_id,
                        step_name: name.clone(),
                    })?;
                let ended = step.status == StepStatus::Completed
                    || step
                        .child_workflow_run_id
                        .and_then(|id| tx.space.runs.get(&id))
                        .is_none_or(|child| FINISHED.contains(&child.run.status));
                if ended {
                    children.push(name.clone());
                }
            }
            let now = tx.now;
            let readiness = Readiness {
                topics,
                children,
                now,
            };
            let Some(row) = tx.space.runs.get_mut(&params.run_id) else {
                return Err(StoreError::RunNotFound { id: params.run_id });
            };
            if !parks(&readiness, params.until, params.park) {
                row.wait_topic = None;
                row.awaiting_children = 0;
                return Ok(AnyWait::Ready(readiness));
            }
            PARKED_IN_SELECT.apply(&mut row.run, now);
            row.run.available_at = Some(params.until);
            row.wait_topic = params.park_topic().map(str::to_owned);
            row.awaiting_children = params.awaiting_children();
            row.run.updated_at = now;
            let run = row.run.clone();
            tx.notes.extend(WAIT_ANY.announcements(&run));
            Ok(AnyWait::Parked(Box::new(run)))
        })
    }
}
