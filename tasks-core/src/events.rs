//! Events sent to a run: the typed [`Event`] trait, and the parameters and outcomes of the
//! store operations [`EventStore::send_event`],
//! [`EventStore::wait_for_event`] and
//! [`EventStore::list_events`].
//!
//! Each topic of a run is a FIFO mailbox. A send stores the event (once per deduplication
//! key) and wakes the run if it is parked waiting on that topic; a wait, a step attempt of
//! kind [`StepKind::Event`], consumes the oldest unconsumed event of
//! its topic, and its completed attempt holds the event, so every replay reads the same one.

#[cfg(doc)]
use crate::{Notification, StepKind};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::StoreError;
use crate::error::StoreResult;
use crate::holder::Holder;
use crate::limits::{self, Field, LimitError};
use crate::model::{StepAttempt, WorkflowRun};
use crate::store::CreateRun;

/// A type sent to runs as an event: its payload type, bound to a topic.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, schemars::JsonSchema)]
/// struct Approval {
///     approved: bool,
///     by: String,
/// }
///
/// impl tasks_core::Event for Approval {
///     const TOPIC: &'static str = "approval";
/// }
/// ```
///
/// `client.send_event::<Approval>(run_id, &approval)` and
/// `ctx.wait_for_event::<Approval>()` then agree on the topic and the type. A workflow
/// declares the events it accepts (`#[workflow(events(Approval))]`) so that a JSON send
/// (`Client::send_event_by_topic` of the engine, the command line) is checked against the payload's JSON
/// Schema.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an event type: it does not implement `tasks::Event`",
    label = "an event type binds a topic to its payload type",
    note = "derive `Serialize`, `Deserialize` and `JsonSchema`, then implement `tasks::Event` for it with its `TOPIC`"
)]
pub trait Event:
    Serialize + DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static
{
    /// The topic: the name of the run's mailbox this event goes to.
    const TOPIC: &'static str;
}

/// An event a workflow accepts: what `#[workflow(events(Approval))]` registers for each
/// event type (through `inventory`), so that a JSON send is checked against the payload's
/// JSON Schema and an undeclared topic is refused.
#[derive(Debug)]
pub struct EventDeclaration {
    /// The workflow name.
    pub workflow: &'static str,
    /// The workflow version, if versioned.
    pub version: Option<&'static str>,
    /// The topic ([`Event::TOPIC`]).
    pub topic: &'static str,
    /// The JSON Schema of the payload type.
    pub schema: fn() -> Value,
    /// Whether a JSON payload decodes into the payload type: [`check_payload`].
    pub check: fn(&Value) -> Result<(), serde_json::Error>,
}

/// Link-time registration of an [`EventDeclaration`], collected by `inventory`.
#[derive(Debug)]
pub struct EventRegistration(pub &'static EventDeclaration);

inventory::collect!(EventRegistration);

/// Whether `payload` decodes into `E` (and reads back as the same value): the
/// [`EventDeclaration::check`] of `E`.
pub fn check_payload<E: Event>(payload: &Value) -> Result<(), serde_json::Error> {
    limits::check_round_trip::<E>(payload)
}

/// The declarations of `topic` by the workflow `name`: of exactly `version` when given
/// (`Some(None)` is the unversioned workflow), else of any version. Every `#[workflow]`
/// linked into the binary counts.
pub fn declarations(
    name: &str,
    version: Option<Option<&str>>,
    topic: &str,
) -> Vec<&'static EventDeclaration> {
    inventory::iter::<EventRegistration>
        .into_iter()
        .map(|registration| registration.0)
        .filter(|declared| declared.workflow == name && declared.topic == topic)
        .filter(|declared| version.is_none_or(|version| declared.version == version))
        .collect()
}

/// The topics the workflow `name` (any version) declares, sorted, for messages.
pub fn declared_topics(name: &str) -> Vec<&'static str> {
    let mut topics: Vec<&'static str> = inventory::iter::<EventRegistration>
        .into_iter()
        .filter(|registration| registration.0.workflow == name)
        .map(|registration| registration.0.topic)
        .collect();
    topics.sort_unstable();
    topics.dedup();
    topics
}

/// The run an event goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventTarget {
    /// The run with this id.
    Run(Uuid),
    /// The run of this workflow started with this idempotency key (a webhook that only
    /// knows a business id).
    Key {
        /// The workflow name.
        workflow_name: String,
        /// The idempotency key the run was started with.
        idempotency_key: String,
    },
}

impl From<Uuid> for EventTarget {
    fn from(run_id: Uuid) -> Self {
        EventTarget::Run(run_id)
    }
}

/// Parameters of [`EventStore::send_event`].
#[derive(Debug, Clone)]
pub struct SendEvent {
    /// The run the event goes to.
    pub target: EventTarget,
    /// The mailbox.
    pub topic: String,
    /// The payload.
    pub payload: Value,
    /// A second send to the same run and topic with the same key stores nothing and
    /// returns the first event.
    pub dedup_key: Option<String>,
}

impl SendEvent {
    /// Checks the namespace, the target, the topic, the payload and the key against the [`limits`].
    /// A store reaches it through its operation's function in
    /// [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_namespace(namespace)?;
        if let EventTarget::Key {
            workflow_name,
            idempotency_key,
        } = &self.target
        {
            limits::check_text(
                Field::WorkflowName,
                workflow_name,
                limits::MAX_WORKFLOW_NAME_BYTES,
            )?;
            limits::check_text(
                Field::IdempotencyKey,
                idempotency_key,
                limits::MAX_IDEMPOTENCY_KEY_BYTES,
            )?;
        }
        limits::check_topic(&self.topic)?;
        limits::check_json(Field::EventPayload, &self.payload)?;
        if let Some(key) = &self.dedup_key {
            limits::check_text(Field::DedupKey, key, limits::MAX_IDEMPOTENCY_KEY_BYTES)?;
        }
        Ok(())
    }
}

/// Parameters of [`EventStore::signal_with_start`]: a send to the run of
/// `(start.workflow_name, start.idempotency_key)`, which is created from `start` when no run
/// holds that key.
#[derive(Debug, Clone)]
pub struct SignalWithStart {
    /// The run to create when none holds its idempotency key, which it must have.
    pub start: CreateRun,
    /// The mailbox.
    pub topic: String,
    /// The payload.
    pub payload: Value,
    /// As [`SendEvent::dedup_key`]: a second send to the same run and topic with the same
    /// key stores nothing and returns the first event.
    pub dedup_key: Option<String>,
}

impl SignalWithStart {
    /// Checks the start ([`CreateRun::check`]) and the event ([`SendEvent::check`]) against
    /// the [`limits`]; a start without an idempotency key is
    /// [`StoreError::InvalidArgument`]: there would be no run to find, only one to create.
    /// A store reaches it through [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), StoreError> {
        self.target()?;
        self.start.check(namespace)?;
        self.send().check(namespace)?;
        Ok(())
    }

    /// The run the event goes to: the holder of the start's workflow name and key.
    pub fn target(&self) -> Result<EventTarget, StoreError> {
        match &self.start.idempotency_key {
            Some(key) => Ok(EventTarget::Key {
                workflow_name: self.start.workflow_name.clone(),
                idempotency_key: key.clone(),
            }),
            None => Err(StoreError::InvalidArgument(
                "a signal-with-start needs an idempotency key: it names the run to signal".into(),
            )),
        }
    }

    /// The send this is, to the run of its key (its target is the run's key even before the
    /// key is checked: [`SignalWithStart::target`] refuses a start without one).
    pub fn send(&self) -> SendEvent {
        SendEvent {
            target: EventTarget::Key {
                workflow_name: self.start.workflow_name.clone(),
                idempotency_key: self.start.idempotency_key.clone().unwrap_or_default(),
            },
            topic: self.topic.clone(),
            payload: self.payload.clone(),
            dedup_key: self.dedup_key.clone(),
        }
    }
}

/// The outcome of [`EventStore::signal_with_start`].
#[derive(Debug, Clone, PartialEq)]
pub struct SignalledRun {
    /// The run the event went to, as the call left it: the one it created (pending), or the
    /// one that held the key.
    pub run: WorkflowRun,
    /// This call created the run; `false` when a run held the key already.
    pub created: bool,
    /// The send: the stored event, whether it was a duplicate, whether it woke the run.
    pub sent: SentEvent,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunEvent {
    /// The namespace of its run.
    pub namespace: String,
    /// The event's id.
    pub id: Uuid,
    /// The run it was sent to.
    pub workflow_run_id: Uuid,
    /// Its mailbox.
    pub topic: String,
    /// The payload.
    pub payload: Value,
    /// The deduplication key it was sent with.
    pub dedup_key: Option<String>,
    /// The step name of the wait that consumed it.
    pub consumed_by: Option<String>,
    /// When it was consumed, by the store's clock.
    pub consumed_at: Option<DateTime<Utc>>,
    /// When it was stored, by the store's clock.
    pub created_at: DateTime<Utc>,
}

/// The outcome of [`EventStore::send_event`].
#[derive(Debug, Clone, PartialEq)]
pub struct SentEvent {
    /// The stored event: the new one, or for a duplicate the first one sent with its key.
    pub event: RunEvent,
    /// The send carried a deduplication key already used: nothing was stored.
    pub duplicate: bool,
    /// The run was parked waiting on this topic and is available now.
    pub woke: bool,
}

/// Parameters of [`EventStore::wait_for_event`].
#[derive(Debug, Clone)]
pub struct WaitForEvent {
    /// The run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
    /// The resolved step name of the wait.
    pub step_name: String,
    /// The mailbox.
    pub topic: String,
    /// How long the wait may last, from its first attempt (by the store's clock); `None`
    /// waits for ever.
    pub timeout: Option<Duration>,
    /// The wait's place in the run (`{"position": ..}`), recorded in its attempt's config
    /// under `call` and compared on replay; `None` records none.
    pub call: Option<Value>,
}

impl WaitForEvent {
    /// Checks the holder's worker id, the step name, the topic and the timeout against the [`limits`]. A
    /// store reaches it through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        limits::check_topic(&self.topic)?;
        if let Some(timeout) = self.timeout {
            limits::check_duration(Field::EventTimeout, timeout)?;
        }
        Ok(())
    }

    /// The config of the wait's step attempt: the topic and the timeout.
    pub fn config(&self) -> Value {
        let mut config = json!({
            "topic": self.topic,
            "timeoutMs": self.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        });
        if let Some(call) = &self.call {
            config["call"] = call.clone();
        }
        config
    }
}

/// When the wait of `attempt` times out: its creation plus the timeout stored in its config
/// (so a replay keeps the first execution's deadline), or [`limits::LATEST`] without one
/// or when the sum would pass it. The run parks until then: the instant is always inside
/// the stores' range ([`limits::EARLIEST`]..=[`limits::LATEST`], given an attempt created
/// inside it), so a store writes it without a check of its own.
pub fn wait_until(attempt: &StepAttempt) -> DateTime<Utc> {
    attempt
        .config
        .get("timeoutMs")
        .and_then(Value::as_u64)
        .and_then(|ms| {
            limits::add_duration(
                Field::EventTimeout,
                attempt.created_at,
                Duration::from_millis(ms),
            )
            .ok()
        })
        .unwrap_or(limits::LATEST)
}

/// The outcome of [`EventStore::wait_for_event`].
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // One per event wait, like `ChildWait`; boxing would buy nothing.
pub enum EventWait {
    /// The wait is over: its attempt is completed, with the consumed event
    /// (`{"event": RunEvent}`) or the timeout (`{"timedOut": true}`) as output.
    Done(StepAttempt),
    /// No event yet: the run is parked (sleeping until the timeout, or for ever) and the
    /// worker must let it go; a send on the topic makes it available at once.
    Parked(WorkflowRun),
}

/// The refusal of a send to a run that does not exist: [`StoreError::RunNotFound`], or
/// [`StoreError::RunKeyNotFound`] for a target by workflow and key.
pub fn not_found(target: &EventTarget) -> StoreError {
    match target {
        EventTarget::Run(id) => StoreError::RunNotFound { id: *id },
        EventTarget::Key {
            workflow_name,
            idempotency_key,
        } => StoreError::RunKeyNotFound {
            workflow_name: workflow_name.clone(),
            idempotency_key: idempotency_key.clone(),
        },
    }
}

/// The output of a wait that consumed `event`.
pub fn received_output(event: &RunEvent) -> Value {
    json!({ "event": event })
}

/// The output of a wait that timed out.
pub fn timed_out_output() -> Value {
    json!({ "timedOut": true })
}

/// What a completed wait's output says: the consumed event, or `None` for a timeout.
pub fn decode_output(output: &Value) -> Result<Option<RunEvent>, serde_json::Error> {
    match output.get("event") {
        Some(event) => serde_json::from_value(event.clone()).map(Some),
        None => Ok(None),
    }
}

/// Events sent to a run (see the module docs). A capability: reached through
/// [`Store::events`](crate::Store::events).
#[async_trait::async_trait]
pub trait EventStore: Send + Sync {
    /// Sends an event to a live run, in one transaction that first locks the run: stores it
    /// in the run's mailbox for `topic` (FIFO), and when the run is parked waiting on that
    /// topic makes it available now and announces it with [`Notification::RunAvailable`].
    /// With a deduplication key already used for this run and topic, nothing is stored and
    /// the first event is returned (`duplicate`). A paused run keeps the event for when it
    /// is resumed.
    ///
    /// Errors: [`StoreError::RunNotFound`] (or [`StoreError::RunKeyNotFound`] for a target
    /// by workflow and key); [`StoreError::WrongState`] for a completed, failed or canceled
    /// run. Nothing is stored then.
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent>;

    /// Sends an event to the run of `(params.start.workflow_name,
    /// params.start.idempotency_key)`, first creating that run from `params.start` when no
    /// run holds the key, in one transaction: the run is created with the event in its
    /// mailbox, or the event is sent to the run that holds the key, or nothing happens.
    /// Racing calls for one key make one run, which holds every one of their events (each
    /// once; a [deduplication key](SignalWithStart::dedup_key) stores a repeat once). The
    /// key is held as for [`RunStore::create_run`](crate::RunStore::create_run): a holder
    /// whose [scope](crate::IdempotencyScope) lapsed (a `WhileActive` run that finished, a
    /// `Ttl` that passed) releases it, and a new run is created. Announces the new run
    /// ([`Notification::RunAvailable`]) and wakes a run parked on the topic, as a send does.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a start without an idempotency key;
    /// [`StoreError::WrongState`] when the key's holder is completed, failed or canceled
    /// and still holds it (nothing is stored: the event cannot be delivered, and no run is
    /// created); those of [`RunStore::create_run`](crate::RunStore::create_run).
    async fn signal_with_start(&self, params: SignalWithStart) -> StoreResult<SignalledRun>;

    /// The event wait `params.step_name` of a run that `params.holder` holds, in one
    /// transaction that first locks the run: creates the wait's running step attempt (kind
    /// [`StepKind::Event`], with the topic and timeout in its config) unless it exists, then
    /// consumes the oldest unconsumed event of the topic, marking it consumed by the step,
    /// and completes the attempt with it ([`EventWait::Done`]); else, when the timeout
    /// (counted from the attempt's creation, by the store's clock) has passed, completes the
    /// attempt as timed out; else parks the run (sleeping until the timeout, or
    /// [`limits::LATEST`]) waiting on the topic ([`EventWait::Parked`]). A wait whose attempt
    /// is already completed returns it as it is. Worker-side errors.
    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait>;

    /// Every event sent to a run, oldest first, consumed or not.
    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>>;
}

/// What an event wait does once it holds its running attempt: the protocol of
/// [`EventStore::wait_for_event`], decided by
/// [`wait_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStep {
    /// Consume the oldest unconsumed event of the topic and complete the attempt with it.
    Consume,
    /// Park the run until the wait's timeout, waiting on the topic.
    Park,
    /// Complete the attempt as timed out.
    TimeOut,
}

/// The next step of an event wait at `now` whose timeout is `until` ([`wait_until`]),
/// given whether an unconsumed event of its topic is there: an event is consumed even
/// when the timeout passed (it was sent before the wait looked), otherwise the run parks
/// until the timeout, and times out once it is reached.
pub fn wait_step(event_waiting: bool, until: DateTime<Utc>, now: DateTime<Utc>) -> WaitStep {
    if event_waiting {
        WaitStep::Consume
    } else if until > now {
        WaitStep::Park
    } else {
        WaitStep::TimeOut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_round_trip() {
        let event = RunEvent {
            namespace: "n".into(),
            id: Uuid::now_v7(),
            workflow_run_id: Uuid::now_v7(),
            topic: "approval".into(),
            payload: json!({ "ok": true }),
            dedup_key: None,
            consumed_by: Some("event/approval".into()),
            consumed_at: Some(Utc::now()),
            created_at: Utc::now(),
        };
        assert_eq!(
            decode_output(&received_output(&event)).unwrap(),
            Some(event)
        );
        assert_eq!(decode_output(&timed_out_output()).unwrap(), None);
    }

    #[test]
    fn checks_refuse_before_any_sql() {
        let send = SendEvent {
            target: EventTarget::Run(Uuid::now_v7()),
            topic: "t".repeat(limits::MAX_TOPIC_BYTES + 1),
            payload: json!(1),
            dedup_key: None,
        };
        assert_eq!(send.check("n").unwrap_err().field(), Field::Topic);
        let wait = WaitForEvent {
            call: None,
            run_id: Uuid::now_v7(),
            holder: crate::Holder::new("w", 1),
            step_name: "event/t".into(),
            topic: "t".into(),
            timeout: Some(limits::MAX_DURATION + Duration::from_secs(1)),
        };
        assert_eq!(wait.check().unwrap_err().field(), Field::EventTimeout);
    }

    #[test]
    fn a_wait_ends_inside_the_stores_range() {
        let attempt = |created_at: DateTime<Utc>, config: Value| StepAttempt {
            namespace: "n".into(),
            id: Uuid::now_v7(),
            workflow_run_id: Uuid::now_v7(),
            step_name: "event/t".into(),
            kind: crate::StepKind::Event,
            status: crate::model::StepStatus::Running,
            config,
            context: None,
            output: None,
            error: None,
            args: None,
            child_workflow_run_namespace: None,
            child_workflow_run_id: None,
            started_at: None,
            finished_at: None,
            created_at,
            updated_at: created_at,
        };
        let now = Utc::now();
        let hour = json!({ "timeoutMs": 3_600_000u64 });
        assert_eq!(
            wait_until(&attempt(now, hour.clone())),
            now + chrono::TimeDelta::hours(1)
        );
        assert_eq!(wait_until(&attempt(now, json!({}))), limits::LATEST);
        // A timeout that would pass the last instant a store can hold parks until that one.
        let late = limits::LATEST - chrono::TimeDelta::minutes(1);
        assert_eq!(wait_until(&attempt(late, hour)), limits::LATEST);
        let longest = json!({ "timeoutMs": limits::MAX_DURATION.as_millis() as u64 });
        let until = wait_until(&attempt(late, longest));
        assert!(limits::check_time(Field::EventTimeout, until).is_ok());
    }

    #[test]
    fn a_wait_consumes_parks_or_times_out() {
        let now = Utc::now();
        let later = now + chrono::TimeDelta::seconds(1);
        assert_eq!(wait_step(true, now, now), WaitStep::Consume);
        assert_eq!(wait_step(true, later, now), WaitStep::Consume);
        assert_eq!(wait_step(false, later, now), WaitStep::Park);
        assert_eq!(wait_step(false, now, now), WaitStep::TimeOut);
    }
}
