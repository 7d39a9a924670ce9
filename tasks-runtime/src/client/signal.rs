//! Signal-with-start: an event sent to the run of a workflow and an idempotency key,
//! starting that run when it does not exist, in one store call
//! ([`EventStore::signal_with_start`](crate::EventStore::signal_with_start)).

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use serde_json::Value;

use super::events::{Payload, check_json_event_limits, typed_payload};
use super::start::StartBuilder;
use super::{ClientError, RunHandle};
use crate::events::{Event, SentEvent, SignalWithStart};
use crate::model::WorkflowRun;

/// A start that also sends an event: made by [`StartBuilder::with_event`] (typed) or
/// [`StartBuilder::with_event_by_topic`] (a topic with a JSON payload), and sent by
/// `.await`, which returns [`Signalled`].
///
/// ```no_run
/// # use tasks_runtime as tasks;
/// # #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// # struct Added { sku: String }
/// # impl tasks::Event for Added { const TOPIC: &'static str = "added"; }
/// # async fn demo(client: tasks::Client) -> Result<(), Box<dyn std::error::Error>> {
/// // Every "item added" webhook for cart 42 lands in the one run of `cart` keyed by it,
/// // started by the first of them.
/// let signalled = client
///     .start_by_name("cart", serde_json::json!({ "cart_id": 42 }))
///     .idempotency_key("cart-42")
///     .with_event(&Added { sku: "tea".into() })
///     .dedup_key("webhook-delivery-7")
///     .await?;
/// println!("run {} (created: {})", signalled.run.id, signalled.created);
/// # Ok(()) }
/// ```
///
/// The start needs an idempotency key: the key names the run the event goes to. The store
/// creates the run with the event in its mailbox, or sends the event to the run that holds
/// the key, in one transaction: racing calls for one key start one run, which holds each of
/// their events once. A run that finished and still holds its key (the default scope,
/// [`IdempotencyScope::ForEver`](crate::IdempotencyScope::ForEver)) cannot take the event:
/// [`StoreError::WrongState`](crate::StoreError::WrongState), and nothing is stored. With
/// [`IdempotencyScope::WhileActive`](crate::IdempotencyScope::WhileActive) the finished run
/// has released its key, so a new run starts and gets the event.
///
/// Errors: those of the start (see [`StartBuilder`]) and of the send (see
/// [`SendEventBuilder`](crate::SendEventBuilder)): a JSON event is checked against the
/// events the started workflow's version declares. A start without an idempotency key is
/// [`ClientError::Store`] with [`StoreError::InvalidArgument`](crate::StoreError::InvalidArgument).
#[must_use = "a signal-with-start does nothing until it is awaited"]
pub struct SignalWithStartBuilder<'c, T> {
    start: StartBuilder<'c, T>,
    topic: String,
    payload: Payload,
    dedup_key: Option<String>,
}

impl<T> std::fmt::Debug for SignalWithStartBuilder<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalWithStartBuilder")
            .field("start", &self.start)
            .field("topic", &self.topic)
            .field("dedup_key", &self.dedup_key)
            .finish_non_exhaustive()
    }
}

/// What a signal-with-start returns: the run's handle, whether this call created the run,
/// and the event it sent.
#[derive(Debug)]
#[non_exhaustive]
pub struct Signalled<T> {
    /// The handle of the run the event went to.
    pub handle: RunHandle<T>,
    /// The run as the call left it: just created (pending), or the run that held the key.
    pub run: WorkflowRun,
    /// This call created the run; `false` when a run held the key already.
    pub created: bool,
    /// The stored event (for a repeated deduplication key, the first one sent with it).
    pub event: SentEvent,
}

impl<'c, T> StartBuilder<'c, T> {
    /// Turns this start into a signal-with-start of the typed event `event`: it goes to the
    /// run that holds this start's idempotency key, which is started first when there is
    /// none (see [`SignalWithStartBuilder`]).
    pub fn with_event<E: Event>(self, event: &E) -> SignalWithStartBuilder<'c, T> {
        SignalWithStartBuilder {
            start: self,
            topic: E::TOPIC.to_owned(),
            payload: Payload::Typed(typed_payload(event)),
            dedup_key: None,
        }
    }

    /// Like [`StartBuilder::with_event`], with a JSON payload on `topic`, checked against the
    /// events the workflow declares, as [`Client::send_event_by_topic`](crate::Client::send_event_by_topic)
    /// checks one.
    pub fn with_event_by_topic(self, topic: &str, payload: Value) -> SignalWithStartBuilder<'c, T> {
        SignalWithStartBuilder {
            start: self,
            topic: topic.to_owned(),
            payload: Payload::Json(payload),
            dedup_key: None,
        }
    }
}

impl<'c, T> SignalWithStartBuilder<'c, T> {
    /// Deduplication key of the event: a second send to the same run and topic with this
    /// key stores nothing and returns the first event (a retried webhook delivers once).
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    async fn send(self) -> Result<Signalled<T>, ClientError> {
        let (client, definition, start) = self.start.checked()?;
        let payload = match self.payload {
            Payload::Typed(payload) => payload?,
            Payload::Json(payload) => {
                check_json_event_limits(&self.topic, &payload)?;
                let version = Some(definition.version.map(str::to_owned));
                client.check_declared_event(
                    definition.name.to_owned(),
                    version,
                    &self.topic,
                    &payload,
                )?;
                payload
            }
        };
        let params = SignalWithStart {
            start,
            topic: self.topic,
            payload,
            dedup_key: self.dedup_key,
        };
        params.check(client.store.namespace())?;
        let outcome = client
            .store
            .contract()
            .events()?
            .signal_with_start(params)
            .await?;
        if outcome.created {
            crate::metrics::run_started(definition.name);
        }
        tracing::debug!(
            run.id = %outcome.run.id,
            workflow.name = definition.name,
            created = outcome.created,
            duplicate = outcome.sent.duplicate,
            "signal-with-start"
        );
        Ok(Signalled {
            handle: client.handle(outcome.run.id),
            run: outcome.run,
            created: outcome.created,
            event: outcome.sent,
        })
    }
}

impl<'c, T: 'c> IntoFuture for SignalWithStartBuilder<'c, T> {
    type Output = Result<Signalled<T>, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}
