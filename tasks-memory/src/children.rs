//! Child workflows: starting a child from a step, a parent's wait for its children, and
//! what every finishing transition does to a run's family (wake its parked parent, cascade
//! a cancel to its descendants). The policy is `transition`'s [`START_CHILD`],
//! [`WAIT_CHILDREN`] and [`WAKE_PARENT`](tasks_core::transition::WAKE_PARENT); the lock serializes a child finishing with its
//! parent parking, so the last child always finds its parent parked, or the parent finds
//! it finished.

use crate::MemoryStore;
use crate::runs::NewRun;
use crate::tables::{Space, Tx};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tasks_core::children::{
    ChildOutcome, ChildWait, StartChild, StartedChild, WaitForChildren, missing_child,
};
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::limits;
use tasks_core::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use tasks_core::store::{ChildStore, Notification, check};
use tasks_core::transition::{
    CANCELED, CASCADE_FROM, FINISHED, PARKED_ON_CHILDREN, START_CHILD, WAIT_CHILDREN,
    parent_countdown,
};
use uuid::Uuid;

/// Counts down run `parent` by one child that just ended, waking it (available now) when
/// that was the last child it waits for. Returns the wake-up to announce.
pub(crate) fn wake_parent(
    space: &mut Space,
    parent: Uuid,
    now: DateTime<Utc>,
    namespace: &str,
) -> Notification {
    if let Some(row) = space.runs.get_mut(&parent) {
        let (awaiting, wakes) = parent_countdown(row.awaiting_children, row.run.status, 1);
        row.awaiting_children = awaiting;
        if wakes {
            row.run.available_at = Some(now);
        }
        row.run.updated_at = now;
    }
    Notification::RunAvailable {
        namespace: namespace.to_owned(),
    }
}

/// In the write of a transition that just left `run` as it is: when `run` finished, wakes
/// its parent, and when `cascade` (a cancel), cancels its live descendants that are
/// canceled with their parents (through every level of such children). Queues the
/// notifications.
pub(crate) fn after_finish(tx: &mut Tx<'_>, run: &WorkflowRun, cascade: bool) {
    if !FINISHED.contains(&run.status) {
        return;
    }
    let now = tx.now;
    if let Some(parent) = run.parent_run_id {
        let woken = wake_parent(tx.space, parent, now, tx.namespace);
        tx.notes.push(woken);
    }
    if !cascade {
        return;
    }
    for id in cascading_descendants(tx.space, run.id) {
        let Some(row) = tx.space.runs.get_mut(&id) else {
            continue;
        };
        if !CASCADE_FROM.contains(&row.run.status) {
            continue;
        }
        let child = &mut row.run;
        CANCELED.apply(child, now);
        child.updated_at = now;
        tx.notes.push(Notification::RunFinished {
            namespace: tx.namespace.to_owned(),
            run_id: id,
        });
    }
}

/// The descendants of `root` reached through children canceled with their parents,
/// whatever their status.
fn cascading_descendants(space: &Space, root: Uuid) -> Vec<Uuid> {
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for row in space.runs.values() {
            let child = &row.run;
            if child.parent_run_id == Some(parent)
                && child.cancel_with_parent
                && !found.contains(&child.id)
                && child.id != root
            {
                found.push(child.id);
                parents.push(child.id);
            }
        }
    }
    found
}

#[async_trait]
impl ChildStore for MemoryStore {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        check::start_child(&self.namespace, &params)?;
        const OPERATION: Operation = Operation::StartChild;
        let worker = Some(&params.holder);
        self.write(|tx| {
            let (step_id, child_id) = (Uuid::now_v7(), Uuid::now_v7());
            let mut child = NewRun::prepare(tx, &params.child, child_id)?;
            match tx.space.runs.get(&params.run_id) {
                Some(row) if START_CHILD.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(START_CHILD.miss(params.run_id, worker, current));
                }
            }
            if let Some(step) =
                tx.space
                    .last_step(params.run_id, &params.step_name, StepKind::Child)
            {
                let child_id = step
                    .child_workflow_run_id
                    .ok_or_else(|| StoreError::Corrupt {
                        operation: OPERATION,
                        reason: format!("child step {} names no child run", step.id),
                    })?;
                let child = tx
                    .space
                    .run(child_id)
                    .ok_or(StoreError::RunNotFound { id: child_id })?;
                return Ok(StartedChild {
                    step: step.clone(),
                    child,
                    created: false,
                });
            }
            let now = tx.now;
            let step = StepAttempt {
                namespace: tx.namespace.to_owned(),
                id: step_id,
                workflow_run_id: params.run_id,
                step_name: params.step_name.clone(),
                kind: StepKind::Child,
                status: StepStatus::Running,
                config: params.step_config(),
                context: None,
                output: None,
                error: None,
                args: None,
                child_workflow_run_namespace: Some(tx.namespace.to_owned()),
                child_workflow_run_id: Some(child_id),
                started_at: Some(now),
                finished_at: None,
                created_at: now,
                updated_at: now,
            };
            tx.space.steps.insert(step_id, step.clone());
            let run = child.run_mut();
            run.parent_step_attempt_namespace = Some(tx.namespace.to_owned());
            run.parent_step_attempt_id = Some(step_id);
            run.parent_run_id = Some(params.run_id);
            run.cancel_with_parent = params.on_parent_cancel.cascades();
            // A child takes no idempotency key (checked), so it is always created.
            let child = match child.insert(tx) {
                crate::runs::Inserted::Created(run) | crate::runs::Inserted::Held(run) => run,
            };
            tx.notes.extend(START_CHILD.announcements(&child));
            Ok(StartedChild {
                step,
                child,
                created: true,
            })
        })
    }

    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait> {
        check::wait_for_children(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            match tx.space.runs.get(&params.run_id) {
                Some(row) if WAIT_CHILDREN.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(WAIT_CHILDREN.miss(params.run_id, worker, current));
                }
            }
            // Every named step first, so that an unknown one changes nothing.
            let steps = params
                .step_names
                .iter()
                .map(|name| {
                    tx.space
                        .last_step(params.run_id, name, StepKind::Child)
                        .map(|step| step.id)
                        .ok_or_else(|| StoreError::UnknownStep {
                            run_id: params.run_id,
                            step_name: name.clone(),
                        })
                })
                .collect::<StoreResult<Vec<Uuid>>>()?;
            let now = tx.now;
            let mut done = Vec::with_capacity(steps.len());
            let mut live = 0_u32;
            for step_id in steps {
                let Some(step) = tx.space.steps.get(&step_id) else {
                    continue;
                };
                if step.status == StepStatus::Completed {
                    done.push(step.clone());
                    continue;
                }
                let outcome = match step
                    .child_workflow_run_id
                    .and_then(|id| tx.space.runs.get(&id))
                {
                    Some(child) => ChildOutcome::of(&child.run),
                    None => Some(missing_child()),
                };
                match outcome {
                    Some(outcome) => {
                        let Some(step) = tx.space.steps.get_mut(&step_id) else {
                            continue;
                        };
                        step.status = StepStatus::Completed;
                        step.output = Some(outcome.to_output());
                        step.finished_at = Some(now);
                        step.updated_at = now;
                        done.push(step.clone());
                    }
                    None => live += 1,
                }
            }
            let Some(row) = tx.space.runs.get_mut(&params.run_id) else {
                return Err(StoreError::RunNotFound { id: params.run_id });
            };
            if live == 0 {
                row.awaiting_children = 0;
                return Ok(ChildWait::Done(done));
            }
            PARKED_ON_CHILDREN.apply(&mut row.run, now);
            row.run.available_at = Some(limits::LATEST);
            row.awaiting_children = live;
            row.run.updated_at = now;
            let run = row.run.clone();
            tx.notes.extend(WAIT_CHILDREN.announcements(&run));
            Ok(ChildWait::Parked(run))
        })
    }
}
