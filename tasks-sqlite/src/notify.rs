//! Wake-ups and write ordering shared by every store on one database in this process.
//!
//! SQLite has no LISTEN/NOTIFY. Instead, a process-global registry maps each database (its
//! canonical file path, or the name of an in-memory database) to one [`Shared`] value: a
//! broadcast channel that carries notifications between every store opened on that database
//! in this process, whatever pool it came from, so a worker and a client in one process wake
//! each other. Other processes do not hear these notifications; their workers find new runs
//! by polling, and `Missed` is never needed for that.
//!
//! The same value holds an async write gate: writers of this process queue on it before they
//! take SQLite's write lock, instead of spinning in SQLite's busy handler against each other.
//! The busy timeout still arbitrates between processes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tasks_core::store::{Notification, NotificationStream, namespace_stream};
use tokio::sync::broadcast;

/// How many notifications a slow subscriber may fall behind before it gets a `Missed`.
const CAPACITY: usize = 1024;

/// State shared by every store of this process on one database.
pub(crate) struct Shared {
    sender: broadcast::Sender<Notification>,
    /// Serializes this process's write transactions on the database.
    pub(crate) write_gate: tokio::sync::Mutex<()>,
}

impl Shared {
    /// Sends `notification` to every subscriber of this database in the process. Having no
    /// subscriber is not an error.
    pub(crate) fn publish(&self, notification: Notification) {
        let _ = self.sender.send(notification);
    }

    /// The notifications of `namespace`, from now on.
    pub(crate) fn subscribe(&self, namespace: String) -> NotificationStream {
        stream(self.sender.subscribe(), namespace)
    }
}

type Registry = Mutex<HashMap<PathBuf, Weak<Shared>>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The shared state of the database identified by `key`, created on first use. It lives as
/// long as some store of this process uses the database; then its entry is pruned.
pub(crate) fn shared(key: PathBuf) -> Arc<Shared> {
    let mut map = registry()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(shared) = map.get(&key).and_then(Weak::upgrade) {
        return shared;
    }
    map.retain(|_, entry| entry.strong_count() > 0);
    let (sender, _) = broadcast::channel(CAPACITY);
    let shared = Arc::new(Shared {
        sender,
        write_gate: tokio::sync::Mutex::new(()),
    });
    map.insert(key, Arc::downgrade(&shared));
    shared
}

/// Filters the database's notifications down to `namespace` (see
/// [`namespace_stream`]).
fn stream(receiver: broadcast::Receiver<Notification>, namespace: String) -> NotificationStream {
    namespace_stream(receiver, namespace, Some)
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    #[tokio::test]
    async fn one_shared_state_per_database() {
        let key = PathBuf::from(format!("test-{}", uuid::Uuid::new_v4()));
        let a = shared(key.clone());
        let b = shared(key.clone());
        assert!(Arc::ptr_eq(&a, &b));
        let other = shared(PathBuf::from(format!("test-{}", uuid::Uuid::new_v4())));
        assert!(!Arc::ptr_eq(&a, &other));

        let mut mine = a.subscribe("mine".into());
        b.publish(Notification::RunAvailable {
            namespace: "theirs".into(),
        });
        b.publish(Notification::RunAvailable {
            namespace: "mine".into(),
        });
        assert_eq!(
            mine.next().await,
            Some(Notification::RunAvailable {
                namespace: "mine".into()
            })
        );
        drop((a, b));
        assert_eq!(
            mine.next().await,
            None,
            "the stream ends with the last store"
        );
        let again = shared(key);
        assert_eq!(
            Arc::strong_count(&again),
            1,
            "a fresh state after the last store"
        );
    }
}
