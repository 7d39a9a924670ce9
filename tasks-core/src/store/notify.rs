//! What a store announces to the subscribers of a namespace, and the stream they read.

#[cfg(doc)]
use crate::StateStore;
use futures::stream::BoxStream;
use uuid::Uuid;

use crate::model::RunStatus;

#[cfg(doc)]
use super::Store;

/// What a store announces to the subscribers of a namespace: wake-ups for workers (a run
/// may be claimable), and for waiters a run that finished or changed its status.
///
/// Non-exhaustive: a store may announce more in a later release, so a `match` needs a
/// wildcard arm (which should ignore what it does not know).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notification {
    /// A run became available now (created, resumed, parked by a sleep).
    RunAvailable {
        /// The namespace it is in.
        namespace: String,
    },
    /// A run reached a terminal state.
    RunFinished {
        /// The namespace it is in.
        namespace: String,
        /// The run.
        run_id: Uuid,
    },
    /// A run was left in a status that a caller may wait for: parked sleeping (a durable
    /// sleep, an event wait), paused, pending again (resumed, retried, a failed attempt
    /// waiting for its retry, given back by its worker), or running (claimed by a worker).
    /// Terminal statuses are announced by [`Notification::RunFinished`] instead. Workers do
    /// not wake on it: it does not make a run claimable. See
    /// `RunHandle::wait_for_status`.
    StatusChanged {
        /// The namespace it is in.
        namespace: String,
        /// The run.
        run_id: Uuid,
        /// The status the transition left the run in (it may have changed again since).
        status: RunStatus,
    },
    /// A run published a new value of one of its keys
    /// ([`StateStore::set_state`]). Workers do not wake on it. See
    /// `Client::wait_for_state`.
    StateChanged {
        /// The namespace it is in.
        namespace: String,
        /// The run.
        run_id: Uuid,
        /// The key.
        key: String,
        /// The version the publication gave the key.
        version: u64,
    },
    /// Notifications may have been lost (the listener reconnected or fell behind): anything
    /// waiting for one should look at the store again.
    Missed {
        /// The namespace of the subscriber.
        namespace: String,
    },
}

impl Notification {
    /// The namespace the notification is about.
    pub fn namespace(&self) -> &str {
        match self {
            Notification::RunAvailable { namespace }
            | Notification::RunFinished { namespace, .. }
            | Notification::StatusChanged { namespace, .. }
            | Notification::StateChanged { namespace, .. }
            | Notification::Missed { namespace } => namespace,
        }
    }
}

/// A stream of notifications for the subscriber's namespace. Dropped connections are
/// reconnected behind the stream; the stream ends only when the store is closed.
pub type NotificationStream = BoxStream<'static, Notification>;

/// The notifications of `namespace` among the events a store broadcasts to every subscriber
/// of its database: `notification` turns an event into a notification, or into `None` when
/// notifications may have been lost (a reconnect), which reaches the subscriber as
/// [`Notification::Missed`], as does falling behind the channel. The stream ends when the
/// channel closes.
pub fn namespace_stream<E: Clone + Send + 'static>(
    receiver: tokio::sync::broadcast::Receiver<E>,
    namespace: String,
    notification: fn(E) -> Option<Notification>,
) -> NotificationStream {
    use futures::StreamExt as _;
    use tokio::sync::broadcast::error::RecvError;

    futures::stream::unfold(receiver, move |mut receiver| {
        let namespace = namespace.clone();
        async move {
            loop {
                let missed = match receiver.recv().await {
                    Ok(event) => match notification(event) {
                        Some(notification) if notification.namespace() == namespace => {
                            return Some((notification, receiver));
                        }
                        Some(_) => continue,
                        None => Notification::Missed { namespace },
                    },
                    Err(RecvError::Lagged(_)) => Notification::Missed { namespace },
                    Err(RecvError::Closed) => return None,
                };
                return Some((missed, receiver));
            }
        }
    })
    .boxed()
}
