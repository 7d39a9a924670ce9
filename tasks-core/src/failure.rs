//! Errors as they are recorded on runs and steps, and the error type workflows return.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An error as stored in a run's or step's `error` column: its message and the messages of
/// its source chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// The error's own message.
    pub message: String,
    /// The messages of `source()`, `source().source()`, ... outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Where the error came from: `"workflow"`, `"step"`, `"input"`, `"output"`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `false` when retrying cannot help (invalid input, exhausted step, ...).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub retryable: bool,
    /// The error asks to be retried after this delay (a [`RetryAfter`] in its chain, or
    /// [`WorkflowError::retry_after`]): the run parks until then without using up an
    /// attempt. Stored as `retryAfterMs`.
    #[serde(
        rename = "retryAfterMs",
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_millis"
    )]
    pub retry_after: Option<Duration>,
}

mod optional_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => serializer.serialize_u64(value.as_millis().min(u64::MAX as u128) as u64),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|ms| ms.map(Duration::from_millis))
    }
}

/// An error that asks for its step or workflow to be tried again after a delay, for example
/// a rate-limited API's HTTP 429 with `Retry-After`: the run parks (its worker slot is free)
/// until then, and the attempt does not count against the retry policy.
///
/// Return it as the error, or anywhere in the error's `source()` chain (a `#[source]` field
/// of your own error type: it is `Serialize + Deserialize`, so serde error types can hold
/// it), or inside a `WorkflowError`, boxed error, `anyhow::Error` or `std::io::Error`:
///
/// ```
/// use std::time::Duration;
/// use tasks_core::{ErrorRecord, RetryAfter, WorkflowError};
///
/// #[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
/// enum ApiError {
///     #[error("rate limited")]
///     RateLimited(#[source] RetryAfter),
///     #[error("bad request: {0}")]
///     BadRequest(String),
/// }
///
/// let error = ApiError::RateLimited(RetryAfter::new(Duration::from_secs(30)));
/// let record = ErrorRecord::from_error(&error);
/// assert_eq!(record.retry_after, Some(Duration::from_secs(30)));
///
/// let error = WorkflowError::msg("slow down").retry_after(Duration::from_secs(5));
/// assert_eq!(error.record().retry_after, Some(Duration::from_secs(5)));
/// ```
///
/// The delay may be at most [`MAX_DURATION`](crate::limits::MAX_DURATION); a longer one
/// fails the run for good with a [`LimitError`](crate::LimitError). An error that is also
/// non-retryable ([`WorkflowError::non_retryable`]) is not retried at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryAfter {
    #[serde(rename = "delayMs", with = "millis")]
    delay: Duration,
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis().min(u64::MAX as u128) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

impl RetryAfter {
    /// Try again after `delay` (kept to the millisecond).
    pub fn new(delay: Duration) -> Self {
        let millis = delay.as_millis().min(u128::from(u64::MAX)) as u64;
        RetryAfter {
            delay: Duration::from_millis(millis),
        }
    }

    /// The delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// Reads an HTTP `Retry-After` header value: delay-seconds (`"120"`) or an HTTP date
    /// (`"Wed, 21 Oct 2015 07:28:00 GMT"`, read against `now`; a date in the past means
    /// no delay). `None` when it is neither.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tasks_core::RetryAfter;
    ///
    /// let now = chrono::Utc::now();
    /// assert_eq!(RetryAfter::from_header("120", now).unwrap().delay(), Duration::from_secs(120));
    /// assert!(RetryAfter::from_header("soon", now).is_none());
    /// ```
    pub fn from_header(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Self> {
        let value = value.trim();
        if let Ok(seconds) = value.parse::<u64>() {
            return Some(RetryAfter::new(Duration::from_secs(seconds)));
        }
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        let delay = (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO);
        Some(RetryAfter::new(delay))
    }

    /// The delay asked for by `error` or any error of its `source()` chain (looking inside
    /// `std::io::Error`s too), if any asks for one: the first found wins.
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(retry) = error.downcast_ref::<RetryAfter>() {
                return Some(retry.delay);
            }
            if let Some(io) = error.downcast_ref::<std::io::Error>()
                && let Some(inner) = io.get_ref()
                && let Some(delay) = RetryAfter::find(inner)
            {
                return Some(delay);
            }
            next = error.source();
        }
        None
    }
}

impl fmt::Display for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "retry after {:?}", self.delay)
    }
}

impl std::error::Error for RetryAfter {}

/// Longest message (and source message) of a stored error, in bytes; longer ones are cut
/// (with `...` at the end). With [`MAX_ERROR_SOURCES`], a stored error always fits
/// [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 8 * 1024;

/// Most sources kept in a stored error.
pub const MAX_ERROR_SOURCES: usize = 16;

/// `text` without NUL and cut to at most `limit` bytes (on a character boundary).
fn storable(text: &str, limit: usize) -> String {
    let mut text = text.replace('\0', "\u{fffd}");
    if text.len() > limit {
        let mut end = limit.saturating_sub(3);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// The message of a caught panic: its `&str` or `String` payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_owned())
}

fn yes() -> bool {
    true
}

fn is_true(value: &bool) -> bool {
    *value
}

impl ErrorRecord {
    /// A record with only a message.
    pub fn new(message: impl Into<String>) -> Self {
        ErrorRecord {
            message: message.into(),
            sources: Vec::new(),
            kind: None,
            retryable: true,
            retry_after: None,
        }
    }

    /// Records `error` and its source chain; a [`RetryAfter`] in the chain sets
    /// [`retry_after`](Self::retry_after).
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut sources = Vec::new();
        let mut next = error.source();
        while let Some(source) = next {
            sources.push(source.to_string());
            next = source.source();
        }
        ErrorRecord {
            message: error.to_string(),
            sources,
            kind: None,
            retryable: true,
            retry_after: RetryAfter::find(error),
        }
    }

    /// Asks for a retry after `delay` (see [`RetryAfter`]).
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.retry_after = Some(RetryAfter::new(delay).delay());
        self
    }

    /// Sets where the error came from.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Marks the error as one that retrying cannot fix.
    pub fn non_retryable(mut self) -> Self {
        self.retryable = false;
        self
    }

    /// The JSON stored in the database, made to fit the [`limits`](crate::limits) so that
    /// a failure is always recorded: NUL characters become U+FFFD, the message and each
    /// source are cut to [`MAX_ERROR_MESSAGE_BYTES`], at most [`MAX_ERROR_SOURCES`] sources
    /// are kept, and the kind is cut to 64 bytes.
    pub fn to_json(&self) -> Value {
        let fit = ErrorRecord {
            message: storable(&self.message, MAX_ERROR_MESSAGE_BYTES),
            sources: self
                .sources
                .iter()
                .take(MAX_ERROR_SOURCES)
                .map(|source| storable(source, MAX_ERROR_MESSAGE_BYTES))
                .collect(),
            kind: self.kind.as_deref().map(|kind| storable(kind, 64)),
            retryable: self.retryable,
            retry_after: self.retry_after,
        };
        serde_json::to_value(&fit).unwrap_or_else(|_| serde_json::json!({ "message": fit.message }))
    }

    /// Reads a stored error; anything without a `message` string is kept as its JSON text.
    pub fn from_json(value: &Value) -> Self {
        serde_json::from_value(value.clone())
            .unwrap_or_else(|_| ErrorRecord::new(value.to_string()))
    }
}

impl fmt::Display for ErrorRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        for source in &self.sources {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

/// The error type most workflows return.
///
/// Any `std::error::Error + Send + Sync + 'static` converts into it with `?`, keeping its
/// source chain, so steps that return their own error types compose without boilerplate:
///
/// ```
/// use tasks_core::WorkflowError;
///
/// fn parse(text: &str) -> Result<u32, WorkflowError> {
///     let n: u32 = text.parse()?; // ParseIntError -> WorkflowError
///     if n == 0 {
///         return Err(WorkflowError::msg("zero is not allowed").non_retryable());
///     }
///     Ok(n)
/// }
/// assert_eq!(parse("7").unwrap(), 7);
/// assert_eq!(parse("x").unwrap_err().to_string(), "invalid digit found in string");
/// assert!(!parse("0").unwrap_err().is_retryable());
/// ```
///
/// Like `anyhow::Error`, it does not implement `std::error::Error` itself (that would clash
/// with the blanket `From`); use [`WorkflowError::record`] or its `Display`.
pub struct WorkflowError {
    record: ErrorRecord,
    inner: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl WorkflowError {
    /// An error with only a message.
    pub fn msg(message: impl fmt::Display) -> Self {
        WorkflowError {
            record: ErrorRecord::new(message.to_string()).with_kind("workflow"),
            inner: None,
        }
    }

    /// An error from a boxed one, keeping its source chain: what `?` cannot do, because
    /// `Box<dyn Error + Send + Sync>` is not itself a `std::error::Error`.
    ///
    /// ```
    /// use tasks_core::WorkflowError;
    ///
    /// let boxed: Box<dyn std::error::Error + Send + Sync> = "card declined".into();
    /// let error = WorkflowError::from_boxed(boxed);
    /// assert_eq!(error.to_string(), "card declined");
    /// ```
    ///
    /// `anyhow::Error` converts into such a box, so `WorkflowError::from_boxed(error.into())`
    /// works for it too.
    pub fn from_boxed(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        WorkflowError {
            record: ErrorRecord::from_error(&*error).with_kind("workflow"),
            inner: Some(error),
        }
    }

    /// Marks the error as permanent: the run fails without using its retry policy.
    pub fn non_retryable(mut self) -> Self {
        self.record.retryable = false;
        self
    }

    /// Asks for the step or workflow to be tried again after `delay` instead of by its retry
    /// policy: the run parks (its worker slot is free) and the attempt is not used up. See
    /// [`RetryAfter`], which does the same from inside any error's source chain.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tasks_core::WorkflowError;
    ///
    /// let error = WorkflowError::msg("HTTP 429").retry_after(Duration::from_secs(2));
    /// assert_eq!(error.retry_after_delay(), Some(Duration::from_secs(2)));
    /// ```
    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.record = self.record.with_retry_after(delay);
        self
    }

    /// The delay this error asks to be retried after, if any.
    pub fn retry_after_delay(&self) -> Option<Duration> {
        self.record.retry_after
    }

    /// Whether the workflow retry policy applies to this error.
    pub fn is_retryable(&self) -> bool {
        self.record.retryable
    }

    /// The error as it will be recorded.
    pub fn record(&self) -> &ErrorRecord {
        &self.record
    }

    /// The original error, when this one was converted from a typed error.
    pub fn source_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.inner.as_deref()
    }

    /// Tries to get the original error back as `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.inner
            .as_deref()
            .and_then(|inner| inner.downcast_ref::<E>())
    }
}

impl<E> From<E> for WorkflowError
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        WorkflowError {
            record: ErrorRecord::from_error(&error).with_kind("workflow"),
            inner: Some(Box::new(error)),
        }
    }
}

impl fmt::Display for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.record.message)
    }
}

impl fmt::Debug for WorkflowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowError")
            .field("message", &self.record.message)
            .field("sources", &self.record.sources)
            .field("retryable", &self.record.retryable)
            .field("retry_after", &self.record.retry_after)
            .finish()
    }
}

/// Errors that a workflow or step may return: anything that can be turned into an
/// [`ErrorRecord`]. A step's error type must also be rebuildable from its record, which
/// `ReplayError` checks.
///
/// Implemented for
/// - every `std::error::Error + 'static` (your own `thiserror` enums, `std::io::Error`, ...);
/// - `Box<dyn Error + Send + Sync>`, `Box<dyn Error + Send>` and `Box<dyn Error>`, which are
///   not themselves `std::error::Error`;
/// - [`WorkflowError`];
/// - `anyhow::Error`, with the `anyhow` feature.
///
/// The parameter `Via` only tells these impls apart, so that they do not overlap (a boxed
/// error and `anyhow::Error` could one day implement `std::error::Error`, and Rust refuses
/// two impls that might then both apply). It is always inferred: write `E: RecordError<V>`
/// with a generic `V` to accept them all, or `E: RecordError` for `std::error::Error` types
/// only.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be recorded as the error of a workflow or step",
    label = "an error is recorded with the run, to decide on a retry and to report it",
    note = "use a type that implements `std::error::Error + 'static`, `Box<dyn std::error::Error + Send + Sync>`, `tasks::WorkflowError`, or `anyhow::Error` with the `anyhow` feature"
)]
pub trait RecordError<Via = via::StdError> {
    /// The error as it will be stored.
    fn to_record(&self) -> ErrorRecord;
}

/// The `Via` parameters of [`RecordError`]: one per family of impls. Never named by hand.
pub mod via {
    /// Through `std::error::Error`.
    #[derive(Debug)]
    pub enum StdError {}
    /// Through a boxed `dyn std::error::Error`.
    #[derive(Debug)]
    pub enum Boxed {}
    /// [`WorkflowError`](super::WorkflowError) itself.
    #[derive(Debug)]
    pub enum Itself {}
    /// Through `anyhow::Error` (the `anyhow` feature).
    #[derive(Debug)]
    pub enum Anyhow {}
    /// Through `Serialize + DeserializeOwned` (replaying a step's error, see
    /// `ReplayError`).
    #[derive(Debug)]
    pub enum Serde {}
    /// `std::io::Error` (replaying a step's error, see `ReplayError`).
    #[derive(Debug)]
    pub enum Io {}
}

impl<E> RecordError<via::StdError> for E
where
    E: std::error::Error + 'static,
{
    fn to_record(&self) -> ErrorRecord {
        ErrorRecord::from_error(self)
    }
}

impl RecordError<via::Boxed> for Box<dyn std::error::Error + Send + Sync + 'static> {
    fn to_record(&self) -> ErrorRecord {
        ErrorRecord::from_error(&**self)
    }
}

impl RecordError<via::Boxed> for Box<dyn std::error::Error + Send + 'static> {
    fn to_record(&self) -> ErrorRecord {
        ErrorRecord::from_error(&**self)
    }
}

impl RecordError<via::Boxed> for Box<dyn std::error::Error + 'static> {
    fn to_record(&self) -> ErrorRecord {
        ErrorRecord::from_error(&**self)
    }
}

impl RecordError<via::Itself> for WorkflowError {
    fn to_record(&self) -> ErrorRecord {
        self.record.clone()
    }
}

#[cfg(feature = "anyhow")]
impl RecordError<via::Anyhow> for anyhow::Error {
    fn to_record(&self) -> ErrorRecord {
        let error: &(dyn std::error::Error + Send + Sync + 'static) = self.as_ref();
        ErrorRecord::from_error(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{Field, check_json};

    #[test]
    fn any_error_is_stored_within_the_limits() {
        let huge = "é\0\u{1}".repeat(100_000);
        let mut record = ErrorRecord::new(huge.clone()).with_kind(huge.clone());
        record.sources = vec![huge; 100];
        let json = record.to_json();
        check_json(Field::Error, &json).unwrap();
        let back = ErrorRecord::from_json(&json);
        assert!(back.message.len() <= MAX_ERROR_MESSAGE_BYTES);
        assert!(back.message.starts_with("é\u{fffd}"));
        assert_eq!(back.sources.len(), MAX_ERROR_SOURCES);
    }
}
