//! Sending events to runs: [`Client::send_event`] (typed) and [`Client::send_event_json`]
//! (validated JSON, for other services and the command line).

use serde_json::Value;
use uuid::Uuid;

use super::{Client, ClientError};
use crate::events::{
    Event, EventDeclaration, EventTarget, SendEvent, SentEvent, declarations, declared_topics,
};
use crate::limits::{self, Field};
use crate::registry::Violation;

/// Options of a send.
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    dedup_key: Option<String>,
}

impl SendOptions {
    /// No options.
    pub fn new() -> Self {
        SendOptions::default()
    }

    /// Deduplication key: a second send to the same run and topic with this key stores
    /// nothing and returns the first event (a retried webhook delivers once).
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }
}

impl Client {
    /// Sends `payload` to run `run_id` on the topic [`Event::TOPIC`]; the compiler checks
    /// the payload type. The run is woken at once if it waits on the topic, otherwise the
    /// event waits in its mailbox for the run's next wait.
    ///
    /// Errors: [`ClientError::Store`] with [`StoreError::RunNotFound`](crate::StoreError::RunNotFound)
    /// or [`StoreError::WrongState`](crate::StoreError::WrongState) (a completed, failed or
    /// canceled run); [`ClientError::Limit`] or [`ClientError::Json`] for a payload that
    /// cannot be stored as it is. Nothing is stored then.
    pub async fn send_event<E: Event>(
        &self,
        run_id: Uuid,
        payload: &E,
    ) -> Result<SentEvent, ClientError> {
        self.send_event_with(run_id, payload, SendOptions::new())
            .await
    }

    /// Like [`Client::send_event`], to a run given by id or by workflow and idempotency key
    /// ([`EventTarget::Key`], for a webhook that only knows a business id), with options.
    pub async fn send_event_with<E: Event>(
        &self,
        target: impl Into<EventTarget>,
        payload: &E,
        options: SendOptions,
    ) -> Result<SentEvent, ClientError> {
        limits::check_finite(payload).map_err(|found| {
            ClientError::Json(serde::ser::Error::custom(format!(
                "the event payload: {found}"
            )))
        })?;
        let payload = serde_json::to_value(payload).map_err(ClientError::Json)?;
        limits::check_json(Field::EventPayload, &payload)?;
        limits::check_round_trip::<E>(&payload).map_err(ClientError::Json)?;
        self.send(target.into(), E::TOPIC, payload, options).await
    }

    /// Sends a JSON event, as another service or the command line would. The run's
    /// workflow must declare the topic (`#[workflow(events(...))]`) in this binary: the
    /// payload is checked against the [`limits`], then validated against the declared
    /// payload type's JSON Schema (every violation reported with its path), then decoded
    /// into it; on any violation nothing is stored.
    ///
    /// A run given by id is read first to learn its workflow and version. A run given by
    /// workflow and key is checked against the declarations of every registered version of
    /// that workflow (it passes if one of them accepts it).
    ///
    /// Errors: those of [`Client::send_event`]; [`ClientError::UnknownWorkflow`] when the
    /// run's workflow is not linked into this binary; [`ClientError::UndeclaredEvent`];
    /// [`ClientError::InvalidEvent`].
    pub async fn send_event_json(
        &self,
        target: impl Into<EventTarget>,
        topic: &str,
        payload: Value,
        options: SendOptions,
    ) -> Result<SentEvent, ClientError> {
        let target = target.into();
        limits::check_topic(topic)?;
        // A wait on it could never be told from a repeated wait on another topic.
        crate::replay::check_chosen_name(Field::Topic, topic)?;
        // First: the schema validator recurses through the document.
        limits::check_json(Field::EventPayload, &payload)?;
        let (workflow, version) = match &target {
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
            match check_declared(declaration, &payload) {
                Ok(()) => {
                    refusal = None;
                    break;
                }
                Err(violations) => refusal = refusal.or(Some(violations)),
            }
        }
        if let Some(violations) = refusal {
            return Err(ClientError::InvalidEvent {
                workflow,
                topic: topic.to_owned(),
                violations,
            });
        }
        self.send(target, topic, payload, options).await
    }

    /// Like [`Client::send_event_json`], from JSON text. Malformed JSON is
    /// [`ClientError::Json`].
    pub async fn send_event_json_str(
        &self,
        target: impl Into<EventTarget>,
        topic: &str,
        payload: &str,
        options: SendOptions,
    ) -> Result<SentEvent, ClientError> {
        let payload: Value = serde_json::from_str(payload).map_err(ClientError::Json)?;
        self.send_event_json(target, topic, payload, options).await
    }

    async fn send(
        &self,
        target: EventTarget,
        topic: &str,
        payload: Value,
        options: SendOptions,
    ) -> Result<SentEvent, ClientError> {
        let params = SendEvent {
            target,
            topic: topic.to_owned(),
            payload,
            dedup_key: options.dedup_key,
        };
        params.check(self.store.namespace())?;
        Ok(self.store.contract().events()?.send_event(params).await?)
    }
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
