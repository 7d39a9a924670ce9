//! Concurrent branches of a workflow on other tokio tasks: [`WorkflowContext::spawn`].
//!
//! The workflow's context is task-local, so a future handed to a plain `tokio::spawn`
//! leaves it: steps called there run as plain calls, unrecorded and unretried. A branch
//! carries the context to its task, scoped by the branch's name, so that the names its
//! steps resolve (`branch/step`, `branch/step:1`, ...) depend only on the order of calls
//! inside the branch, never on how branches interleave: a replay finds every record
//! whatever the scheduling.
//!
//! A branch lives no longer than the execution that spawned it. When the workflow returns,
//! fails or stops (a durable sleep, a join that parks, a pause, a cancel, a lost lease, a
//! worker shutdown), the executor aborts every branch still running and waits for it to
//! stop before writing the run's outcome; a step a branch was running is dropped without a
//! record and runs again on the next execution, like any step interrupted by a crash.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt as _;
use tokio::sync::oneshot;

use super::WorkflowContext;
use crate::failure::WorkflowError;
use crate::model::StepKind;
use crate::replay::Call;
use crate::session::lock;

/// A branch of a workflow started by [`WorkflowContext::spawn`]: await it for the
/// branch's output.
///
/// Dropping the handle aborts the branch (structured concurrency: a branch nobody awaits
/// does not outlive its handle). A panic in the branch resumes in the task that awaits the
/// handle, where it fails the run's attempt like a panic of the workflow itself.
#[must_use = "a branch is aborted when its handle is dropped; await it"]
pub struct Branch<T> {
    name: Arc<str>,
    output: oneshot::Receiver<std::thread::Result<T>>,
    abort: tokio::task::AbortHandle,
}

impl<T> Branch<T> {
    /// The branch's resolved name, which scopes the names of its steps (`name/step`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T> std::fmt::Debug for Branch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Branch")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for Branch<T> {
    fn drop(&mut self) {
        self.abort.abort();
    }
}

impl<T> Future for Branch<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match Pin::new(&mut self.output).poll(cx) {
            Poll::Ready(Ok(Ok(output))) => Poll::Ready(output),
            Poll::Ready(Ok(Err(panic))) => std::panic::resume_unwind(panic),
            // The branch was aborted: the execution is ending and drops this future too.
            Poll::Ready(Err(_)) => Poll::Pending,
            Poll::Pending => Poll::Pending,
        }
    }
}

impl WorkflowContext {
    /// Runs `future` concurrently on another tokio task, inside this workflow: the steps,
    /// sleeps, child starts and event waits it calls are recorded and replayed like the
    /// workflow's own, under names scoped by the branch (`name/step`). Returns a handle to
    /// await the branch's output.
    ///
    /// `name` is resolved like a step name (`name`, `name:1`, ... in call order, inside the
    /// current branch when called from one), so spawning in a loop is deterministic; it
    /// counts towards the worker's step limit. Interleaving between branches never changes
    /// which record a call replays, because every branch resolves its names on its own.
    ///
    /// Branches end with the execution: when the workflow returns, fails or stops, the
    /// branches still running are aborted (and awaited) before the outcome is written, so
    /// nothing of them writes afterwards. A branch that parks the run (a durable sleep, a
    /// join) stops the whole execution, as it would in the workflow's own task.
    ///
    /// A plain `tokio::spawn` leaves the workflow: its steps run as plain calls, once each
    /// execution, never recorded. Use this instead.
    ///
    /// An empty or over-long `name` is a non-retryable error, as for a step.
    pub fn spawn<F>(&self, name: &str, future: F) -> Result<Branch<F::Output>, WorkflowError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if name.is_empty() {
            return Err(WorkflowError::msg("a branch needs a name").non_retryable());
        }
        let resolved: Arc<str> = self
            .resolve_call(name, Call::of(StepKind::Function))?
            .name
            .into();
        let branch = WorkflowContext {
            inner: self.inner.clone(),
            scope: Some(resolved.clone()),
        };
        let (send, output) = oneshot::channel();
        let task = branch.scope(async move {
            let result = AssertUnwindSafe(future).catch_unwind().await;
            let _ = send.send(result);
        });
        let abort = lock(&self.inner.branches).spawn(task);
        Ok(Branch {
            name: resolved,
            output,
            abort,
        })
    }

    /// Aborts every branch of the run still running and waits until none runs any more:
    /// the executor calls it when the execution ends, before writing its outcome.
    pub(crate) async fn end_branches(&self) {
        // A branch may spawn another before its abort lands: repeat until none is left.
        loop {
            let mut branches = std::mem::take(&mut *lock(&self.inner.branches));
            if branches.is_empty() {
                return;
            }
            branches.abort_all();
            while branches.join_next().await.is_some() {}
        }
    }
}
