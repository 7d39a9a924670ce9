//! Continue-as-new: a run that finishes by handing over to a successor of the same workflow,
//! with a new input and an empty history, in one transaction ([`ContinueStore`]).
//!
//! A workflow that loops for months (a subscription, a poller) would otherwise grow its
//! history past the worker's step limit. Continuing as new keeps each run's history short
//! while the runs form one *lineage*: the first run's id is the lineage's id
//! ([`WorkflowRun::lineage_id`]), every successor names it (`lineage_root_id`) and the run
//! it continued from (`continued_from_run_id`), and the finished run names its successor
//! (`continued_as_run_id`).
//!
//! # The rules, once
//!
//! - The finished run is `completed` without an output, with `continued_as_run_id` set
//!   ([`CONTINUED`]): its work is done, and the link says where the lineage went. No new
//!   status is needed, so every status filter, count and purge treats it as the finished
//!   run it is.
//! - The successor is created in the same transaction as that finish, fenced by the
//!   finishing worker's claim ([`CONTINUE`]): a stale worker creates nothing.
//! - A child run cannot continue as new ([`refusal`]): its parent waits for its output.
//! - An event sent to a run that continued reaches the lineage's current run
//!   ([`forwards`], [`recipient_lineage`]), and so does an event sent to the id of a run of
//!   a lineage that was purged while the lineage lives; events the finished run had not
//!   consumed move to the successor in the hand-over's transaction. No event sent to the
//!   lineage is lost.
//!
//! [`CONTINUED`]: crate::transition::CONTINUED
//! [`CONTINUE`]: crate::transition::CONTINUE

use async_trait::async_trait;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::events::EventTarget;
use crate::holder::Holder;
use crate::limits::{self, Field, LimitError};
use crate::model::WorkflowRun;
use crate::store::Notification;
use crate::transition::CONTINUE;

/// The parameters of [`ContinueStore::continue_run`].
#[derive(Debug, Clone, PartialEq)]
pub struct ContinueRun {
    /// The run that continues (running under `holder`).
    pub run_id: Uuid,
    /// The claim the finishing execution holds: the fence of the whole hand-over.
    pub holder: Holder,
    /// The successor's input.
    pub input: Value,
}

impl ContinueRun {
    /// Checks the holder's worker id and the input against the [`limits`]. A store calls it
    /// before anything else.
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_json(Field::Input, &self.input)
    }
}

/// What [`ContinueStore::continue_run`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ContinuedRun {
    /// The run that finished, `completed` with `continued_as_run_id` naming the successor.
    pub finished: WorkflowRun,
    /// The successor, pending.
    pub successor: WorkflowRun,
}

impl ContinuedRun {
    /// What a store announces once the hand-over committed: the finish of the run that
    /// continued (waiters on it wake and follow the link) and the successor's availability.
    pub fn announcements(&self) -> Vec<Notification> {
        let mut notifications: Vec<Notification> = CONTINUE.announcements(&self.finished).collect();
        notifications.push(Notification::RunAvailable {
            namespace: self.successor.namespace.clone(),
        });
        notifications
    }
}

/// Why `run`, admitted by the [`CONTINUE`] fence, may still not continue as new: a child
/// run ([`StoreError::InvalidArgument`]), whose parent waits for its output.
pub fn refusal(run: &WorkflowRun) -> Option<StoreError> {
    run.parent_run_id.map(|parent| {
        StoreError::InvalidArgument(format!(
            "workflow run {} is a child of run {parent}, which waits for its output: a child \
             run cannot continue as new",
            run.id
        ))
    })
}

/// Where an event sent to `run` goes instead of `run`: the lineage whose current run takes
/// it, when `run` finished by continuing as new (`None`: `run` takes it, or refuses it, itself).
pub fn forwards(run: &WorkflowRun) -> Option<Uuid> {
    run.continued_as_run_id.map(|_| run.lineage_id())
}

/// The lineage whose current run takes an event sent to `target`, given the run `target`
/// names as it is (`named`; `None`: no such run): the lineage of a run that continued as
/// new ([`forwards`]); and, for a run id that names no run, the lineage that id may start
/// (its first runs purged while the lineage lives). `None`: `named` takes (or refuses) the
/// event itself, or the target is unknown.
pub fn recipient_lineage(named: Option<&WorkflowRun>, target: &EventTarget) -> Option<Uuid> {
    match (named, target) {
        (Some(run), _) => forwards(run),
        (None, EventTarget::Run(id)) => Some(*id),
        (None, EventTarget::Key { .. }) => None,
    }
}

/// How many times a send re-reads the current run of a lineage that moved on between its
/// read and its lock (the current run continued meanwhile). Each hand-over is one
/// transaction, so a send that keeps losing the race is a lineage continuing many times a
/// second; the send then fails with [`StoreError::WrongState`] and may be retried.
pub const MAX_FORWARDS: usize = 16;

/// Continue-as-new: finishing a run and creating its successor in one transaction, and
/// finding the current run of a lineage. A capability of a store
/// ([`Store::continuation`](crate::Store::continuation)).
#[async_trait]
pub trait ContinueStore: Send + Sync {
    /// Finishes the run `params.run_id`, which `params.holder` holds, by continuing it as
    /// new, in one transaction fenced like [`LeaseStore::complete_run`](crate::LeaseStore::complete_run):
    ///
    /// - the run lands `completed` without an output, with `continued_as_run_id` naming
    ///   the successor, and its idempotency key cleared (the key moves to the successor);
    /// - the successor is created pending, claimable now: a new id, the same workflow name
    ///   and version, queue, priority, concurrency key and limit, config (its retry policy),
    ///   caller context and trace context, the idempotency key with its scope; `params.input`
    ///   as input; no deadline and no parent; `lineage_root_id` the finished run's
    ///   [`WorkflowRun::lineage_id`], `continued_from_run_id` the finished run;
    /// - the events sent to the finished run that it did not consume move to the successor.
    ///
    /// Announces the finish ([`Notification::RunFinished`]) and a wake-up
    /// ([`Notification::RunAvailable`]): [`ContinuedRun::announcements`].
    ///
    /// Errors: worker-side errors (see [`Store`](crate::Store)), nothing written; a child run
    /// is [`StoreError::InvalidArgument`] ([`refusal`]).
    async fn continue_run(&self, params: ContinueRun) -> StoreResult<ContinuedRun>;

    /// The current run of the lineage `lineage_id` (the id of its first run): the one run
    /// of the lineage that did not continue as new, whatever its status. `None` when no run
    /// of the lineage is left (it does not exist in this namespace, or was purged).
    async fn lineage_head(&self, lineage_id: Uuid) -> StoreResult<Option<WorkflowRun>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RunStatus;

    #[test]
    fn a_run_that_continued_forwards_to_its_lineage() {
        let mut first = WorkflowRun::for_tests(RunStatus::Completed, None);
        assert_eq!(
            forwards(&first),
            None,
            "a plain completion keeps its events"
        );
        first.continued_as_run_id = Some(Uuid::now_v7());
        assert_eq!(
            forwards(&first),
            Some(first.id),
            "the first run is the lineage"
        );
        let mut second = WorkflowRun::for_tests(RunStatus::Completed, None);
        second.lineage_root_id = Some(first.id);
        second.continued_as_run_id = Some(Uuid::now_v7());
        assert_eq!(forwards(&second), Some(first.id));
        assert_eq!(
            recipient_lineage(Some(&second), &EventTarget::Run(second.id)),
            Some(first.id)
        );
        let plain = WorkflowRun::for_tests(RunStatus::Running, None);
        assert_eq!(
            recipient_lineage(Some(&plain), &EventTarget::Run(plain.id)),
            None
        );
        let gone = Uuid::now_v7();
        assert_eq!(
            recipient_lineage(None, &EventTarget::Run(gone)),
            Some(gone),
            "a purged first run's id still names its lineage"
        );
        let key = EventTarget::Key {
            workflow_name: "w".into(),
            idempotency_key: "k".into(),
        };
        assert_eq!(recipient_lineage(None, &key), None);
    }

    #[test]
    fn a_child_run_cannot_continue() {
        let mut run = WorkflowRun::for_tests(RunStatus::Running, Some("w".into()));
        assert!(refusal(&run).is_none());
        run.parent_run_id = Some(Uuid::now_v7());
        assert!(matches!(
            refusal(&run),
            Some(StoreError::InvalidArgument(message)) if message.contains("child")
        ));
    }

    #[test]
    fn the_check_refuses_before_any_sql() {
        let params = ContinueRun {
            run_id: Uuid::now_v7(),
            holder: Holder::new("w\0", 1),
            input: Value::Null,
        };
        assert!(params.check().is_err(), "a worker id with a NUL");
    }
}
