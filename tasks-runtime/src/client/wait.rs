//! Waiting for a run to reach a status without polling: [`RunHandle::wait_for_status`] and
//! [`RunHandle::wait_for_run`], and the same on [`Client`] by run id; and [`WaitError`], the
//! error of every wait of the client (the state waits of `client/state.rs` too).
//!
//! The wait subscribes to the store's notifications *before* it reads the run, so a change
//! between the read and the subscription cannot be lost. It reads the run again only when
//! the store announces news of it ([`Notification::StatusChanged`],
//! [`Notification::RunFinished`]) or that notifications may have been lost
//! ([`Notification::Missed`]), plus once every [`WAIT_SAFETY_REREAD`] as a safety net: that is
//! not a polling loop, only a bound on how long a lost notification can delay the wait.

use std::time::Duration;

use futures::StreamExt as _;
use uuid::Uuid;

use super::{Client, RunHandle};
use crate::error::{Operation, StoreError};
use crate::limits::LimitError;
use crate::model::{RunStatus, WorkflowRun};
use crate::store::{Notification, NotificationStream, SharedStore};

/// How often a wait reads the run again without any notification, in case one was lost on
/// the way (the store also announces a loss it knows of, [`Notification::Missed`], which
/// makes the wait read at once).
pub const WAIT_SAFETY_REREAD: Duration = Duration::from_secs(30);

/// Why a wait on a run ended without what it waited for: the error of every wait of the
/// client ([`RunHandle::wait_for_status`], [`RunHandle::wait_for_run`],
/// [`Client::wait_for_status`], [`Client::wait_for_run`], [`Client::wait_for_state`],
/// [`Client::wait_for_state_json`]).
///
/// Awaiting a run's result ([`RunHandle::result`]) is not one of them: it ends with the
/// run's outcome, and its error is a [`RunError`](super::RunError).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// The run does not exist (in the store's namespace).
    #[error("workflow run {run_id} does not exist")]
    NotFound {
        /// The run.
        run_id: Uuid,
    },
    /// The run finished (completed, failed or canceled) without what the wait awaited: a
    /// terminal run never changes again and publishes nothing more, so it never can. The
    /// run is as it was read.
    #[error("workflow run {} is {} and {}", run.id, run.status, awaited.never())]
    Finished {
        /// The run, terminal.
        run: Box<WorkflowRun>,
        /// What the wait awaited, and how far the run had got.
        awaited: Awaited,
    },
    /// The wait gave up after its timeout.
    #[error("workflow run {run_id}: {} within {waited:?}", awaited.not_yet())]
    Timeout {
        /// The run.
        run_id: Uuid,
        /// How long it waited.
        waited: Duration,
        /// What the wait awaited, and how far the run had got when it was last read.
        awaited: Awaited,
    },
    /// [`RunHandle::wait_for_status`] was given no status: nothing could ever match.
    #[error("no status to wait for")]
    NoStatus,
    /// The state value waited for does not decode into the type asked for
    /// ([`Client::wait_for_state`]).
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
    /// A state key past the [`limits`](crate::limits); nothing was read.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The store failed while waiting (or could not subscribe to its notifications, without
    /// which the wait would have to poll).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a wait awaited, and how far the run had got when it last read it: part of
/// [`WaitError::Finished`] and [`WaitError::Timeout`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Awaited {
    /// A status ([`RunHandle::wait_for_status`]) or a condition on the run
    /// ([`RunHandle::wait_for_run`]).
    Run {
        /// The run's status when it was last read, if it was read at all.
        status: Option<RunStatus>,
    },
    /// A version of a published state key after `after` ([`Client::wait_for_state`]).
    State {
        /// The key.
        key: String,
        /// The version waited past.
        after: u64,
        /// The key's version when it was last read, if it had one.
        version: Option<u64>,
    },
}

impl Awaited {
    fn never(&self) -> String {
        match self {
            Awaited::Run { .. } => "can never reach the awaited status".to_owned(),
            Awaited::State { key, after, .. } => {
                format!("published no version of state {key:?} after {after}")
            }
        }
    }

    fn not_yet(&self) -> String {
        match self {
            Awaited::Run { status } => format!(
                "did not reach the awaited status{}",
                status.map(|s| format!(" (it is {s})")).unwrap_or_default()
            ),
            Awaited::State { key, after, .. } => {
                format!("published no version of state {key:?} after {after}")
            }
        }
    }
}

impl<T> RunHandle<T> {
    /// Waits until the run's status is one of `statuses`, and returns the run as read then;
    /// gives up after `timeout`. It subscribes to the store's notifications before it
    /// reads the run (no change is lost in between) and reads it again only on news of it,
    /// not by polling (plus a safety re-read every [`WAIT_SAFETY_REREAD`]): every live status is announced when a transition leaves
    /// the run in it (sleeping, paused, pending, running), and terminal ones as a finish.
    ///
    /// ```no_run
    /// # async fn demo(handle: tasks_runtime::RunHandle<()>) -> Result<(), tasks_runtime::WaitError> {
    /// use std::time::Duration;
    /// use tasks_runtime::RunStatus;
    ///
    /// let parked = handle
    ///     .wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(10))
    ///     .await?;
    /// println!("sleeping until {:?}", parked.available_at);
    /// # Ok(()) }
    /// ```
    ///
    /// The run is matched as read: a status it leaves again within a read's round trip (a
    /// sleep of a few milliseconds, say) may be over before the wait sees it; the wait then
    /// goes on.
    ///
    /// Errors: [`WaitError::NotFound`]; [`WaitError::Finished`] once the run is in a
    /// terminal status not in `statuses`; [`WaitError::Timeout`]; [`WaitError::NoStatus`]
    /// for an empty `statuses`; [`WaitError::Store`].
    pub async fn wait_for_status(
        &self,
        statuses: &[RunStatus],
        timeout: Duration,
    ) -> Result<WorkflowRun, WaitError> {
        wait_for_status(&self.store, self.run_id, statuses, timeout).await
    }

    /// Waits until `wanted` holds for the run as read, and returns it; gives up after
    /// `timeout`. The run is read once at the start, then again on every notification about
    /// it (a status change, a finish) or a possible loss of notifications, and every
    /// [`WAIT_SAFETY_REREAD`]; `wanted` sees each read. For a condition that changes without a
    /// status change (a step recorded, say) this is only as prompt as the safety re-read.
    ///
    /// Errors: [`WaitError::NotFound`]; [`WaitError::Finished`] once the run is terminal and
    /// `wanted` refuses it; [`WaitError::Timeout`]; [`WaitError::Store`].
    pub async fn wait_for_run(
        &self,
        timeout: Duration,
        wanted: impl FnMut(&WorkflowRun) -> bool,
    ) -> Result<WorkflowRun, WaitError> {
        wait_for_run(&self.store, self.run_id, timeout, wanted).await
    }
}

impl Client {
    /// [`RunHandle::wait_for_status`] for run `run_id`.
    pub async fn wait_for_status(
        &self,
        run_id: Uuid,
        statuses: &[RunStatus],
        timeout: Duration,
    ) -> Result<WorkflowRun, WaitError> {
        wait_for_status(self.store(), run_id, statuses, timeout).await
    }

    /// [`RunHandle::wait_for_run`] for run `run_id`.
    pub async fn wait_for_run(
        &self,
        run_id: Uuid,
        timeout: Duration,
        wanted: impl FnMut(&WorkflowRun) -> bool,
    ) -> Result<WorkflowRun, WaitError> {
        wait_for_run(self.store(), run_id, timeout, wanted).await
    }
}

async fn wait_for_status(
    store: &SharedStore,
    run_id: Uuid,
    statuses: &[RunStatus],
    timeout: Duration,
) -> Result<WorkflowRun, WaitError> {
    if statuses.is_empty() {
        return Err(WaitError::NoStatus);
    }
    wait_for_run(store, run_id, timeout, |run| statuses.contains(&run.status)).await
}

async fn wait_for_run(
    store: &SharedStore,
    run_id: Uuid,
    timeout: Duration,
    mut wanted: impl FnMut(&WorkflowRun) -> bool,
) -> Result<WorkflowRun, WaitError> {
    let mut last_status = None;
    let waiting = wait_loop(store, run_id, &mut wanted, &mut last_status);
    match tokio::time::timeout(timeout, waiting).await {
        Ok(outcome) => outcome,
        Err(_elapsed) => Err(WaitError::Timeout {
            run_id,
            waited: timeout,
            awaited: Awaited::Run {
                status: last_status,
            },
        }),
    }
}

async fn wait_loop(
    store: &SharedStore,
    run_id: Uuid,
    wanted: &mut impl FnMut(&WorkflowRun) -> bool,
    last_status: &mut Option<RunStatus>,
) -> Result<WorkflowRun, WaitError> {
    // Subscribed before the first read: whatever changes after the read is announced to us.
    let mut notifications = store.contract().subscribe().await?;
    loop {
        let run = store
            .contract()
            .get_run(run_id)
            .await?
            .ok_or(WaitError::NotFound { run_id })?;
        *last_status = Some(run.status);
        if wanted(&run) {
            return Ok(run);
        }
        if run.status.is_terminal() {
            let status = Some(run.status);
            return Err(WaitError::Finished {
                run: Box::new(run),
                awaited: Awaited::Run { status },
            });
        }
        // A re-read after WAIT_SAFETY_REREAD without news is the safety net, not the
        // mechanism.
        if let Ok(news) =
            tokio::time::timeout(WAIT_SAFETY_REREAD, news_of(&mut notifications, run_id)).await
        {
            news?;
        }
    }
}

/// Waits for news of `run_id` that calls for reading it again: a status change or finish
/// of the run, or a possible loss of notifications. Fails when the stream ended (the store
/// was closed).
async fn news_of(notifications: &mut NotificationStream, run_id: Uuid) -> Result<(), WaitError> {
    loop {
        match notifications.next().await {
            Some(
                Notification::StatusChanged { run_id: id, .. }
                | Notification::RunFinished { run_id: id, .. },
            ) if id == run_id => return Ok(()),
            Some(Notification::Missed { .. }) => return Ok(()),
            Some(_) => continue,
            None => {
                return Err(StoreError::database(
                    Operation::Subscribe,
                    "the store was closed while waiting for a run's status",
                )
                .into());
            }
        }
    }
}
