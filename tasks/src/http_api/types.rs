//! The documents the API reads and writes: the handlers take and return these types, and
//! the OpenAPI document is derived from them, so the two cannot disagree.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::chrono::{DateTime, Utc};
use crate::uuid::Uuid;
use crate::{PublishedState, RunEvent, RunStatus, SentEvent, StepAttempt, WorkflowRun};

/// Where a run is in its life; the last three are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting for a worker (or for its start time).
    Pending,
    /// A worker executes it.
    Running,
    /// Parked until a time or an event.
    Sleeping,
    /// Paused by an operator.
    Paused,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Canceled by an operator.
    Canceled,
}

impl From<RunStatus> for Status {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Pending => Status::Pending,
            RunStatus::Running => Status::Running,
            RunStatus::Sleeping => Status::Sleeping,
            RunStatus::Paused => Status::Paused,
            RunStatus::Completed => Status::Completed,
            RunStatus::Failed => Status::Failed,
            RunStatus::Canceled => Status::Canceled,
        }
    }
}

impl From<Status> for RunStatus {
    fn from(status: Status) -> Self {
        match status {
            Status::Pending => RunStatus::Pending,
            Status::Running => RunStatus::Running,
            Status::Sleeping => RunStatus::Sleeping,
            Status::Paused => RunStatus::Paused,
            Status::Completed => RunStatus::Completed,
            Status::Failed => RunStatus::Failed,
            Status::Canceled => RunStatus::Canceled,
        }
    }
}

/// A run: its status, input, output or error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Run {
    /// The run's id.
    pub id: Uuid,
    /// Its namespace.
    pub namespace: String,
    /// The workflow's name.
    pub workflow: String,
    /// The workflow's version, if versioned.
    pub version: Option<String>,
    /// Where the run is.
    pub status: Status,
    /// Whether the status is final (completed, failed, canceled).
    pub finished: bool,
    /// The input.
    pub input: Option<Value>,
    /// The output, once completed.
    pub output: Option<Value>,
    /// The error, once failed (`{"message": ..., ...}`).
    pub error: Option<Value>,
    /// The idempotency key it was started with.
    pub idempotency_key: Option<String>,
    /// Its queue.
    pub queue: String,
    /// How many times a worker claimed it.
    pub attempts: i32,
    /// The run that started it as a child.
    pub parent_run_id: Option<Uuid>,
    /// The run it was forked from.
    pub forked_from_run_id: Option<Uuid>,
    /// The step it was forked from.
    pub forked_from_step: Option<String>,
    /// The first run of its lineage (runs that continued as new one after the other); its
    /// own id when it continued no other.
    pub lineage_id: Uuid,
    /// The run that continued as this one.
    pub continued_from_run_id: Option<Uuid>,
    /// The run this one continued as: it finished by continuing as new.
    pub continued_as_run_id: Option<Uuid>,
    /// When it becomes claimable (or, running, when its lease ends).
    pub available_at: Option<DateTime<Utc>>,
    /// When it fails if not finished.
    pub deadline_at: Option<DateTime<Utc>>,
    /// When it was created (database clock).
    pub created_at: DateTime<Utc>,
    /// Its last change.
    pub updated_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<WorkflowRun> for Run {
    fn from(run: WorkflowRun) -> Self {
        let lineage_id = run.lineage_id();
        Run {
            id: run.id,
            namespace: run.namespace,
            workflow: run.workflow_name,
            version: run.version,
            status: run.status.into(),
            finished: run.status.is_terminal(),
            input: run.input,
            output: run.output,
            error: run.error,
            idempotency_key: run.idempotency_key,
            queue: run.queue,
            attempts: run.attempts,
            parent_run_id: run.parent_run_id,
            forked_from_run_id: run.forked_from_run_id,
            forked_from_step: run.forked_from_step,
            lineage_id,
            continued_from_run_id: run.continued_from_run_id,
            continued_as_run_id: run.continued_as_run_id,
            available_at: run.available_at,
            deadline_at: run.deadline_at,
            created_at: run.created_at,
            updated_at: run.updated_at,
            finished_at: run.finished_at,
        }
    }
}

/// One attempt at one step of a run.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Step {
    /// The attempt's id.
    pub id: Uuid,
    /// The resolved step name (`name`, `name:1`, ...).
    pub name: String,
    /// What the step is (`function`, `sleep`, `event`, `child`, ...).
    pub kind: String,
    /// Where the attempt is (`running`, `completed`, `failed`, ...).
    pub status: String,
    /// Its output, once completed.
    pub output: Option<Value>,
    /// Its error, once failed.
    pub error: Option<Value>,
    /// The child run it started.
    pub child_run_id: Option<Uuid>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<StepAttempt> for Step {
    fn from(step: StepAttempt) -> Self {
        let text = |value: serde_json::Result<Value>| match value {
            Ok(Value::String(text)) => text,
            _ => String::new(),
        };
        Step {
            id: step.id,
            name: step.step_name,
            kind: text(serde_json::to_value(step.kind)),
            status: text(serde_json::to_value(step.status)),
            output: step.output,
            error: step.error,
            child_run_id: step.child_workflow_run_id,
            started_at: step.started_at,
            finished_at: step.finished_at,
        }
    }
}

/// A page of runs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunPage {
    /// The runs, in the order asked for.
    pub runs: Vec<Run>,
    /// Pass as `after` for the next page; absent on the last.
    pub next: Option<String>,
    /// Pass as `before` for the previous page; absent on the first.
    pub prev: Option<String>,
}

/// A run's steps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StepPage {
    /// The step attempts, oldest first.
    pub steps: Vec<Step>,
    /// Pass as `after` for the next page; absent on the last.
    pub next: Option<String>,
}

/// A concurrency key and its limit.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyKey {
    /// The key.
    pub key: String,
    /// How many runs of the key may run at once.
    pub limit: u32,
}

/// A start: the workflow's input and the run's options.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The input, validated against the workflow's input schema (`null` or absent for a
    /// workflow without input).
    #[serde(default)]
    pub input: Value,
    /// The version to run (default: the latest this binary knows).
    pub version: Option<String>,
    /// A second start with this key returns the first run (`200` instead of `201`).
    pub idempotency_key: Option<String>,
    /// Start no earlier than this instant (RFC 3339).
    pub start_at: Option<DateTime<Utc>>,
    /// Start after this many milliseconds.
    pub delay_ms: Option<u64>,
    /// Fail the run if it has not finished by this instant.
    pub deadline: Option<DateTime<Utc>>,
    /// The queue (default: the workflow's).
    pub queue: Option<String>,
    /// A concurrency key and limit instead of the one the workflow derives.
    pub concurrency: Option<ConcurrencyKey>,
    /// Claimed before pending runs of lower priority (default 0).
    pub priority: Option<i32>,
    /// Free-form context stored with the run.
    pub context: Option<Value>,
}

/// An event to send to a run.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendEventBody {
    /// The topic the run's workflow declares.
    pub topic: String,
    /// The payload, validated against the topic's payload schema.
    #[serde(default)]
    pub payload: Value,
    /// A second send to the same run and topic with this key stores nothing.
    pub dedup_key: Option<String>,
}

/// A signal-with-start: an event for the run of the path's workflow and idempotency key,
/// and the start of that run when none holds the key.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalWithStartBody {
    /// The topic the workflow declares.
    pub topic: String,
    /// The payload, validated against the topic's payload schema.
    #[serde(default)]
    pub payload: Value,
    /// A second send to the same run and topic with this key stores nothing.
    pub dedup_key: Option<String>,
    /// The start of the run when none holds the key (its `idempotency_key` is the path's:
    /// absent, or the same). Absent: a start with `null` input and the defaults.
    pub start: Option<StartRun>,
    /// A new run holds its key only while it is live, so that once it has finished the
    /// next signal-with-start starts another (default `false`: for ever, and a finished run
    /// refuses the event with `409`).
    #[serde(default)]
    pub while_active: bool,
}

/// What a signal-with-start did: the run the event went to, whether it was started by
/// this request, and the event.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Signalled {
    /// This request started the run (`false`: a run held the key already).
    pub created: bool,
    /// The run, as the request left it.
    pub run: Run,
    /// The stored event.
    pub event: Event,
}

/// A stored event.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Event {
    /// The event's id.
    pub id: Uuid,
    /// The run it was sent to.
    pub run_id: Uuid,
    /// Its topic.
    pub topic: String,
    /// Its payload.
    pub payload: Value,
    /// Its deduplication key.
    pub dedup_key: Option<String>,
    /// The send repeated a deduplication key: nothing new was stored.
    pub duplicate: bool,
    /// The run was waiting on the topic and was woken.
    pub woke: bool,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

impl From<SentEvent> for Event {
    fn from(sent: SentEvent) -> Self {
        let RunEvent {
            id,
            workflow_run_id,
            topic,
            payload,
            dedup_key,
            created_at,
            ..
        } = sent.event;
        Event {
            id,
            run_id: workflow_run_id,
            topic,
            payload,
            dedup_key,
            duplicate: sent.duplicate,
            woke: sent.woke,
            created_at,
        }
    }
}

/// A value a run published under a key.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct State {
    /// The run.
    pub run_id: Uuid,
    /// The key.
    pub key: String,
    /// The latest value.
    pub value: Value,
    /// Its version: 1 for the first value, then one more per publication.
    pub version: u64,
    /// When it was published.
    pub updated_at: DateTime<Utc>,
}

impl From<PublishedState> for State {
    fn from(state: PublishedState) -> Self {
        State {
            run_id: state.run_id,
            key: state.key,
            value: state.value,
            version: state.version,
            updated_at: state.updated_at,
        }
    }
}

/// How long a long poll waits.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Seconds to wait at most (default 30, at most the API's maximum, 60 unless
    /// configured).
    pub timeout: Option<u64>,
}

/// Waiting for a newer value of a key.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StateWaitQuery {
    /// Answer with the first version greater than this (default 0: the first value).
    pub after: Option<u64>,
    /// Seconds to wait at most (default 30, at most the API's maximum).
    pub timeout: Option<u64>,
}

/// A listing's filters and position.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Keep runs in these statuses, comma-separated.
    pub status: Option<String>,
    /// Keep runs of this workflow.
    pub workflow: Option<String>,
    /// Keep the children of this run.
    pub parent: Option<Uuid>,
    /// Keep runs of this workflow version.
    pub version: Option<String>,
    /// Keep runs of this queue.
    pub queue: Option<String>,
    /// Keep runs of this concurrency key.
    pub concurrency_key: Option<String>,
    /// Search: the run with this id, and the runs started with this idempotency key (of
    /// any workflow), matched exactly.
    pub q: Option<String>,
    /// Runs per page (default 100).
    pub limit: Option<u32>,
    /// The page after this cursor.
    pub after: Option<String>,
    /// The page before this cursor.
    pub before: Option<String>,
    /// `desc` (the default: newest first) or `asc`.
    pub order: Option<String>,
}

/// A fork: the step to run again from.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// The resolved step name (as the run's steps list it); it and every later step run
    /// again.
    pub from_step: String,
}

/// A workflow this binary knows, with its JSON Schemas.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowInfo {
    /// Its name.
    pub name: String,
    /// Its version, if versioned.
    pub version: Option<String>,
    /// Its description (the doc comment).
    pub description: Option<String>,
    /// The JSON Schema of its input.
    pub input_schema: Value,
    /// The JSON Schema of its output.
    pub output_schema: Value,
    /// The events it accepts, with their payloads' JSON Schemas.
    pub events: Vec<EventInfo>,
}

/// An event topic a workflow declares.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventInfo {
    /// The topic.
    pub topic: String,
    /// The JSON Schema of its payload.
    pub payload_schema: Value,
}
