//! The records the store keeps: workflow runs and step attempts.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// The lifecycle state of a workflow run.
///
/// `Pending`, `Running`, `Sleeping` and `Paused` are live; `Completed`, `Failed` and `Canceled`
/// are terminal and never change again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting to be claimed once `available_at` has passed.
    Pending,
    /// Claimed by a worker that holds a lease until `available_at`.
    Running,
    /// Parked by a durable sleep (or a step retry backoff) until `available_at`.
    Sleeping,
    /// Paused by an operator; not claimable until resumed.
    Paused,
    /// Finished successfully; `output` holds the result.
    Completed,
    /// Finished unsuccessfully; `error` holds the reason.
    Failed,
    /// Canceled by an operator.
    Canceled,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Sleeping,
        RunStatus::Paused,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Canceled,
    ];

    /// The name stored in the database and shown to users.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Sleeping => "sleeping",
            RunStatus::Paused => "paused",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
        }
    }

    /// `true` for `Completed`, `Failed` and `Canceled`.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Canceled
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`RunStatus`] or [`StepStatus`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for RunStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// The state of one step attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Started and not finished yet.
    Running,
    /// Finished successfully; `output` holds the memoized result.
    Completed,
    /// Finished unsuccessfully; `error` holds the reason.
    Failed,
    /// Its run was paused while the attempt was in flight.
    Paused,
    /// Its run was canceled while the attempt was in flight.
    Canceled,
}

impl StepStatus {
    /// The name stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            StepStatus::Running => "running",
            StepStatus::Completed => "completed",
            StepStatus::Failed => "failed",
            StepStatus::Paused => "paused",
            StepStatus::Canceled => "canceled",
        }
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            StepStatus::Running,
            StepStatus::Completed,
            StepStatus::Failed,
            StepStatus::Paused,
            StepStatus::Canceled,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// What a step attempt represents.
///
/// Non-exhaustive: new kinds of steps come with new features (match with a wildcard arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepKind {
    /// A `#[step]` function call.
    Function,
    /// A durable timer started by `WorkflowContext::sleep`.
    Sleep,
    /// A wait for an event sent to the run (`WorkflowContext::wait_for_event`); its output
    /// is the consumed event, or that the wait timed out.
    Event,
    /// A child workflow run started by the run (`WorkflowContext::child`,
    /// `WorkflowContext::spawn_child`): the attempt starts with the child (its
    /// `child_workflow_run_id`) and completes when the run has seen the child finish, with
    /// the child's outcome as output.
    Child,
    /// The marker of a patch the run took (`WorkflowContext::patched`): completed when
    /// written, with no output. It is not a call and has no position.
    Patch,
    /// A value published by the run (`WorkflowContext::set_state`): the attempt is recorded
    /// completed together with the value, with the key in its config and the version it
    /// gave the key as output (`{"version": n}`).
    State,
}

impl StepKind {
    /// The name stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            StepKind::Function => "function",
            StepKind::Sleep => "sleep",
            StepKind::Event => "event",
            StepKind::Child => "child",
            StepKind::Patch => "patch",
            StepKind::State => "state",
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StepKind {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "function" => Ok(StepKind::Function),
            "sleep" => Ok(StepKind::Sleep),
            "event" => Ok(StepKind::Event),
            "state" => Ok(StepKind::State),
            "child" => Ok(StepKind::Child),
            "patch" => Ok(StepKind::Patch),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

/// One execution of a workflow, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRun {
    /// The namespace the run belongs to.
    pub namespace: String,
    /// The run's id.
    pub id: Uuid,
    /// The registered workflow name.
    pub workflow_name: String,
    /// The workflow version the run is pinned to, if the workflow is versioned.
    pub version: Option<String>,
    /// Where the run is in its lifecycle.
    pub status: RunStatus,
    /// The caller-supplied deduplication key.
    pub idempotency_key: Option<String>,
    /// Run configuration, including the workflow retry policy under `retryPolicy`.
    pub config: Value,
    /// Free-form caller context (tracing ids, tenant, ...).
    pub context: Option<Value>,
    /// The workflow input.
    pub input: Option<Value>,
    /// The workflow output once completed.
    pub output: Option<Value>,
    /// The last error recorded on the run.
    pub error: Option<Value>,
    /// How many times the run has been claimed.
    pub attempts: i32,
    /// Namespace of the step attempt that started this run, for child runs.
    pub parent_step_attempt_namespace: Option<String>,
    /// The step attempt that started this run, for child runs.
    pub parent_step_attempt_id: Option<Uuid>,
    /// The worker holding the lease while running.
    pub worker_id: Option<String>,
    /// How many times the run has been claimed, ever: every claim (a start, a wake-up, the
    /// takeover of an expired lease or of a dead worker's run) increments it, and nothing
    /// decreases it. With `worker_id` it names the claim that holds the run
    /// ([`Holder`](crate::Holder)), the fence of every leased write.
    #[serde(default)]
    pub claim_epoch: i64,
    /// When the run becomes claimable (or, while running, when its lease expires).
    pub available_at: Option<DateTime<Utc>>,
    /// After this instant the run is failed instead of executed.
    pub deadline_at: Option<DateTime<Utc>>,
    /// When the current execution started.
    pub started_at: Option<DateTime<Utc>>,
    /// When the run reached a terminal state.
    pub finished_at: Option<DateTime<Utc>>,
    /// Creation time, from the database clock.
    pub created_at: DateTime<Utc>,
    /// Last change, from the database clock.
    pub updated_at: DateTime<Utc>,
    /// When the run was last retried ([`LifecycleStore::retry_run`](crate::LifecycleStore::retry_run)), from
    /// the database clock: replay ignores the step failures recorded before it.
    #[serde(default)]
    pub retried_at: Option<DateTime<Utc>>,
    /// The run this one was forked from ([`LifecycleStore::fork_run`](crate::LifecycleStore::fork_run)).
    #[serde(default)]
    pub forked_from_run_id: Option<Uuid>,
    /// The resolved step name the run was forked from: it and every later step run again.
    #[serde(default)]
    pub forked_from_step: Option<String>,
    /// The run that started this one as its child (its step is `parent_step_attempt_id`).
    #[serde(default)]
    pub parent_run_id: Option<Uuid>,
    /// Whether canceling the parent cancels this run too: `true` (the default, "cascade")
    /// unless the child was started detached from its parent's cancel.
    #[serde(default = "cascade_default")]
    pub cancel_with_parent: bool,
    /// The W3C trace context of the start's caller, which every execution of the run joins
    /// (see [`crate::trace`]).
    #[serde(default)]
    pub trace_context: Option<crate::trace::TraceContext>,
    /// The queue the run belongs to (see [`crate::queue`]).
    #[serde(default = "default_queue")]
    pub queue: String,
    /// The first run of the lineage this run continues ([`crate::continuation`]); `None`
    /// for a run that continues no other (the first of its lineage, whose own id is the
    /// lineage's): see [`WorkflowRun::lineage_id`].
    #[serde(default)]
    pub lineage_root_id: Option<Uuid>,
    /// The run that continued as this one (`ctx.continue_as_new`), if any.
    #[serde(default)]
    pub continued_from_run_id: Option<Uuid>,
    /// The run this one continued as: set when the run finished by continuing as new, in
    /// the same write that created that run. Such a run is `completed` without an output.
    #[serde(default)]
    pub continued_as_run_id: Option<Uuid>,
}

impl WorkflowRun {
    /// The id of the lineage the run belongs to: the id of its first run, shared by every
    /// run that continued from it ([`crate::continuation`]).
    pub fn lineage_id(&self) -> Uuid {
        self.lineage_root_id.unwrap_or(self.id)
    }
}

fn default_queue() -> String {
    crate::queue::DEFAULT_QUEUE.to_owned()
}

fn cascade_default() -> bool {
    true
}

/// One attempt at one step of a run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepAttempt {
    /// The namespace the attempt belongs to.
    pub namespace: String,
    /// The attempt's id.
    pub id: Uuid,
    /// The run this attempt belongs to.
    pub workflow_run_id: Uuid,
    /// The resolved step name (`name`, `name:1`, ...).
    pub step_name: String,
    /// What the step is.
    pub kind: StepKind,
    /// Where the attempt is in its lifecycle.
    pub status: StepStatus,
    /// Step configuration (retry policy, sleep deadline, ...).
    pub config: Value,
    /// Free-form context.
    pub context: Option<Value>,
    /// The memoized output once completed.
    pub output: Option<Value>,
    /// The error once failed.
    pub error: Option<Value>,
    /// The arguments the step function was called with, for inspection: a JSON array with
    /// one entry per parameter, in order, `{"name": "order", "value": ...}`, or, for an
    /// argument that could not be recorded, `{"name": "pool", "type": "...", "unrecorded":
    /// "<reason>"}` (see `tasks::guide::semantics`, "Step arguments"). `None` when nothing was recorded:
    /// `#[step(record_args = false)]`, steps that are not function calls (sleeps, events,
    /// children), and attempts stored before arguments were recorded.
    #[serde(default)]
    pub args: Option<Value>,
    /// Namespace of a child run started by this step.
    pub child_workflow_run_namespace: Option<String>,
    /// A child run started by this step.
    pub child_workflow_run_id: Option<Uuid>,
    /// When the attempt started, from the database clock.
    pub started_at: Option<DateTime<Utc>>,
    /// When the attempt finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// Creation time, from the database clock.
    pub created_at: DateTime<Utc>,
    /// Last change, from the database clock.
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
impl WorkflowRun {
    /// A run in `status` held by `worker_id`, everything else defaulted.
    pub fn for_tests(status: RunStatus, worker_id: Option<String>) -> Self {
        let now = Utc::now();
        WorkflowRun {
            namespace: "test".into(),
            id: Uuid::now_v7(),
            workflow_name: "test".into(),
            version: None,
            status,
            idempotency_key: None,
            config: Value::Object(Default::default()),
            context: None,
            input: None,
            output: None,
            error: None,
            attempts: 1,
            parent_step_attempt_namespace: None,
            parent_step_attempt_id: None,
            worker_id,
            claim_epoch: 0,
            available_at: None,
            deadline_at: None,
            started_at: None,
            finished_at: None,
            created_at: now,
            updated_at: now,
            retried_at: None,
            forked_from_run_id: None,
            forked_from_step: None,
            parent_run_id: None,
            cancel_with_parent: true,
            trace_context: None,
            queue: default_queue(),
            lineage_root_id: None,
            continued_from_run_id: None,
            continued_as_run_id: None,
        }
    }
}
