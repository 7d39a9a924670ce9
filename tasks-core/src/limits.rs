//! What the stores accept: the longest names and keys, the largest and deepest JSON
//! documents, the instants and durations that every store can hold.
//!
//! Every limit is checked before a database sees the value, in one place shared by every
//! store ([`CreateRun::check`](crate::CreateRun::check), [`ListRuns::check`](crate::ListRuns::check),
//! [`RecordStepAttempt::check`](crate::RecordStepAttempt::check), ... and the functions
//! here), so that Postgres, SQLite and any third store refuse exactly the same values, with
//! the same typed [`LimitError`], and store nothing when they do. A store reports it as
//! [`StoreError::Limit`](crate::StoreError::Limit), a client as
//! `ClientError::Limit`.
//!
//! Why these limits:
//!
//! * **NUL** (`\0`, `\u0000`) is refused in every name, key, namespace, filter and JSON
//!   string (object keys too): Postgres stores neither text nor `jsonb` with it.
//! * **Nesting** is limited to [`MAX_JSON_DEPTH`] levels, below the recursion limit (128)
//!   of the JSON decoder the stores read rows with, so everything stored reads back.
//! * **Lengths** keep names and keys within what a B-tree index entry holds.
//! * **Instants** are limited to the years 1–9999 ([`EARLIEST`], [`LATEST`]), which both
//!   stores hold; **durations** to [`MAX_DURATION`], so that now plus any of them stays in
//!   that range.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

pub use crate::finite::{NonFiniteFloat, check_finite};

/// Longest workflow name, in bytes (also the longest workflow-name filter of a listing).
pub const MAX_WORKFLOW_NAME_BYTES: usize = 255;
/// Longest workflow version, in bytes.
pub const MAX_VERSION_BYTES: usize = 64;
/// Longest resolved step name (`name:N` included), in bytes.
pub const MAX_STEP_NAME_BYTES: usize = 255;
/// Longest namespace, in bytes.
pub const MAX_NAMESPACE_BYTES: usize = 255;
/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 512;
/// Longest event topic, in bytes (an event wait's step name is `event/` and the topic).
pub const MAX_TOPIC_BYTES: usize = 200;
/// Longest worker id, in bytes.
pub const MAX_WORKER_ID_BYTES: usize = 255;
/// Longest concurrency key, in bytes.
pub const MAX_CONCURRENCY_KEY_BYTES: usize = 512;
/// Largest concurrency limit (runs of one key running at once).
pub const MAX_CONCURRENCY_LIMIT: u32 = i32::MAX as u32;
// Schedules.
/// Longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME_BYTES: usize = 255;
/// Longest cron expression, in bytes.
pub const MAX_CRON_BYTES: usize = 255;
/// Longest timezone name, in bytes.
pub const MAX_TIMEZONE_BYTES: usize = 64;
/// Most slots one firing of a schedule with [`CatchUp::All`](crate::schedule::CatchUp::All)
/// starts runs for.
pub const MAX_CATCH_UP: u32 = 1000;
/// Largest JSON payload (input, context, config, step output, workflow output), in bytes of
/// its compact JSON text: 2 MiB.
pub const MAX_PAYLOAD_BYTES: usize = 2 * 1024 * 1024;
/// Largest recorded error, in bytes of its compact JSON text: 1 MiB. The runtime's errors
/// are made to fit (see [`ErrorRecord::to_json`](crate::ErrorRecord::to_json)) rather than
/// refused.
pub const MAX_ERROR_BYTES: usize = 1024 * 1024;
/// Deepest JSON nesting: a scalar is 0 deep, `[]` is 1, `[[]]` is 2. Below the recursion
/// limit (128) of the decoder that reads rows back, with room for the stores' own wrapping.
pub const MAX_JSON_DEPTH: usize = 100;
/// Longest duration (delay, lease, sleep, retry interval, step time): 100 years of 365.25
/// days.
pub const MAX_DURATION: Duration = Duration::from_secs(36_525 * 24 * 60 * 60);

/// The earliest accepted instant: 0001-01-01T00:00:00Z.
pub const EARLIEST: DateTime<Utc> = match NaiveDate::from_ymd_opt(1, 1, 1) {
    Some(date) => match date.and_hms_micro_opt(0, 0, 0, 0) {
        Some(time) => time.and_utc(),
        None => DateTime::<Utc>::MIN_UTC,
    },
    None => DateTime::<Utc>::MIN_UTC,
};

/// The latest accepted instant: 9999-12-31T23:59:59.999999Z.
pub const LATEST: DateTime<Utc> = match NaiveDate::from_ymd_opt(9999, 12, 31) {
    Some(date) => match date.and_hms_micro_opt(23, 59, 59, 999_999) {
        Some(time) => time.and_utc(),
        None => DateTime::<Utc>::MAX_UTC,
    },
    None => DateTime::<Utc>::MAX_UTC,
};

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

/// Checks a name, key or namespace: at most `limit` bytes, without NUL.
pub fn check_text(field: Field, value: &str, limit: usize) -> Result<(), LimitError> {
    if value.len() > limit {
        return Err(LimitError::TooLong {
            field,
            bytes: value.len(),
            limit,
        });
    }
    if value.contains('\0') {
        return Err(LimitError::Nul {
            field,
            path: String::new(),
        });
    }
    Ok(())
}

/// Longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 255;

/// Why `name` is not a valid workflow name, version or step name, or `Ok`: it must hold at
/// least one character, and only letters and digits (of any script, as in Rust identifiers),
/// `_`, `-`, `.` and `/`. `:` is reserved for the `name:1` suffix of repeated step calls.
///
/// ```
/// use tasks_core::limits::is_valid_name;
///
/// assert!(is_valid_name("checkout-v2/eu.west").is_ok());
/// assert!(is_valid_name(" check out").is_err());
/// assert!(is_valid_name("charge:1").is_err());
/// ```
pub fn is_valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".into());
    }
    match name
        .char_indices()
        .find(|(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
    {
        None => Ok(()),
        Some((at, c)) => Err(format!(
            "{c:?} at byte {at}; only letters, digits, `_`, `-`, `.` and `/` are allowed"
        )),
    }
}

/// Checks a queue name: at most [`MAX_QUEUE_NAME_BYTES`], non-empty, and only the characters
/// a workflow name may hold (letters, digits, `_`, `-`, `.` and `/`), which is also what
/// `#[workflow(queue = "...")]` accepts at compile time.
pub fn check_queue_name(name: &str) -> Result<(), LimitError> {
    check_text(Field::Queue, name, MAX_QUEUE_NAME_BYTES)?;
    is_valid_name(name).map_err(|reason| LimitError::InvalidName {
        field: Field::Queue,
        value: name.to_owned(),
        reason,
    })
}

/// Checks a namespace ([`MAX_NAMESPACE_BYTES`], no NUL).
pub fn check_namespace(namespace: &str) -> Result<(), LimitError> {
    check_text(Field::Namespace, namespace, MAX_NAMESPACE_BYTES)
}

/// Checks the key of a published state value ([`MAX_TOPIC_BYTES`], like an event topic; no
/// NUL).
pub fn check_state_key(key: &str) -> Result<(), LimitError> {
    check_text(Field::StateKey, key, MAX_TOPIC_BYTES)
}

/// Checks an event topic ([`MAX_TOPIC_BYTES`], no NUL).
pub fn check_topic(topic: &str) -> Result<(), LimitError> {
    check_text(Field::Topic, topic, MAX_TOPIC_BYTES)
}

/// Checks a worker id ([`MAX_WORKER_ID_BYTES`], no NUL).
pub fn check_worker_id(worker_id: &str) -> Result<(), LimitError> {
    check_text(Field::WorkerId, worker_id, MAX_WORKER_ID_BYTES)
}

/// Checks a step name ([`MAX_STEP_NAME_BYTES`], no NUL).
pub fn check_step_name(step_name: &str) -> Result<(), LimitError> {
    check_text(Field::StepName, step_name, MAX_STEP_NAME_BYTES)
}

/// Checks the arguments of a claim or of a lease extension: the worker id and the lease.
pub fn check_lease(worker_id: &str, lease: Duration) -> Result<(), LimitError> {
    check_worker_id(worker_id)?;
    check_duration(Field::Lease, lease)
}

/// Checks an instant: within [`EARLIEST`]..=[`LATEST`].
pub fn check_time(field: Field, value: DateTime<Utc>) -> Result<(), LimitError> {
    if (EARLIEST..=LATEST).contains(&value) {
        Ok(())
    } else {
        Err(LimitError::TimeOutOfRange { field, value })
    }
}

/// Checks a duration: at most [`MAX_DURATION`].
pub fn check_duration(field: Field, value: Duration) -> Result<(), LimitError> {
    if value <= MAX_DURATION {
        Ok(())
    } else {
        Err(LimitError::DurationTooLong { field, value })
    }
}

/// `at + duration`, refused when the duration is longer than [`MAX_DURATION`] or the sum is
/// out of the accepted range.
pub fn add_duration(
    field: Field,
    at: DateTime<Utc>,
    duration: Duration,
) -> Result<DateTime<Utc>, LimitError> {
    check_duration(field, duration)?;
    let later = chrono::TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .ok_or(LimitError::DurationTooLong {
            field,
            value: duration,
        })?;
    check_time(field, later)?;
    Ok(later)
}

/// Checks a JSON payload: no NUL in any string or object key, at most [`MAX_JSON_DEPTH`]
/// deep, at most [`MAX_PAYLOAD_BYTES`] (or [`MAX_ERROR_BYTES`] for [`Field::Error`]) of
/// compact JSON. The walk never goes deeper than the limit, so a document nested far
/// deeper is refused without recursing through it.
pub fn check_json(field: Field, value: &Value) -> Result<(), LimitError> {
    let limit = match field {
        Field::Error => MAX_ERROR_BYTES,
        _ => MAX_PAYLOAD_BYTES,
    };
    let mut walk = Walk {
        field,
        limit,
        bytes: 0,
        path: Vec::new(),
    };
    walk.value(value, 0)
}

/// The state of [`check_json`]'s walk.
struct Walk<'a> {
    field: Field,
    limit: usize,
    /// Compact JSON bytes counted so far.
    bytes: usize,
    /// The keys and indexes down to the current value.
    path: Vec<Segment<'a>>,
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

impl<'a> Walk<'a> {
    fn value(&mut self, value: &'a Value, depth: usize) -> Result<(), LimitError> {
        match value {
            Value::Null => self.count(4),
            Value::Bool(true) => self.count(4),
            Value::Bool(false) => self.count(5),
            Value::Number(number) => {
                let mut counter = Counter(0);
                // Writing to a counter cannot fail.
                let _ = fmt::write(&mut counter, format_args!("{number}"));
                self.count(counter.0)
            }
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.enter(depth)?;
                self.count(2 + items.len().saturating_sub(1))?;
                for (index, item) in items.iter().enumerate() {
                    self.path.push(Segment::Index(index));
                    self.value(item, depth + 1)?;
                    self.path.pop();
                }
                Ok(())
            }
            Value::Object(map) => {
                self.enter(depth)?;
                self.count(2 + map.len().saturating_sub(1) + map.len())?;
                for (key, item) in map {
                    self.path.push(Segment::Key(key));
                    self.string(key)?;
                    self.value(item, depth + 1)?;
                    self.path.pop();
                }
                Ok(())
            }
        }
    }

    /// Refuses a container that would be deeper than the limit.
    fn enter(&self, depth: usize) -> Result<(), LimitError> {
        if depth >= MAX_JSON_DEPTH {
            return Err(LimitError::TooDeep {
                field: self.field,
                path: self.pointer(),
                limit: MAX_JSON_DEPTH,
            });
        }
        Ok(())
    }

    fn string(&mut self, text: &str) -> Result<(), LimitError> {
        if text.contains('\0') {
            return Err(LimitError::Nul {
                field: self.field,
                path: self.pointer(),
            });
        }
        let escaped: usize = text
            .chars()
            .map(|c| match c {
                '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
                c if (c as u32) < 0x20 => 6,
                c => c.len_utf8(),
            })
            .sum();
        self.count(escaped + 2)
    }

    fn count(&mut self, bytes: usize) -> Result<(), LimitError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > self.limit {
            return Err(LimitError::TooLarge {
                field: self.field,
                bytes: self.bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// The JSON Pointer of the current value.
    fn pointer(&self) -> String {
        let mut pointer = String::new();
        for segment in &self.path {
            pointer.push('/');
            match segment {
                Segment::Key(key) => pointer.push_str(&key.replace('~', "~0").replace('/', "~1")),
                Segment::Index(index) => pointer.push_str(&index.to_string()),
            }
        }
        if pointer.is_empty() {
            pointer.push('/');
        }
        pointer
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Checks that `value`, the JSON of a `T`, decodes back into a `T`: a value that serialized
/// lossily (a NaN or infinite float becomes `null`) or that `T` would refuse is refused
/// before it is stored. Returns the decoding error. A `null` that decodes (a NaN inside an
/// `Option<f64>` reads back as `None`) passes: run [`check_finite`] on the typed value
/// before serializing it for that.
pub fn check_round_trip<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> Result<(), serde_json::Error> {
    T::deserialize(value).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn the_size_count_is_the_compact_json_length() {
        let values = [
            json!(null),
            json!({ "a": [1, 2.5, -3, true, false, null], "é\"\n\u{1}": "x\\y\u{1f}" }),
            json!([[], {}, "", 1e300, u64::MAX, i64::MIN]),
        ];
        for value in values {
            let mut walk = Walk {
                field: Field::Input,
                limit: usize::MAX,
                bytes: 0,
                path: Vec::new(),
            };
            walk.value(&value, 0).unwrap();
            assert_eq!(walk.bytes, value.to_string().len(), "{value}");
        }
    }

    #[test]
    fn depth_is_accepted_up_to_the_limit_and_decodes() {
        let at_limit = nested(MAX_JSON_DEPTH);
        check_json(Field::Input, &at_limit).unwrap();
        let text = at_limit.to_string();
        let _: Value = serde_json::from_str(&text).unwrap();
        for depth in [MAX_JSON_DEPTH + 1, 128, 10_000] {
            let deep = nested(depth);
            assert!(matches!(
                check_json(Field::Input, &deep),
                Err(LimitError::TooDeep { .. })
            ));
            // A Value this deep would overflow the stack when dropped recursively.
            std::mem::forget(deep);
        }
    }

    #[test]
    fn nul_is_refused_in_strings_and_keys_with_its_path() {
        let error = check_json(Field::Context, &json!({ "a": ["ok", "x\u{0}"] })).unwrap_err();
        assert_eq!(
            error,
            LimitError::Nul {
                field: Field::Context,
                path: "/a/1".into()
            }
        );
        assert!(check_json(Field::Input, &json!({ "k\u{0}": 1 })).is_err());
        assert!(check_text(Field::WorkflowName, "a\0b", 255).is_err());
    }

    #[test]
    fn messages_name_the_field_and_the_limit() {
        let key = "k".repeat(1 << 20);
        let error = check_text(Field::IdempotencyKey, &key, MAX_IDEMPOTENCY_KEY_BYTES).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the idempotency key is 1048576 bytes; the limit is 512"
        );
    }

    #[test]
    fn instants_and_durations_are_bounded() {
        assert!(check_time(Field::Deadline, EARLIEST).is_ok());
        assert!(check_time(Field::Deadline, LATEST).is_ok());
        assert!(check_time(Field::Deadline, DateTime::<Utc>::MAX_UTC).is_err());
        assert!(check_time(Field::Deadline, DateTime::<Utc>::MIN_UTC).is_err());
        assert!(check_duration(Field::Delay, MAX_DURATION).is_ok());
        assert!(check_duration(Field::Delay, Duration::from_secs(u64::MAX)).is_err());
        assert!(add_duration(Field::Sleep, Utc::now(), Duration::from_secs(u64::MAX)).is_err());
        assert!(add_duration(Field::Sleep, LATEST, Duration::from_secs(1)).is_err());
        assert!(add_duration(Field::Sleep, Utc::now(), MAX_DURATION).is_ok());
    }
}
