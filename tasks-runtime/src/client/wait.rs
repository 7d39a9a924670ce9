//! Waiting for a run to reach a status without polling: [`RunHandle::wait_for_status`] and
//! [`RunHandle::wait_until`], and the same on [`Client`] by run id.
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
use crate::model::{RunStatus, WorkflowRun};
use crate::store::{Notification, NotificationStream, SharedStore};

/// How often a wait reads the run again without any notification, in case one was lost on
/// the way (the store also announces a loss it knows of, [`Notification::Missed`], which
/// makes the wait read at once).
pub const WAIT_SAFETY_REREAD: Duration = Duration::from_secs(30);

/// Why a wait for a run's status ([`RunHandle::wait_for_status`], [`RunHandle::wait_until`])
/// ended without the run matching.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// The run does not exist (in the store's namespace).
    #[error("workflow run {run_id} does not exist")]
    NotFound {
        /// The run.
        run_id: Uuid,
    },
    /// The run finished (completed, failed or canceled) without matching: a terminal run
    /// never changes again, so it never can. The run is as it was read.
    #[error("workflow run {} is {} and can never reach the awaited status", run.id, run.status)]
    Finished {
        /// The run, terminal.
        run: Box<WorkflowRun>,
    },
    /// [`RunHandle::wait_for_status`] was given no status: nothing could ever match.
    #[error("no status to wait for")]
    NoStatus,
    /// The run did not match within the timeout.
    #[error("workflow run {run_id} did not reach the awaited status within {waited:?}{}", status.map(|s| format!(" (it is {s})")).unwrap_or_default())]
    Timeout {
        /// The run.
        run_id: Uuid,
        /// How long it waited.
        waited: Duration,
        /// The status the run had when it was last read, if it was read at all.
        status: Option<RunStatus>,
    },
    /// The store failed while waiting (or could not subscribe to its notifications, without
    /// which the wait would have to poll).
    #[error(transparent)]
    Store(#[from] StoreError),
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
    pub async fn wait_until(
        &self,
        timeout: Duration,
        wanted: impl FnMut(&WorkflowRun) -> bool,
    ) -> Result<WorkflowRun, WaitError> {
        wait_until(&self.store, self.run_id, timeout, wanted).await
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

    /// [`RunHandle::wait_until`] for run `run_id`.
    pub async fn wait_until(
        &self,
        run_id: Uuid,
        timeout: Duration,
        wanted: impl FnMut(&WorkflowRun) -> bool,
    ) -> Result<WorkflowRun, WaitError> {
        wait_until(self.store(), run_id, timeout, wanted).await
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
    wait_until(store, run_id, timeout, |run| statuses.contains(&run.status)).await
}

async fn wait_until(
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
            status: last_status,
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
            return Err(WaitError::Finished { run: Box::new(run) });
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
