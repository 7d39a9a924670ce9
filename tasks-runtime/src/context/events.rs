//! Event waits of a workflow: [`WorkflowContext::wait_for_event`] and its variants.
//!
//! A wait is a step attempt of kind [`StepKind::Event`] named
//! `event/{topic}` (then `event/{topic}:1`, ... in call order). The store consumes the oldest
//! unconsumed event of the topic, or parks the run until one is sent (or the timeout
//! passes); the completed attempt holds the event, so a replay returns the same one without
//! reading the mailbox again.

use std::time::Duration;

use serde_json::Value;

use super::WorkflowContext;
use crate::events::{Event, EventWait, decode_output};
use crate::failure::{ErrorRecord, WorkflowError};
use crate::limits::{self, Field};
use crate::model::{StepAttempt, StepKind};
use crate::replay::{Call, Resolved};
use crate::session::Halt;

/// How a wait with a timeout ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome<E> {
    /// An event arrived in time.
    Received(E),
    /// The timeout passed first; no event was consumed.
    TimedOut,
}

impl<E> EventOutcome<E> {
    /// The event, or `None` when the wait timed out.
    pub fn received(self) -> Option<E> {
        match self {
            EventOutcome::Received(event) => Some(event),
            EventOutcome::TimedOut => None,
        }
    }
}

impl WorkflowContext {
    /// Waits for the next event of type `E` sent to this run (topic [`Event::TOPIC`]),
    /// however long it takes. An event sent before the wait is delivered at once; events of
    /// one topic are delivered in the order they were sent, each to exactly one wait. While
    /// no event is there the run is parked and its worker slot freed; a send wakes it.
    ///
    /// An event whose payload does not decode into `E` (sent through the store directly,
    /// past the client's checks) is a non-retryable error returned to the workflow.
    pub async fn wait_for_event<E: Event>(&self) -> Result<E, WorkflowError> {
        match self.wait_for_event_json(E::TOPIC, None).await? {
            Some(payload) => decode_payload(E::TOPIC, payload),
            None => Err(WorkflowError::msg(format!(
                "the wait for event {:?} timed out without a timeout",
                E::TOPIC
            ))
            .non_retryable()),
        }
    }

    /// Like [`WorkflowContext::wait_for_event`], but gives up after `timeout` (counted from
    /// the first time the run reached this wait, by the store's clock, so a replay keeps the
    /// deadline): [`EventOutcome::TimedOut`]. A timeout longer than
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION) is a non-retryable error.
    pub async fn wait_for_event_timeout<E: Event>(
        &self,
        timeout: Duration,
    ) -> Result<EventOutcome<E>, WorkflowError> {
        match self.wait_for_event_json(E::TOPIC, Some(timeout)).await? {
            Some(payload) => decode_payload(E::TOPIC, payload).map(EventOutcome::Received),
            None => Ok(EventOutcome::TimedOut),
        }
    }

    /// The untyped wait: the next event's JSON payload on `topic`, or `None` when `timeout`
    /// passed first. The typed [`WorkflowContext::wait_for_event`] is usually what you want.
    pub async fn wait_for_event_json(
        &self,
        topic: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<Value>, WorkflowError> {
        limits::check_topic(topic).map_err(|error| WorkflowError::from(error).non_retryable())?;
        if let Some(timeout) = timeout {
            limits::check_duration(Field::EventTimeout, timeout)
                .map_err(|error| WorkflowError::from(error).non_retryable())?;
        }
        let Resolved {
            name: step_name,
            record: call,
        } = self.resolve_call(&format!("event/{topic}"), Call::of(StepKind::Event))?;
        self.check_interrupted().await;
        if let Some(done) = self.completed_attempt(&step_name) {
            return self.payload_of(&done).await;
        }
        // Earlier steps are durable before the run consumes an event or parks.
        self.flush().await;
        let waited = self
            .inner
            .session
            .wait_for_event(&step_name, topic, timeout, call)
            .await;
        match waited {
            Ok(EventWait::Done(attempt)) => {
                self.remember(attempt.clone());
                self.payload_of(&attempt).await
            }
            Ok(EventWait::Parked(run)) => {
                tracing::debug!(step.name = %step_name, topic, "event wait parks the run");
                let halt = Halt::Parked {
                    until: run.available_at.unwrap_or(limits::LATEST),
                    parked_at: run.updated_at,
                };
                self.halt(halt).await
            }
            Err(halt) => self.halt(halt).await,
        }
    }

    /// The payload a completed wait holds (`None`: it timed out); a stored output that does
    /// not read back fails the run, like a step's.
    async fn payload_of(&self, attempt: &StepAttempt) -> Result<Option<Value>, WorkflowError> {
        let output = attempt.output.clone().unwrap_or(Value::Null);
        match decode_output(&output) {
            Ok(event) => Ok(event.map(|event| event.payload)),
            Err(error) => {
                let record = ErrorRecord::new(format!(
                    "the stored output of event wait {} cannot be read: {error}",
                    attempt.step_name
                ))
                .with_kind("replay")
                .non_retryable();
                self.halt(Halt::Fail(record)).await
            }
        }
    }
}

fn decode_payload<E: Event>(topic: &str, payload: Value) -> Result<E, WorkflowError> {
    serde_json::from_value(payload).map_err(|error| {
        WorkflowError::msg(format!(
            "the payload of event {topic:?} does not decode into {}: {error}",
            std::any::type_name::<E>()
        ))
        .non_retryable()
    })
}
