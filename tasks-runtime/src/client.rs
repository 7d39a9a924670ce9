//! The client: start runs, await their results, and operate on them.
//!
//! A [`Client`] holds a store and the registry of linked workflows. Its methods follow a
//! run's path from the caller's side:
//!
//! - `start`: starting runs with a [`StartBuilder`], typed or by name with JSON input, with
//!   [`StartOptions`], and inside the caller's Postgres transaction;
//! - `handle`: a started run's [`RunHandle`], awaiting its result ([`RunError`]);
//! - `wait`: waiting for a run's status without polling, and [`WaitError`], the error of
//!   every wait (a status, a condition on the run, published state);
//! - `runs`: operations on runs by id: reading and listing them, cancel, pause, resume,
//!   retry, fork and purge;
//! - `events` and `state`: sending events to a run and reading what it published;
//!   `signal`: sending an event to the run of an idempotency key, starting it if need be;
//! - `schedules`: cron schedules (behind the `schedules` feature); `queues`: the
//!   configuration of named queues.
//!
//! # Errors
//!
//! Each method returns one of four errors, by what it does:
//!
//! - [`ClientError`]: starts, sends, reading published state, creating schedules. Refused
//!   before the store saw it (nothing stored: [`InvalidInput`], [`LimitError`],
//!   [`ConcurrencyKeyError`](crate::flow::ConcurrencyKeyError), an unknown workflow, an
//!   undeclared or invalid event), or the store refused or failed ([`StoreError`]).
//! - [`RunError`]: awaiting a run's result ([`RunHandle::result`]) and reading it through
//!   its handle: the run failed (with its recorded error), was canceled, or its output does
//!   not decode; or it does not exist, did not finish in time, or the store failed.
//! - [`WaitError`]: every wait on a run that is not its result (a status, a condition on
//!   the run, a published state value): the run does not exist, finished first, or the
//!   timeout passed, with what was awaited and how far the run had got ([`Awaited`]).
//! - [`StoreError`]: operations on runs by id, queues, reading and pausing schedules.

use std::marker::PhantomData;
use std::sync::Arc;

use uuid::Uuid;

mod events;
mod handle;
mod queues;
mod runs;
#[cfg(feature = "schedules")]
mod schedules;
mod signal;
mod start;
mod state;
mod wait;

pub use events::SendEventBuilder;
pub use handle::{RunError, RunHandle};
pub use signal::{SignalWithStartBuilder, Signalled};
pub use start::{StartBuilder, StartOptions, Started};
pub use wait::{Awaited, WAIT_SAFETY_REREAD, WaitError};

use crate::error::StoreError;
#[cfg(doc)]
use crate::limits;
use crate::limits::LimitError;
use crate::registry::{InvalidInput, Registry, RegistryError, Violation};
use crate::store::SharedStore;

/// Why a run could not be started or looked at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No workflow with this name (and version) is registered in this binary.
    #[error("workflow {name:?}{} is not registered", version.as_ref().map(|v| format!(" version {v:?}")).unwrap_or_default())]
    UnknownWorkflow {
        /// The name asked for.
        name: String,
        /// The version asked for, if any.
        version: Option<String>,
    },
    /// The input does not match the workflow's input schema, or does not decode into its
    /// input type (a number out of the type's range), or a typed input holds a NaN or
    /// infinite float anywhere (JSON has neither); nothing was stored.
    #[error(transparent)]
    InvalidInput(#[from] InvalidInput),
    /// A value exceeds one of the [`limits`] (a name or key too long, a
    /// payload too large or too deep, NUL, an instant or duration out of range); nothing
    /// was stored. The client checks before the store does, and a store's own
    /// [`StoreError::Limit`] is reported here too.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The input could not be serialized or parsed.
    #[error("the input is not valid JSON for this workflow: {0}")]
    Json(#[source] serde_json::Error),
    /// The registry of linked workflows and steps could not be built (duplicates, or an
    /// invalid name).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(StoreError),
    // Events sent to a run.
    /// A JSON event whose topic the run's workflow does not declare
    /// (`#[workflow(events(...))]`); nothing was stored.
    #[error("workflow {workflow:?} does not accept events on topic {topic:?} (it declares: {})", if declared.is_empty() { "none".to_owned() } else { declared.join(", ") })]
    UndeclaredEvent {
        /// The workflow of the run.
        workflow: String,
        /// The topic of the event.
        topic: String,
        /// The topics the workflow declares.
        declared: Vec<&'static str>,
    },
    // Published state.
    /// A published value that does not decode into the type asked for
    /// ([`Client::get_state`]).
    #[error(
        "the value of state {key:?} of workflow run {run_id} does not decode into the requested type: {source}"
    )]
    InvalidState {
        /// The run.
        run_id: Uuid,
        /// The key.
        key: String,
        /// Why it does not decode.
        #[source]
        source: serde_json::Error,
    },
    // Schedules.
    /// A cron expression or timezone that does not parse; nothing was stored.
    #[cfg(feature = "schedules")]
    #[error(transparent)]
    InvalidSchedule(#[from] crate::schedule::ScheduleError),
    /// The workflow derives each run's concurrency key from its input and the key function
    /// failed (it panicked, or the input does not decode); nothing was stored. A derived key
    /// past the limits (NUL, too long) is a [`ClientError::Limit`], as a given one is.
    #[error(transparent)]
    ConcurrencyKey(#[from] crate::flow::ConcurrencyKeyError),
    /// A JSON event payload that does not match the payload type's JSON Schema, or does not
    /// decode into it; nothing was stored. Every violation is reported with its path.
    #[error("invalid payload for event {topic:?} of workflow {workflow:?}: {}", violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidEvent {
        /// The workflow of the run.
        workflow: String,
        /// The topic of the event.
        topic: String,
        /// Every violation, each with its JSON path.
        violations: Vec<Violation>,
    },
}

impl From<StoreError> for ClientError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Limit(limit) => ClientError::Limit(limit),
            other => ClientError::Store(other),
        }
    }
}

/// Starts and operates on runs.
///
/// ```no_run
/// # async fn demo(store: tasks_runtime::postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
/// use tasks_runtime::Client;
///
/// let client = Client::new(store)?;
/// let handle = client
///     .start_by_name("checkout", serde_json::json!({ "order_id": 7 }))
///     .idempotency_key("order-7")
///     .await?;
/// let output = handle.result().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    store: SharedStore,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.store.namespace())
            .field("registry", &self.registry)
            .finish()
    }
}

impl Client {
    /// A client on `store` that knows every workflow linked into this binary.
    pub fn new(store: impl Into<SharedStore>) -> Result<Self, RegistryError> {
        Ok(Client::with_registry(
            store,
            Arc::new(Registry::from_inventory()?),
        ))
    }

    /// A client on `store` with an explicit registry.
    pub fn with_registry(store: impl Into<SharedStore>, registry: Arc<Registry>) -> Self {
        Client {
            store: store.into(),
            registry,
        }
    }

    /// The store behind the client.
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The workflows this client knows.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Replays the stored histories of the namespace's unfinished runs (and a sample of its
    /// finished ones, if `options` asks) against this client's workflows, without executing
    /// any step or writing anything: [`verify_replay`](crate::verify_replay) on this
    /// client's store and registry. The deploy gate of the guide's versioning chapter.
    pub async fn verify_replay(
        &self,
        options: &crate::VerifyOptions,
    ) -> crate::StoreResult<crate::VerifyReport> {
        crate::verify::verify_replay(&self.store, &self.registry, options).await
    }

    /// A handle on an existing run whose output decodes as `T` (use `Value` when unsure).
    pub fn handle<T>(&self, run_id: Uuid) -> RunHandle<T> {
        RunHandle {
            run_id,
            store: self.store.clone(),
            output: PhantomData,
        }
    }
}
