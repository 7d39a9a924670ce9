//! The Postgres store's background tasks, owned by the store.
//!
//! Three kinds of work run beside the callers of a [`PgStore`](super::PgStore): the
//! `LISTEN` pump that feeds notification subscribers, and the batch writers of step records,
//! run completions and wake-ups. Each starts when it is first needed, on the runtime of the
//! call that needs it, as a task of the store's [`Background`]: one cancellation token and
//! one task tracker shared by every clone and namespace of the store, so that
//! [`PgStore::close`](super::PgStore::close) stops them all and waits for them.
//!
//! A process that only starts runs and reads them starts none of them: it sends its
//! wake-ups itself, after each write. A task whose runtime shut down (a store kept
//! past the `#[tokio::test]` or runtime that first used it) is noticed on the next use and
//! started again on the caller's runtime, with a warning, instead of leaving the store
//! without it.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The store's tasks: started on demand, stopped together.
#[derive(Debug, Default)]
pub(crate) struct Background {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Background {
    /// Spawns `task` on the current runtime as one of the store's tasks; it is stopped when
    /// the store is closed.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = task => {}
            }
        })
    }

    /// How many of the tasks are running.
    pub(crate) fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Whether the store was closed: no task is started any more.
    pub(crate) fn is_closed(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Stops every task and waits until they have ended.
    pub(crate) async fn close(&self) {
        self.token.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// A handle to one background task (a channel into it, say), started on first use.
#[derive(Debug)]
pub(crate) struct Task<T> {
    what: &'static str,
    running: Mutex<Option<(T, JoinHandle<()>)>>,
}

impl<T: Clone> Task<T> {
    /// A task not started yet; `what` names it in logs.
    pub(crate) fn new(what: &'static str) -> Self {
        Task {
            what,
            running: Mutex::new(None),
        }
    }

    /// The handle of the task if it is running, without starting it.
    pub(crate) fn running(&self) -> Option<T> {
        lock(&self.running)
            .as_ref()
            .filter(|(_, task)| !task.is_finished())
            .map(|(handle, _)| handle.clone())
    }

    /// The handle of the running task, starting it with `start` when it is not running:
    /// never started, or ended with the runtime it ran on.
    pub(crate) fn get_or_start(&self, start: impl FnOnce() -> (T, JoinHandle<()>)) -> T {
        let mut running = lock(&self.running);
        if let Some((handle, task)) = running.as_ref() {
            if !task.is_finished() {
                return handle.clone();
            }
            tracing::warn!(
                task = self.what,
                "a background task of the Postgres store ended (did the Tokio runtime it ran on \
                 shut down?); starting it again on this runtime"
            );
        }
        let (handle, task) = start();
        *running = Some((handle.clone(), task));
        handle
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
