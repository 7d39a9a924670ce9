//! Sending events to runs: one [`SendEventBuilder`], typed ([`Client::send_event`]) or a
//! topic with validated JSON ([`Client::send_event_by_topic`], for other services and the
//! command line).

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use serde_json::Value;

use super::{Client, ClientError};
use crate::events::{
    Event, EventDeclaration, EventTarget, SendEvent, SentEvent, declarations, declared_topics,
};
use crate::limits::{self, Field};
use crate::registry::Violation;

/// What a send carries: a typed payload, encoded (or refused) when the send was made, or a
/// JSON payload on a topic, checked against the run's declarations when it is sent.
pub(super) enum Payload {
    Typed(Result<Value, ClientError>),
    Json(Value),
}

/// An event about to be sent to a run: made by [`Client::send_event`] (typed) or
/// [`Client::send_event_by_topic`] (a topic with a JSON payload), given options by its
/// methods, and sent by `.await`, which returns the stored event ([`SentEvent`]).
///
/// ```no_run
/// # async fn demo(client: tasks_runtime::Client, run_id: uuid::Uuid) -> Result<(), Box<dyn std::error::Error>> {
/// client
///     .send_event_by_topic(run_id, "approval", serde_json::json!({ "approved": true }))
///     .dedup_key("webhook-delivery-19")
///     .await?;
/// # Ok(()) }
/// ```
///
/// The run is woken at once if it waits on the topic, otherwise the event waits in its
/// mailbox for the run's next wait on it.
#[must_use = "a send does nothing until it is awaited"]
pub struct SendEventBuilder<'c> {
    client: &'c Client,
    target: EventTarget,
    topic: String,
    payload: Payload,
    dedup_key: Option<String>,
}

impl std::fmt::Debug for SendEventBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendEventBuilder")
            .field("target", &self.target)
            .field("topic", &self.topic)
            .field("dedup_key", &self.dedup_key)
            .finish_non_exhaustive()
    }
}

impl<'c> SendEventBuilder<'c> {
    /// Deduplication key: a second send to the same run and topic with this key stores
    /// nothing and returns the first event (a retried webhook delivers once).
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    async fn send(self) -> Result<SentEvent, ClientError> {
        let client = self.client;
        let payload = match self.payload {
            Payload::Typed(payload) => payload?,
            Payload::Json(payload) => {
                client
                    .checked_json_event(&self.target, &self.topic, &payload)
                    .await?;
                payload
            }
        };
        let params = SendEvent {
            target: self.target,
            topic: self.topic,
            payload,
            dedup_key: self.dedup_key,
        };
        params.check(client.store.namespace())?;
        Ok(client.store.contract().events()?.send_event(params).await?)
    }
}

impl<'c> IntoFuture for SendEventBuilder<'c> {
    type Output = Result<SentEvent, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

impl Client {
    /// A send of `payload` on the topic [`Event::TOPIC`] to a run given by id or by
    /// workflow and idempotency key ([`EventTarget::Key`], for a webhook that only knows a
    /// business id); the compiler checks the payload type. Send it with `.await`.
    ///
    /// Errors: [`ClientError::Store`] with [`StoreError::RunNotFound`](crate::StoreError::RunNotFound)
    /// or [`StoreError::WrongState`](crate::StoreError::WrongState) (a completed, failed or
    /// canceled run); [`ClientError::Limit`] or [`ClientError::Json`] for a payload that
    /// cannot be stored as it is. Nothing is stored then.
    pub fn send_event<E: Event>(
        &self,
        target: impl Into<EventTarget>,
        payload: &E,
    ) -> SendEventBuilder<'_> {
        SendEventBuilder {
            client: self,
            target: target.into(),
            topic: E::TOPIC.to_owned(),
            payload: Payload::Typed(typed_payload(payload)),
            dedup_key: None,
        }
    }

    /// A send of a JSON event on `topic`, as another service or the command line would
    /// make it. Send it with `.await`. The run's workflow must declare the topic
    /// (`#[workflow(events(...))]`) in this binary: the payload is checked against the
    /// [`limits`], then validated against the declared payload type's JSON Schema (every
    /// violation reported with its path), then decoded into it; on any violation nothing
    /// is stored.
    ///
    /// A run given by id is read first to learn its workflow and version. A run given by
    /// workflow and key is checked against the declarations of every registered version of
    /// that workflow (it passes if one of them accepts it).
    ///
    /// Errors: those of [`Client::send_event`]; [`ClientError::UnknownWorkflow`] when the
    /// run's workflow is not linked into this binary; [`ClientError::UndeclaredEvent`];
    /// [`ClientError::InvalidEvent`].
    pub fn send_event_by_topic(
        &self,
        target: impl Into<EventTarget>,
        topic: &str,
        payload: Value,
    ) -> SendEventBuilder<'_> {
        SendEventBuilder {
            client: self,
            target: target.into(),
            topic: topic.to_owned(),
            payload: Payload::Json(payload),
            dedup_key: None,
        }
    }

    /// Checks a JSON event on `topic` for `target` against the limits and the declarations
    /// of the run's workflow.
    pub(super) async fn checked_json_event(
        &self,
        target: &EventTarget,
        topic: &str,
        payload: &Value,
    ) -> Result<(), ClientError> {
        check_json_event_limits(topic, payload)?;
        let (workflow, version) = match target {
            EventTarget::Run(run_id) => {
                let run = self
                    .store
                    .contract()
                    .get_run(*run_id)
                    .await?
                    .ok_or(crate::StoreError::RunNotFound { id: *run_id })?;
                (run.workflow_name, Some(run.version))
            }
            EventTarget::Key { workflow_name, .. } => (workflow_name.clone(), None),
        };
        self.check_declared_event(workflow, version, topic, payload)
    }

    /// Checks a JSON event on `topic` (already checked against the limits) against the
    /// declarations of `workflow`: of exactly `version` when given, else of any version.
    pub(super) fn check_declared_event(
        &self,
        workflow: String,
        version: Option<Option<String>>,
        topic: &str,
        payload: &Value,
    ) -> Result<(), ClientError> {
        if self.registry.latest(&workflow).is_none() {
            return Err(ClientError::UnknownWorkflow {
                name: workflow,
                version: version.flatten(),
            });
        }
        let declared = declarations(&workflow, version.as_ref().map(Option::as_deref), topic);
        if declared.is_empty() {
            return Err(ClientError::UndeclaredEvent {
                declared: declared_topics(&workflow),
                workflow,
                topic: topic.to_owned(),
            });
        }
        let mut refusal = None;
        for declaration in declared {
            match check_declared(declaration, payload) {
                Ok(()) => {
                    refusal = None;
                    break;
                }
                Err(violations) => refusal = refusal.or(Some(violations)),
            }
        }
        match refusal {
            Some(violations) => Err(ClientError::InvalidEvent {
                workflow,
                topic: topic.to_owned(),
                violations,
            }),
            None => Ok(()),
        }
    }
}

/// The checks of a JSON event's topic and payload that need no run: the [`limits`], and a
/// topic without the call suffix's separator.
pub(super) fn check_json_event_limits(topic: &str, payload: &Value) -> Result<(), ClientError> {
    limits::check_topic(topic)?;
    // A wait on it could never be told from a repeated wait on another topic.
    crate::replay::check_chosen_name(Field::Topic, topic)?;
    // First: the schema validator recurses through the document.
    limits::check_json(Field::EventPayload, payload)?;
    Ok(())
}

/// A typed payload as stored, or why it cannot be: it must read back as itself.
pub(super) fn typed_payload<E: Event>(payload: &E) -> Result<Value, ClientError> {
    limits::check_finite(payload).map_err(|found| {
        ClientError::Json(serde::ser::Error::custom(format!(
            "the event payload: {found}"
        )))
    })?;
    let payload = serde_json::to_value(payload).map_err(ClientError::Json)?;
    limits::check_json(Field::EventPayload, &payload)?;
    limits::check_round_trip::<E>(&payload).map_err(ClientError::Json)?;
    Ok(payload)
}

/// Validates `payload` against the declared payload type: its JSON Schema, then decoding.
fn check_declared(declaration: &EventDeclaration, payload: &Value) -> Result<(), Vec<Violation>> {
    let schema = (declaration.schema)();
    let validator = jsonschema::validator_for(&schema).map_err(|error| {
        vec![Violation {
            path: String::new(),
            message: format!("the event's payload schema is invalid: {error}"),
        }]
    })?;
    let violations: Vec<Violation> = validator
        .iter_errors(payload)
        .map(|error| Violation {
            path: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        })
        .collect();
    if !violations.is_empty() {
        return Err(violations);
    }
    (declaration.check)(payload).map_err(|error| {
        vec![Violation {
            path: String::new(),
            message: format!("does not decode into the payload type: {error}"),
        }]
    })
}
