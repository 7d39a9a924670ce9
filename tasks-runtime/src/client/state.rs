//! Reading and waiting on the state a run publishes ([`WorkflowContext::set_state`]):
//! [`Client::get_state`], [`Client::list_state`] and [`Client::wait_for_state`].
//!
//! A wait subscribes to the store's notifications *before* it reads, like a wait for a
//! status (`client/wait.rs`), and reads again only on news of the run: a new version of the
//! key ([`Notification::StateChanged`]), its finish, or a possible loss of notifications,
//! plus once every [`WAIT_SAFETY_REREAD`] as a safety net.
//!
//! [`WorkflowContext::set_state`]: crate::WorkflowContext::set_state

use std::time::Duration;

use futures::StreamExt as _;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::{Awaited, Client, ClientError, WAIT_SAFETY_REREAD, WaitError};
use crate::error::{Operation, StoreError};
use crate::limits;
use crate::state::PublishedState;
use crate::store::{Notification, NotificationStream, SharedStore};

impl Client {
    /// The latest value run `run_id` published under `key`
    /// ([`WorkflowContext::set_state`](crate::WorkflowContext::set_state)), decoded into
    /// `T`, with its version and when it was published; `None` when the run published
    /// nothing under `key` (yet).
    ///
    /// Errors: [`ClientError::Store`] with [`StoreError::RunNotFound`] for an unknown run;
    /// [`ClientError::Limit`] for a key past the limits; [`ClientError::InvalidState`] when
    /// the value does not decode into `T`.
    pub async fn get_state<T: DeserializeOwned>(
        &self,
        run_id: Uuid,
        key: &str,
    ) -> Result<Option<PublishedState<T>>, ClientError> {
        let Some(state) = self.get_state_json(run_id, key).await? else {
            return Ok(None);
        };
        state
            .decode()
            .map(Some)
            .map_err(|source| ClientError::InvalidState {
                run_id,
                key: key.to_owned(),
                source,
            })
    }

    /// Like [`Client::get_state`], with the value as JSON.
    pub async fn get_state_json(
        &self,
        run_id: Uuid,
        key: &str,
    ) -> Result<Option<PublishedState>, ClientError> {
        limits::check_state_key(key)?;
        // No run publishes such a key (see `check_chosen_name`).
        crate::replay::check_chosen_name(crate::limits::Field::StateKey, key)?;
        Ok(self
            .store
            .contract()
            .published_state()?
            .get_state(run_id, key)
            .await?)
    }

    /// The latest value of every key run `run_id` published, by key, as JSON.
    ///
    /// Errors: [`ClientError::Store`] with [`StoreError::RunNotFound`] for an unknown run.
    pub async fn list_state(&self, run_id: Uuid) -> Result<Vec<PublishedState>, ClientError> {
        Ok(self
            .store
            .contract()
            .published_state()?
            .list_state(run_id)
            .await?)
    }

    /// Waits until run `run_id` has published a version of `key` greater than
    /// `after_version`, and returns that value (the latest, decoded into `T`: versions in
    /// between may have been skipped); gives up after `timeout`. Pass 0 for the first value,
    /// then the version returned, to follow a key as it changes:
    ///
    /// ```no_run
    /// # async fn demo(client: tasks_runtime::Client, run_id: uuid::Uuid) -> Result<(), tasks_runtime::WaitError> {
    /// use std::time::Duration;
    ///
    /// let mut seen = 0;
    /// loop {
    ///     let progress = client
    ///         .wait_for_state::<u32>(run_id, "progress", seen, Duration::from_secs(60))
    ///         .await?;
    ///     println!("{}% done", progress.value);
    ///     seen = progress.version;
    /// }
    /// # }
    /// ```
    ///
    /// It subscribes to the store's notifications before it reads (no publication is lost
    /// in between) and reads again only on news of the run, not by polling (plus a safety
    /// re-read every [`WAIT_SAFETY_REREAD`]). On Postgres the news travels by LISTEN/NOTIFY,
    /// so a publication by a worker in another process wakes the wait; on SQLite only
    /// publications of this process do, and others are seen at the safety re-read.
    ///
    /// Errors: [`WaitError::NotFound`]; [`WaitError::Finished`] once the run is
    /// terminal without a newer value; [`WaitError::Timeout`];
    /// [`WaitError::InvalidState`] when the value does not decode into `T`;
    /// [`WaitError::Limit`]; [`WaitError::Store`].
    pub async fn wait_for_state<T: DeserializeOwned>(
        &self,
        run_id: Uuid,
        key: &str,
        after_version: u64,
        timeout: Duration,
    ) -> Result<PublishedState<T>, WaitError> {
        let state = self
            .wait_for_state_json(run_id, key, after_version, timeout)
            .await?;
        state.decode().map_err(|source| WaitError::InvalidState {
            run_id,
            key: key.to_owned(),
            source,
        })
    }

    /// Like [`Client::wait_for_state`], with the value as JSON.
    pub async fn wait_for_state_json(
        &self,
        run_id: Uuid,
        key: &str,
        after_version: u64,
        timeout: Duration,
    ) -> Result<PublishedState<Value>, WaitError> {
        limits::check_state_key(key)?;
        // No run publishes such a key (see `check_chosen_name`).
        crate::replay::check_chosen_name(crate::limits::Field::StateKey, key)?;
        let mut last_version = None;
        let waiting = wait_loop(&self.store, run_id, key, after_version, &mut last_version);
        match tokio::time::timeout(timeout, waiting).await {
            Ok(outcome) => outcome,
            Err(_elapsed) => Err(WaitError::Timeout {
                run_id,
                waited: timeout,
                awaited: Awaited::State {
                    key: key.to_owned(),
                    after: after_version,
                    version: last_version,
                },
            }),
        }
    }
}

async fn wait_loop(
    store: &SharedStore,
    run_id: Uuid,
    key: &str,
    after: u64,
    last_version: &mut Option<u64>,
) -> Result<PublishedState, WaitError> {
    let not_found = |error| match error {
        StoreError::RunNotFound { .. } => WaitError::NotFound { run_id },
        other => WaitError::from(other),
    };
    // Subscribed before the first read: whatever is published after the read is announced.
    let mut notifications = store.contract().subscribe().await?;
    loop {
        // The run first: when it is terminal, nothing is published after it was read, so
        // the state read next is final.
        let run = store
            .contract()
            .get_run(run_id)
            .await?
            .ok_or(WaitError::NotFound { run_id })?;
        let state = store
            .contract()
            .published_state()?
            .get_state(run_id, key)
            .await
            .map_err(not_found)?;
        *last_version = state.as_ref().map(|state| state.version);
        match state {
            Some(state) if state.version > after => return Ok(state),
            _ if run.status.is_terminal() => {
                return Err(WaitError::Finished {
                    run: Box::new(run),
                    awaited: Awaited::State {
                        key: key.to_owned(),
                        after,
                        version: *last_version,
                    },
                });
            }
            _ => {}
        }
        // A re-read after WAIT_SAFETY_REREAD without news is the safety net, not the
        // mechanism.
        if let Ok(news) = tokio::time::timeout(
            WAIT_SAFETY_REREAD,
            news_of(&mut notifications, run_id, key, after),
        )
        .await
        {
            news?;
        }
    }
}

/// Waits for news that calls for reading again: a version of `key` of `run_id` newer than
/// `after`, the run's finish, or a possible loss of notifications. Fails when the stream
/// ended (the store was closed).
async fn news_of(
    notifications: &mut NotificationStream,
    run_id: Uuid,
    key: &str,
    after: u64,
) -> Result<(), WaitError> {
    loop {
        match notifications.next().await {
            Some(Notification::StateChanged {
                run_id: id,
                key: changed,
                version,
                ..
            }) if id == run_id && changed == key && version > after => return Ok(()),
            Some(Notification::RunFinished { run_id: id, .. }) if id == run_id => return Ok(()),
            Some(Notification::Missed { .. }) => return Ok(()),
            Some(_) => continue,
            None => {
                return Err(StoreError::database(
                    Operation::Subscribe,
                    "the store was closed while waiting for a run's state",
                )
                .into());
            }
        }
    }
}
