//! Step attempts: created running, recorded finished, completed, and marked like their run
//! when it was paused or canceled meanwhile (`transition::interrupted`). Idempotent by the
//! attempt's id (`transition::stored_again`).

use crate::MemoryStore;
use crate::runs::{beyond, scan};
use crate::tables::{Space, Tx, absent_if_null};
use async_trait::async_trait;
use serde_json::Value;
use tasks_core::Holder;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::{StepAttempt, StepStatus, WorkflowRun};
use tasks_core::store::{
    CreateStepAttempt, Cursor, ListStepAttempts, Page, PageQuery, RecordStepAttempt, StepStore,
    StepUpdate, check,
};
use tasks_core::transition::{
    COMPLETE_STEP, CREATE_STEP, MARKABLE_STEP, RECORD_STEP, Transition, explain_step_miss,
    interrupted, stored_again,
};
use uuid::Uuid;

/// How a step write finds its run.
pub(crate) enum RunState {
    /// Running under the writer's claim: the write applies.
    Owned,
    /// Paused or canceled meanwhile: the attempt is kept, marked with this status.
    Interrupted(WorkflowRun, StepStatus),
    /// Anything else: the write is refused with this run (or none).
    Refused(Option<WorkflowRun>),
}

pub(crate) fn run_state(
    space: &Space,
    transition: &Transition,
    run_id: Uuid,
    holder: &Holder,
) -> RunState {
    match space.run(run_id) {
        Some(run) if transition.admits(&run, Some(holder)) => RunState::Owned,
        Some(run) => match interrupted(run.status) {
            Some(mark) => RunState::Interrupted(run, mark),
            None => RunState::Refused(Some(run)),
        },
        None => RunState::Refused(None),
    }
}

/// The attempt already stored under `params.id`: a finished attempt of the run (a retry
/// whose first try was stored), else why it is not.
pub(crate) fn stored_record(space: &Space, params: &RecordStepAttempt) -> StoreResult<StepAttempt> {
    let stored = space.steps.get(&params.id).cloned();
    let status = stored.as_ref().map(|step| step.status);
    stored_again(params.run_id, stored, true)?.ok_or_else(|| {
        StoreError::InvalidArgument(format!(
            "step attempt id {} is stored already, as {}",
            params.id,
            status.map_or("gone", |status| status.as_str())
        ))
    })
}

/// Stores the finished attempt `params`, the `nth` (from 0) of its write: created `nth`
/// microseconds after the write's time, so that the attempts of one write keep the order
/// they were given in; with its result, or marked `interrupted_as` without it. Nothing
/// when the id is taken.
pub(crate) fn insert_finished(
    tx: &mut Tx<'_>,
    params: &RecordStepAttempt,
    interrupted_as: Option<StepStatus>,
    nth: usize,
) -> StoreResult<Option<StepAttempt>> {
    let started_at = tx.minus(params.elapsed)?;
    if tx.space.steps.contains_key(&params.id) {
        return Ok(None);
    }
    let created_at = tx.now + chrono::TimeDelta::microseconds(nth as i64);
    let (status, output, error, finished_at) = match interrupted_as {
        None => (
            params.status,
            params.output.clone(),
            params.error.clone(),
            Some(created_at),
        ),
        Some(mark) => (mark, None, None, None),
    };
    let step = StepAttempt {
        namespace: tx.namespace.to_owned(),
        id: params.id,
        workflow_run_id: params.run_id,
        step_name: params.step_name.clone(),
        kind: params.kind,
        status,
        config: params.config.clone(),
        context: None,
        output,
        error,
        args: absent_if_null(params.args.clone()),
        child_workflow_run_namespace: None,
        child_workflow_run_id: None,
        started_at: Some(started_at),
        finished_at,
        created_at,
        updated_at: created_at,
    };
    tx.space.steps.insert(step.id, step.clone());
    Ok(Some(step))
}

#[async_trait]
impl StepStore for MemoryStore {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        check::create_step_attempt(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            let stored = tx.space.steps.get(&params.id).cloned();
            if let Some(step) = stored_again(params.run_id, stored, false)? {
                return Ok(step);
            }
            match tx.space.runs.get(&params.run_id) {
                Some(row) if CREATE_STEP.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(CREATE_STEP.miss(params.run_id, worker, current));
                }
            }
            let step = StepAttempt {
                namespace: tx.namespace.to_owned(),
                id: params.id,
                workflow_run_id: params.run_id,
                step_name: params.step_name,
                kind: params.kind,
                status: StepStatus::Running,
                config: params.config,
                context: absent_if_null(params.context),
                output: None,
                error: None,
                args: None,
                child_workflow_run_namespace: None,
                child_workflow_run_id: None,
                started_at: Some(tx.now),
                finished_at: None,
                created_at: tx.now,
                updated_at: tx.now,
            };
            tx.space.steps.insert(step.id, step.clone());
            Ok(step)
        })
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        Ok(self.read(|space| space.steps.get(&step_attempt_id).cloned()))
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        check::list_step_attempts(&self.namespace, &params)?;
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut steps: Vec<StepAttempt> = self.read(|space| {
            space
                .history(params.workflow_run_id)
                .into_iter()
                .filter(|step| beyond(&page, page.cursor, (step.created_at, step.id)))
                .cloned()
                .collect()
        });
        scan(&page, &mut steps, |step| (step.created_at, step.id));
        Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        Ok(self.read(|space| space.history(run_id).into_iter().cloned().collect()))
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        check::complete_step_attempt(holder, &output)?;
        self.write(|tx| {
            let state = run_state(tx.space, &COMPLETE_STEP, run_id, holder);
            let (status, output, from) = match &state {
                RunState::Owned => (
                    StepStatus::Completed,
                    Some(output),
                    &[StepStatus::Running][..],
                ),
                RunState::Interrupted(_, mark) => (*mark, None, MARKABLE_STEP),
                RunState::Refused(run) => {
                    return Err(COMPLETE_STEP.miss(run_id, Some(holder), run.as_ref()));
                }
            };
            let now = tx.now;
            let updated = tx
                .space
                .steps
                .get_mut(&step_attempt_id)
                .filter(|step| step.workflow_run_id == run_id && from.contains(&step.status))
                .map(|step| {
                    step.status = status;
                    step.finished_at = output.is_some().then_some(now);
                    step.output = output;
                    step.updated_at = now;
                    step.clone()
                });
            match (updated, state) {
                (Some(step), RunState::Owned) => Ok(StepUpdate::Recorded(step)),
                (Some(_), RunState::Interrupted(run, _)) => Ok(StepUpdate::Interrupted {
                    run_status: run.status,
                }),
                (_, state) => {
                    let run = match state {
                        RunState::Interrupted(run, _) => Some(run),
                        _ => tx.space.run(run_id),
                    };
                    let step = tx.space.steps.get(&step_attempt_id);
                    Err(explain_step_miss(
                        &COMPLETE_STEP,
                        run_id,
                        step_attempt_id,
                        holder,
                        run.as_ref(),
                        step,
                    ))
                }
            }
        })
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        check::record_step_attempt(&params)?;
        let worker = &params.holder;
        self.write(|tx| {
            let state = run_state(tx.space, &RECORD_STEP, params.run_id, worker);
            if !matches!(state, RunState::Owned) {
                // A retry whose first try was stored is answered with what was stored.
                let stored = tx.space.steps.get(&params.id).cloned();
                if let Some(step) = stored_again(params.run_id, stored, true)? {
                    return Ok(StepUpdate::Recorded(step));
                }
            }
            match state {
                RunState::Owned => match insert_finished(tx, &params, None, 0)? {
                    Some(step) => Ok(StepUpdate::Recorded(step)),
                    None => Ok(StepUpdate::Recorded(stored_record(tx.space, &params)?)),
                },
                RunState::Interrupted(run, mark) => {
                    insert_finished(tx, &params, Some(mark), 0)?;
                    Ok(StepUpdate::Interrupted {
                        run_status: run.status,
                    })
                }
                RunState::Refused(run) => {
                    Err(RECORD_STEP.miss(params.run_id, Some(worker), run.as_ref()))
                }
            }
        })
    }
}
