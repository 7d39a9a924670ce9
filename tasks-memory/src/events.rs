//! Events sent to a run: each topic a FIFO mailbox. A send stores the event (once per
//! deduplication key) and wakes the run if it is parked on that topic; a wait consumes the
//! oldest unconsumed event of its topic, times out, or parks the run. The policy is
//! `transition`'s [`SEND_EVENT`], [`WAKE_ON_EVENT`] and [`WAIT_EVENT`]; the lock
//! serializes a send and a wait of one run, so a wake-up is never lost.

use crate::MemoryStore;
use crate::continuation::head;
use crate::runs::{Inserted, NewRun};
use crate::tables::{Space, Tx};
use async_trait::async_trait;
use tasks_core::continuation::recipient_lineage;
use tasks_core::error::StoreResult;
use tasks_core::events::{
    EventTarget, EventWait, RunEvent, SendEvent, SentEvent, SignalWithStart, SignalledRun,
    WaitForEvent, WaitStep, not_found, received_output, timed_out_output, wait_step, wait_until,
};
use tasks_core::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use tasks_core::store::{EventStore, Notification, check};
use tasks_core::transition::{
    PARKED_ON_EVENT, SEND_EVENT, WAIT_EVENT, WAKE_ON_EVENT, waits_on_topic,
};
use uuid::Uuid;

/// The oldest unconsumed event of a run's topic.
fn oldest_unconsumed(space: &Space, run_id: Uuid, topic: &str) -> Option<Uuid> {
    space
        .events
        .values()
        .filter(|event| {
            event.workflow_run_id == run_id && event.topic == topic && event.consumed_at.is_none()
        })
        .min_by_key(|event| (event.created_at, event.id))
        .map(|event| event.id)
}

/// Creates the wait's running attempt, with its topic and timeout in its config.
fn start_wait(tx: &mut Tx<'_>, params: &WaitForEvent) -> StepAttempt {
    let step = StepAttempt {
        namespace: tx.namespace.to_owned(),
        id: Uuid::now_v7(),
        workflow_run_id: params.run_id,
        step_name: params.step_name.clone(),
        kind: StepKind::Event,
        status: StepStatus::Running,
        config: params.config(),
        context: None,
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
    step
}

/// Stores an event for the run `run_id` (unless its deduplication key was used: the first
/// event then) and wakes the run when it is parked on the topic: the send, once the run is
/// known to take it. Returns the send and the woken run.
fn deliver(
    tx: &mut Tx<'_>,
    run_id: Uuid,
    topic: String,
    payload: serde_json::Value,
    dedup_key: Option<String>,
) -> (SentEvent, Option<WorkflowRun>) {
    let first = dedup_key.as_ref().and_then(|key| {
        tx.space.events.values().find(|event| {
            event.workflow_run_id == run_id
                && event.topic == topic
                && event.dedup_key.as_ref() == Some(key)
        })
    });
    if let Some(first) = first {
        let sent = SentEvent {
            event: first.clone(),
            duplicate: true,
            woke: false,
        };
        return (sent, None);
    }
    let event = RunEvent {
        namespace: tx.namespace.to_owned(),
        id: Uuid::now_v7(),
        workflow_run_id: run_id,
        topic,
        payload,
        dedup_key,
        consumed_by: None,
        consumed_at: None,
        created_at: tx.now,
    };
    tx.space.events.insert(event.id, event.clone());
    let now = tx.now;
    let woken = tx.space.runs.get_mut(&run_id).and_then(|row| {
        let parked_here = WAKE_ON_EVENT.admits(&row.run, None)
            && waits_on_topic(row.wait_topic.as_deref(), &event.topic);
        parked_here.then(|| {
            row.run.available_at = Some(now);
            row.run.updated_at = now;
            row.run.clone()
        })
    });
    if let Some(run) = &woken {
        tx.notes.extend(WAKE_ON_EVENT.announcements(run));
    }
    let sent = SentEvent {
        event,
        duplicate: false,
        woke: woken.is_some(),
    };
    (sent, woken)
}

#[async_trait]
impl EventStore for MemoryStore {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        check::send_event(&self.namespace, &params)?;
        self.write(|tx| {
            let target = match &params.target {
                EventTarget::Run(run_id) => tx.space.run(*run_id),
                EventTarget::Key {
                    workflow_name,
                    idempotency_key,
                } => tx
                    .space
                    .run_by_key(workflow_name, idempotency_key)
                    .map(|row| row.run.clone()),
            };
            // A run that continued as new hands the event to its lineage's current run.
            let target = match recipient_lineage(target.as_ref(), &params.target) {
                Some(lineage) => head(tx.space, lineage).or(target),
                None => target,
            };
            let run = match target {
                Some(run) if SEND_EVENT.admits(&run, None) => run,
                Some(run) => return Err(SEND_EVENT.miss(run.id, None, Some(&run))),
                None => return Err(not_found(&params.target)),
            };
            Ok(deliver(tx, run.id, params.topic, params.payload, params.dedup_key).0)
        })
    }

    async fn signal_with_start(&self, params: SignalWithStart) -> StoreResult<SignalledRun> {
        check::signal_with_start(&self.namespace, &params)?;
        self.write(|tx| {
            // Nothing is written before the run is settled: a refusal leaves no trace.
            let new = NewRun::prepare(tx, &params.start, Uuid::now_v7())?;
            let (run, created) = match new.insert(tx) {
                Inserted::Created(run) => {
                    tx.notes.push(Notification::RunAvailable {
                        namespace: run.namespace.clone(),
                    });
                    (run, true)
                }
                Inserted::Held(holder) if SEND_EVENT.admits(&holder, None) => (holder, false),
                Inserted::Held(holder) => {
                    return Err(SEND_EVENT.miss(holder.id, None, Some(&holder)));
                }
            };
            let (sent, woken) = deliver(tx, run.id, params.topic, params.payload, params.dedup_key);
            Ok(SignalledRun {
                run: woken.unwrap_or(run),
                created,
                sent,
            })
        })
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        check::wait_for_event(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            match tx.space.runs.get(&params.run_id) {
                Some(row) if WAIT_EVENT.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(WAIT_EVENT.miss(params.run_id, worker, current));
                }
            }
            let last = tx
                .space
                .last_step(params.run_id, &params.step_name, StepKind::Event)
                .cloned();
            let attempt = match last {
                Some(attempt) if attempt.status == StepStatus::Completed => {
                    return Ok(EventWait::Done(attempt));
                }
                Some(attempt) if attempt.status == StepStatus::Running => attempt,
                _ => start_wait(tx, &params),
            };
            let now = tx.now;
            let event = oldest_unconsumed(tx.space, params.run_id, &params.topic);
            let output = match wait_step(event.is_some(), wait_until(&attempt), now) {
                WaitStep::Consume => {
                    let Some(event) = event.and_then(|id| tx.space.events.get_mut(&id)) else {
                        return Ok(EventWait::Done(attempt));
                    };
                    event.consumed_by = Some(params.step_name.clone());
                    event.consumed_at = Some(now);
                    received_output(event)
                }
                WaitStep::Park => {
                    let until = wait_until(&attempt);
                    let Some(row) = tx.space.runs.get_mut(&params.run_id) else {
                        return Ok(EventWait::Done(attempt));
                    };
                    PARKED_ON_EVENT.apply(&mut row.run, now);
                    row.run.available_at = Some(until);
                    row.wait_topic = Some(params.topic.clone());
                    row.run.updated_at = now;
                    let run = row.run.clone();
                    tx.notes.extend(WAIT_EVENT.announcements(&run));
                    return Ok(EventWait::Parked(run));
                }
                WaitStep::TimeOut => timed_out_output(),
            };
            if let Some(row) = tx.space.runs.get_mut(&params.run_id) {
                row.wait_topic = None;
            }
            let Some(step) = tx.space.steps.get_mut(&attempt.id) else {
                return Ok(EventWait::Done(attempt));
            };
            step.status = StepStatus::Completed;
            step.output = Some(output);
            step.finished_at = Some(now);
            step.updated_at = now;
            Ok(EventWait::Done(step.clone()))
        })
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        Ok(self.read(|space| {
            let mut events: Vec<RunEvent> = space
                .events
                .values()
                .filter(|event| event.workflow_run_id == run_id)
                .cloned()
                .collect();
            events.sort_by_key(|event| (event.created_at, event.id));
            events
        }))
    }
}
