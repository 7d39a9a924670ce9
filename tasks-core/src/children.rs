//! Child workflows: the parameters and outcomes of the store operations
//! [`ChildStore::start_child`] and
//! [`ChildStore::wait_for_children`].
//!
//! A child is started by a step attempt of its parent, of kind
//! [`StepKind::Child`], created in the same transaction as the
//! child run (which records the attempt in `parent_step_attempt_id` and its parent in
//! `parent_run_id`); a second start of the same step returns the first child, so a replay
//! never starts it twice. The attempt stays running until the parent waits for the child
//! and the child has finished: then it is completed with the child's outcome
//! ([`ChildOutcome`]) as output, and every replay reads that outcome.
//!
//! A parent that waits for live children is parked (sleeping, no worker) with the number of
//! them in `awaiting_children`; the completion, failure or cancel of each child takes one
//! off in the child's own transition, and the one that brings it to zero makes the parent
//! available and announces it. A child the parent does not wait for can wake it early; the
//! parent then looks again and parks again, so a wake-up is never lost and never wrong.

#[cfg(doc)]
use crate::{Notification, StepKind};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::holder::Holder;
use crate::limits::{self, LimitError};
use crate::model::{RunStatus, StepAttempt, WorkflowRun};
use crate::store::runs::CreateRun;

/// What canceling the parent does to a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ParentCancel {
    /// Cancel the child (and, through it, its own cascading children) in the parent's
    /// cancel. The default.
    #[default]
    Cascade,
    /// Leave the child running: it finishes on its own, and its outcome is kept.
    Detach,
}

impl ParentCancel {
    /// Whether the child is canceled with its parent.
    pub fn cascades(self) -> bool {
        self == ParentCancel::Cascade
    }
}

/// Parameters of [`ChildStore::start_child`].
#[derive(Debug, Clone)]
pub struct StartChild {
    /// The parent run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the parent's lease.
    pub holder: Holder,
    /// The resolved step name of the start in the parent.
    pub step_name: String,
    /// The child run. It may not carry an idempotency key: the step name is the key.
    pub child: CreateRun,
    /// What canceling the parent does to the child.
    pub on_parent_cancel: ParentCancel,
    /// The start's place in the parent (`{"position": ..}`), recorded in its attempt's
    /// config under `call` and compared on replay; `None` records none.
    pub call: Option<Value>,
}

impl StartChild {
    /// Checks the holder's worker id, the step name and the child's parameters against the [`limits`]. A
    /// store reaches it through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        self.child.check(namespace)
    }

    /// Refuses a child with an idempotency key ([`StoreError::InvalidArgument`]): a child is
    /// deduplicated by its parent's step, and a key could name a run of someone else.
    pub fn check_child(&self) -> StoreResult<()> {
        if self.child.idempotency_key.is_some() {
            return Err(StoreError::InvalidArgument(
                "a child run is deduplicated by its parent's step and takes no idempotency key"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The config of the start's step attempt: the child's workflow and version.
    pub fn step_config(&self) -> Value {
        let mut config = json!({
            "workflow": self.child.workflow_name,
            "version": self.child.version,
        });
        if let Some(call) = &self.call {
            config["call"] = call.clone();
        }
        config
    }
}

/// The outcome of [`ChildStore::start_child`].
#[derive(Debug, Clone, PartialEq)]
pub struct StartedChild {
    /// The parent's step attempt of kind [`StepKind::Child`]: running
    /// until the parent has seen the child finish.
    pub step: StepAttempt,
    /// The child run as it is now.
    pub child: WorkflowRun,
    /// `false` when the step had already started its child: nothing was created.
    pub created: bool,
}

/// Parameters of [`ChildStore::wait_for_children`].
#[derive(Debug, Clone)]
pub struct WaitForChildren {
    /// The parent run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the parent's lease.
    pub holder: Holder,
    /// The resolved step names of the child starts to wait for (at least one).
    pub step_names: Vec<String>,
}

impl WaitForChildren {
    /// Checks the worker id and the step names against the [`limits`], and that there is at least
    /// one. A store reaches it through its operation's function in
    /// [`store::check`](crate::store::check).
    pub fn check(&self) -> StoreResult<()> {
        limits::check_worker_id(&self.holder.worker_id)?;
        if self.step_names.is_empty() {
            return Err(StoreError::InvalidArgument(
                "a wait for children names at least one child step".into(),
            ));
        }
        for name in &self.step_names {
            limits::check_step_name(name)?;
        }
        Ok(())
    }
}

/// The outcome of [`ChildStore::wait_for_children`].
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // One per join, like `EventWait`; boxing would buy nothing.
pub enum ChildWait {
    /// Every child has finished: their step attempts, completed with the children's
    /// outcomes ([`ChildOutcome::from_output`]), in the order the steps were named.
    Done(Vec<StepAttempt>),
    /// Some children are still live: the parent is parked (sleeping, no worker) until the
    /// last of them finishes, and the worker must let it go. The attempts of the children
    /// that had finished are completed already.
    Parked(WorkflowRun),
}

/// How a child run ended, as its parent's step attempt records it.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildOutcome {
    /// The child completed with this output.
    Completed(Value),
    /// The child failed for good with this error record.
    Failed(Value),
    /// The child was canceled.
    Canceled,
}

impl ChildOutcome {
    /// The outcome of a finished child run; `None` while it is live.
    pub fn of(child: &WorkflowRun) -> Option<Self> {
        match child.status {
            RunStatus::Completed => Some(ChildOutcome::Completed(
                child.output.clone().unwrap_or(Value::Null),
            )),
            RunStatus::Failed => Some(ChildOutcome::Failed(
                child.error.clone().unwrap_or(Value::Null),
            )),
            RunStatus::Canceled => Some(ChildOutcome::Canceled),
            _ => None,
        }
    }

    /// The outcome of a child in `status` with `output` and `error` (the stored columns);
    /// `None` while it is live.
    pub fn from_columns(
        status: RunStatus,
        output: Option<Value>,
        error: Option<Value>,
    ) -> Option<Self> {
        match status {
            RunStatus::Completed => Some(ChildOutcome::Completed(output.unwrap_or(Value::Null))),
            RunStatus::Failed => Some(ChildOutcome::Failed(error.unwrap_or(Value::Null))),
            RunStatus::Canceled => Some(ChildOutcome::Canceled),
            _ => None,
        }
    }

    /// The step output that records it: `{"status": "completed", "output": ..}`,
    /// `{"status": "failed", "error": ..}` or `{"status": "canceled"}`.
    pub fn to_output(&self) -> Value {
        match self {
            ChildOutcome::Completed(output) => json!({ "status": "completed", "output": output }),
            ChildOutcome::Failed(error) => json!({ "status": "failed", "error": error }),
            ChildOutcome::Canceled => json!({ "status": "canceled" }),
        }
    }

    /// Reads a step output written by [`ChildOutcome::to_output`]; `None` when it is not
    /// one.
    pub fn from_output(output: &Value) -> Option<Self> {
        match output.get("status")?.as_str()? {
            "completed" => Some(ChildOutcome::Completed(
                output.get("output").cloned().unwrap_or(Value::Null),
            )),
            "failed" => Some(ChildOutcome::Failed(
                output.get("error").cloned().unwrap_or(Value::Null),
            )),
            "canceled" => Some(ChildOutcome::Canceled),
            _ => None,
        }
    }
}

/// The outcome recorded for a child run that no longer exists (deleted by hand or by
/// retention): a failure the parent can handle.
pub fn missing_child() -> ChildOutcome {
    ChildOutcome::Failed(json!({
        "message": "the child run no longer exists",
        "kind": "child_missing",
        "retryable": false,
    }))
}

/// Child workflows (see the module docs). A capability: reached through
/// [`Store::children`](crate::Store::children).
#[async_trait::async_trait]
pub trait ChildStore: Send + Sync {
    /// Starts a child run from the step `params.step_name` of a run that `params.holder`
    /// holds, in one transaction fenced on that lease: creates the step attempt (kind
    /// [`StepKind::Child`], running, with the child's workflow in its config and the child's
    /// id in `child_workflow_run_id`) and the child run (pending now, unless `params.child`
    /// says otherwise; with `parent_run_id`, `parent_step_attempt_id` and
    /// `cancel_with_parent` set), and announces the child with
    /// [`Notification::RunAvailable`]. When the step already has a child attempt, nothing is
    /// created and the first child is returned (`created` false): a child is started
    /// exactly once per step, however often the parent replays or retries the start.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for a child with an idempotency key or a
    /// config that is not an object; the limit errors of [`CreateRun::check`]; worker-side
    /// errors (about the parent). Nothing is written then.
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild>;

    /// The wait of a run that `params.holder` holds for the children started by
    /// the steps `params.step_names`, in one transaction fenced on that lease: completes
    /// the step attempt of every child that has finished with the child's outcome
    /// ([`ChildOutcome::to_output`](crate::ChildOutcome::to_output)), then, when all have
    /// finished, returns their attempts ([`ChildWait::Done`]); otherwise parks the run
    /// (sleeping until [`limits::LATEST`], no worker) until the last live one of them
    /// finishes ([`ChildWait::Parked`]). The completion, failure for good or cancel of a
    /// child makes its parked parent available in the child's own transition and announces
    /// it with [`Notification::RunAvailable`].
    ///
    /// Errors: [`StoreError::UnknownStep`] when a name is not a child step of the run;
    /// [`StoreError::InvalidArgument`] for an empty list; worker-side errors.
    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip() {
        for outcome in [
            ChildOutcome::Completed(json!({ "n": 1 })),
            ChildOutcome::Failed(json!({ "message": "boom" })),
            ChildOutcome::Canceled,
        ] {
            assert_eq!(
                ChildOutcome::from_output(&outcome.to_output()),
                Some(outcome)
            );
        }
        assert_eq!(ChildOutcome::from_output(&json!({ "event": 1 })), None);
    }

    #[test]
    fn a_wait_names_a_child() {
        let wait = WaitForChildren {
            run_id: Uuid::now_v7(),
            holder: crate::Holder::new("w", 1),
            step_names: vec![],
        };
        assert!(matches!(wait.check(), Err(StoreError::InvalidArgument(_))));
    }
}
