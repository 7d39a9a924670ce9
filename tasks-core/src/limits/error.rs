//! What a refusal says: the value it is about ([`Field`]) and why ([`LimitError`]).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{EARLIEST, LATEST, MAX_DURATION};

/// The value a [`LimitError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// A workflow name.
    WorkflowName,
    /// A workflow version.
    Version,
    /// A step name.
    StepName,
    /// A namespace.
    Namespace,
    /// An idempotency key.
    IdempotencyKey,
    /// A worker id.
    WorkerId,
    /// The workflow-name filter of a listing.
    WorkflowNameFilter,
    /// A run's input.
    Input,
    /// A run's or step's context.
    Context,
    /// A run's or step's config.
    Config,
    /// A step's output.
    StepOutput,
    /// The recorded arguments of a step call.
    StepArgs,
    /// A workflow's output.
    WorkflowOutput,
    /// A recorded error.
    Error,
    /// When a run may start.
    AvailableAt,
    /// A run's deadline.
    Deadline,
    /// A start delay, or the delay of a released run.
    Delay,
    /// A lease.
    Lease,
    /// A durable sleep (its duration or the instant it ends).
    Sleep,
    /// An interval of a retry policy.
    RetryInterval,
    /// The backoff coefficient of a retry policy.
    BackoffCoefficient,
    /// How long a step attempt ran.
    Elapsed,
    /// The `created_after` filter of a listing.
    CreatedAfter,
    /// The `created_before` filter of a listing.
    CreatedBefore,
    /// A pagination cursor.
    Cursor,
    // Events sent to a run.
    /// The topic of an event.
    Topic,
    /// The payload of an event.
    EventPayload,
    /// The deduplication key of an event.
    DedupKey,
    /// How long a wait for an event may last.
    EventTimeout,
    // Flow control.
    /// A run's concurrency key.
    ConcurrencyKey,
    /// The concurrency limit of a run's key.
    ConcurrencyLimit,
    // Retention.
    /// The batch size of a purge.
    BatchSize,
    /// The finished-before instant of a purge.
    FinishedBefore,
    /// The age of the runs a purge deletes.
    PurgeAge,
    /// How often a worker purges.
    RetentionInterval,
    // Schedules.
    /// A schedule's name.
    ScheduleName,
    /// A schedule's cron expression.
    Cron,
    /// A schedule's timezone.
    Timezone,
    /// The bound of a schedule's catch-up.
    CatchUp,
    // Retry-after and idempotency scopes.
    /// The delay a step or workflow error asked to be retried after.
    RetryAfter,
    /// The time to live of an idempotency key.
    IdempotencyTtl,
    // Published state.
    /// The key of a published state value.
    StateKey,
    /// A published state value.
    StateValue,
    // Named queues.
    /// A queue's name.
    Queue,
    /// A queue's concurrency limit.
    QueueConcurrency,
    /// A queue's rate limit (starts per period).
    RateLimit,
    /// The period of a queue's rate limit.
    RatePeriod,
    /// A queue's concurrency limit per key.
    KeyConcurrency,
}

impl Field {
    /// The value as a phrase: "the idempotency key".
    pub const fn description(self) -> &'static str {
        match self {
            Field::WorkflowName => "the workflow name",
            Field::Version => "the workflow version",
            Field::StepName => "the step name",
            Field::Namespace => "the namespace",
            Field::IdempotencyKey => "the idempotency key",
            Field::WorkerId => "the worker id",
            Field::WorkflowNameFilter => "the workflow name filter",
            Field::Input => "the input",
            Field::Context => "the context",
            Field::Config => "the config",
            Field::StepOutput => "the step output",
            Field::StepArgs => "the step arguments",
            Field::WorkflowOutput => "the workflow output",
            Field::Error => "the error",
            Field::AvailableAt => "the start time",
            Field::Deadline => "the deadline",
            Field::Delay => "the delay",
            Field::Lease => "the lease",
            Field::Sleep => "the sleep",
            Field::RetryInterval => "the retry interval",
            Field::BackoffCoefficient => "the backoff coefficient",
            Field::Elapsed => "the step's running time",
            Field::CreatedAfter => "the created-after filter",
            Field::CreatedBefore => "the created-before filter",
            Field::Cursor => "the cursor",
            Field::Topic => "the event topic",
            Field::EventPayload => "the event payload",
            Field::DedupKey => "the deduplication key",
            Field::EventTimeout => "the event timeout",
            Field::ConcurrencyKey => "the concurrency key",
            Field::ConcurrencyLimit => "the concurrency limit",
            Field::BatchSize => "the batch size",
            Field::FinishedBefore => "the finished-before filter",
            Field::PurgeAge => "the purge age",
            Field::RetentionInterval => "the retention interval",
            Field::ScheduleName => "the schedule name",
            Field::Cron => "the cron expression",
            Field::Timezone => "the timezone",
            Field::CatchUp => "the catch-up bound",
            Field::RetryAfter => "the retry-after delay",
            Field::IdempotencyTtl => "the idempotency key's time to live",
            Field::StateKey => "the state key",
            Field::StateValue => "the state value",
            Field::Queue => "the queue name",
            Field::QueueConcurrency => "the queue's concurrency limit",
            Field::RateLimit => "the rate limit",
            Field::RatePeriod => "the rate limit's period",
            Field::KeyConcurrency => "the queue's concurrency limit per key",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// A value refused because it exceeds one of the limits of this module. Nothing was
/// stored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A name, key or namespace is too long.
    #[error("{field} is {bytes} bytes; the limit is {limit}")]
    TooLong {
        /// What was refused.
        field: Field,
        /// Its length in bytes.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// A JSON document is too large.
    #[error("{field} is {bytes} bytes as JSON; the limit is {limit}")]
    TooLarge {
        /// What was refused.
        field: Field,
        /// Its size in bytes of compact JSON, counted up to just past the limit.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// A JSON document is nested too deep.
    #[error("{field} is nested deeper than {limit} levels at {path}; the limit is {limit}")]
    TooDeep {
        /// What was refused.
        field: Field,
        /// JSON Pointer to the first value past the limit.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// A name, key, namespace, filter or JSON string (or object key) contains NUL.
    #[error(
        "{field} contains a NUL character (\\u0000){}, which no store can hold",
        if path.is_empty() { String::new() } else { format!(" at {path}") }
    )]
    Nul {
        /// What was refused.
        field: Field,
        /// JSON Pointer to the string or key with NUL; empty for a name or key.
        path: String,
    },
    /// An instant outside [`EARLIEST`]..=[`LATEST`].
    #[error("{field} {value} is outside the accepted range {EARLIEST}..={LATEST}")]
    TimeOutOfRange {
        /// What was refused.
        field: Field,
        /// The instant.
        value: DateTime<Utc>,
    },
    /// A duration longer than [`MAX_DURATION`], or an instant that it would put out of
    /// range.
    #[error("{field} is {value:?}; the limit is {MAX_DURATION:?}")]
    DurationTooLong {
        /// What was refused.
        field: Field,
        /// The duration.
        value: Duration,
    },
    /// A number that is not finite, or negative, where a finite non-negative one is needed.
    #[error("{field} is {value}; it must be a finite number of at least 0")]
    NotFinite {
        /// What was refused.
        field: Field,
        /// The number.
        value: f64,
    },
    /// A name with a character names may not hold (names take letters, digits, `_`, `-`,
    /// `.` and `/`), or an empty name.
    #[error("{field} {value:?} is not a valid name: {reason}")]
    InvalidName {
        /// What was refused.
        field: Field,
        /// The name.
        value: String,
        /// Why.
        reason: String,
    },
    /// A whole number outside its accepted range.
    #[error("{field} is {value}; it must be in {min}..={max}")]
    OutOfRange {
        /// What was refused.
        field: Field,
        /// The number.
        value: i64,
        /// The smallest accepted value.
        min: i64,
        /// The largest accepted value.
        max: i64,
    },
}

impl LimitError {
    /// What was refused.
    pub fn field(&self) -> Field {
        match self {
            LimitError::TooLong { field, .. }
            | LimitError::TooLarge { field, .. }
            | LimitError::TooDeep { field, .. }
            | LimitError::Nul { field, .. }
            | LimitError::TimeOutOfRange { field, .. }
            | LimitError::DurationTooLong { field, .. }
            | LimitError::NotFinite { field, .. }
            | LimitError::OutOfRange { field, .. }
            | LimitError::InvalidName { field, .. } => *field,
        }
    }
}
