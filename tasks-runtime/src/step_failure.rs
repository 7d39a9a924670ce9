//! Handled step errors replay deterministically: a step's final error is stored with its last
//! attempt, and a replay rebuilds it from there instead of running the step again.
//!
//! A step's error type says how it is rebuilt, through [`ReplayError`], checked at compile
//! time by `#[step]`:
//!
//! - your own error types that are `std::error::Error + Serialize + DeserializeOwned` are
//!   stored as JSON and come back as an equal value (the same enum variant, the same fields);
//! - [`WorkflowError`], `Box<dyn Error + Send + Sync>` (and the other boxes) and
//!   `anyhow::Error` come back as a [`StepFailure`] in that type: the same message, source
//!   messages and retryability, and `downcast_ref::<StepFailure>()` finds it;
//! - `std::io::Error` comes back with the same [`ErrorKind`](std::io::ErrorKind) (kinds this
//!   crate's Rust version does not name become `Other`) and a [`StepFailure`] inside.
//!
//! Any other type is a compile error on the step's error type that says so.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::failure::{ErrorRecord, WorkflowError, via};

/// The key of a stored step error that marks it as the step's final error, handed back to the
/// workflow; its value is what [`ReplayError::replay_data`] returned.
pub(crate) const REPLAY_KEY: &str = "replay";

/// A step's final error as it was stored: what a replay hands back (inside the step's error
/// type) instead of running the step again.
///
/// It is a `std::error::Error` whose message and `source()` chain are those of the error the
/// first execution saw, so it is recorded again as the same [`ErrorRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    record: ErrorRecord,
    source: Option<Box<FailureSource>>,
}

/// One message of a [`StepFailure`]'s source chain.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FailureSource {
    message: String,
    next: Option<Box<FailureSource>>,
}

impl StepFailure {
    /// The failure of a stored error record.
    pub fn new(record: ErrorRecord) -> Self {
        let source = record.sources.iter().rev().fold(None, |next, message| {
            Some(Box::new(FailureSource {
                message: message.clone(),
                next,
            }))
        });
        StepFailure { record, source }
    }

    /// The stored record: message, sources, kind (`"step"`) and retryability.
    pub fn record(&self) -> &ErrorRecord {
        &self.record
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.record.message
    }

    /// Whether the attempt ran past its `#[step(timeout = "...")]` (the record's kind is
    /// `"timeout"`).
    pub fn is_timeout(&self) -> bool {
        self.record.kind.as_deref() == Some(TIMEOUT_KIND)
    }
}

/// The kind of the error recorded for an attempt whose error asked to be retried after a
/// delay ([`RetryAfter`](crate::RetryAfter)): it parked the run and is not counted against
/// the step's retry policy.
pub(crate) const RETRY_AFTER_KIND: &str = "retry_after";

/// The kind of the error recorded for an attempt that ran past its timeout.
pub(crate) const TIMEOUT_KIND: &str = "timeout";

/// The error of an attempt that ran past its timeout, as `E`: a [`StepFailure`] (for which
/// [`StepFailure::is_timeout`] holds) in `E`, or `None` when `E` has no room for one (your own
/// serde error types).
pub(crate) fn timeout_error<E: ReplayError<Via>, Via>(record: &ErrorRecord) -> Option<E> {
    let data = json!({ "ioKind": "TimedOut" });
    E::rebuild(StepFailure::new(record.clone()), &data).ok()
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.record.message)
    }
}

impl std::error::Error for StepFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl fmt::Display for FailureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FailureSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.next
            .as_deref()
            .map(|next| next as &(dyn std::error::Error + 'static))
    }
}

/// Error types a `#[step]` may return: they are recorded, and a step's final error is
/// rebuilt from its record on replay, so that a workflow that handled it takes the same
/// branch again.
///
/// Implemented for
/// - your own `std::error::Error + Serialize + DeserializeOwned` types (rebuilt as an equal
///   value);
/// - [`WorkflowError`], `Box<dyn Error + Send + Sync>`, `Box<dyn Error + Send>`,
///   `Box<dyn Error>` and `anyhow::Error` with the `anyhow` feature (rebuilt around a
///   [`StepFailure`] with the same message, sources and retryability);
/// - `std::io::Error` (rebuilt with the same kind, around a [`StepFailure`]).
///
/// `Via` only tells these impls apart and is always inferred, as for
/// [`RecordError`](crate::RecordError).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be replayed as the error of a step",
    label = "a step's final error is stored, and a replay hands it back to the workflow without running the step again",
    note = "derive `serde::Serialize` and `serde::Deserialize` on your error type, or return `tasks::WorkflowError`, `Box<dyn std::error::Error + Send + Sync>`, `std::io::Error`, or `anyhow::Error` with the `anyhow` feature"
)]
pub trait ReplayError<Via>: Sized {
    /// The error as it will be recorded.
    fn failure_record(&self) -> ErrorRecord;

    /// What is stored besides the record to rebuild the error (a JSON object), or why it
    /// cannot be stored.
    fn replay_data(&self) -> Result<Value, String>;

    /// The error rebuilt from its stored record and [`replay_data`](Self::replay_data), or
    /// why it cannot be.
    fn rebuild(failure: StepFailure, data: &Value) -> Result<Self, String>;
}

impl<E> ReplayError<via::Serde> for E
where
    E: std::error::Error + Serialize + DeserializeOwned + 'static,
{
    fn failure_record(&self) -> ErrorRecord {
        ErrorRecord::from_error(self)
    }

    fn replay_data(&self) -> Result<Value, String> {
        crate::limits::check_finite(self)
            .map_err(|found| format!("it would not read back as the same value: {found}"))?;
        let value = serde_json::to_value(self)
            .map_err(|error| format!("it could not be serialized: {error}"))?;
        crate::limits::check_round_trip::<E>(&value)
            .map_err(|error| format!("it would not read back as the same value: {error}"))?;
        Ok(json!({ "value": value }))
    }

    fn rebuild(_failure: StepFailure, data: &Value) -> Result<Self, String> {
        let value = data
            .get("value")
            .ok_or("the stored error has no value (was the error type changed?)")?;
        E::deserialize(value).map_err(|error| error.to_string())
    }
}

impl ReplayError<via::Itself> for WorkflowError {
    fn failure_record(&self) -> ErrorRecord {
        self.record().clone()
    }

    fn replay_data(&self) -> Result<Value, String> {
        Ok(json!({}))
    }

    fn rebuild(failure: StepFailure, _data: &Value) -> Result<Self, String> {
        let retryable = failure.record().retryable;
        let error = WorkflowError::from(failure);
        Ok(if retryable {
            error
        } else {
            error.non_retryable()
        })
    }
}

macro_rules! boxed_replay {
    ($($ty:ty),*) => {$(
        impl ReplayError<via::Boxed> for $ty {
            fn failure_record(&self) -> ErrorRecord {
                ErrorRecord::from_error(&**self)
            }

            fn replay_data(&self) -> Result<Value, String> {
                Ok(json!({}))
            }

            fn rebuild(failure: StepFailure, _data: &Value) -> Result<Self, String> {
                Ok(Box::new(failure))
            }
        }
    )*};
}

boxed_replay!(
    Box<dyn std::error::Error + Send + Sync + 'static>,
    Box<dyn std::error::Error + Send + 'static>,
    Box<dyn std::error::Error + 'static>
);

#[cfg(feature = "anyhow")]
impl ReplayError<via::Anyhow> for anyhow::Error {
    fn failure_record(&self) -> ErrorRecord {
        let error: &(dyn std::error::Error + Send + Sync + 'static) = self.as_ref();
        ErrorRecord::from_error(error)
    }

    fn replay_data(&self) -> Result<Value, String> {
        Ok(json!({}))
    }

    fn rebuild(failure: StepFailure, _data: &Value) -> Result<Self, String> {
        Ok(anyhow::Error::new(failure))
    }
}

/// The `io::ErrorKind`s a replay restores by name; others come back as `Other`.
const IO_KINDS: &[std::io::ErrorKind] = {
    use std::io::ErrorKind::*;
    &[
        NotFound,
        PermissionDenied,
        ConnectionRefused,
        ConnectionReset,
        HostUnreachable,
        NetworkUnreachable,
        ConnectionAborted,
        NotConnected,
        AddrInUse,
        AddrNotAvailable,
        NetworkDown,
        BrokenPipe,
        AlreadyExists,
        WouldBlock,
        NotADirectory,
        IsADirectory,
        DirectoryNotEmpty,
        ReadOnlyFilesystem,
        StaleNetworkFileHandle,
        InvalidInput,
        InvalidData,
        TimedOut,
        WriteZero,
        StorageFull,
        NotSeekable,
        QuotaExceeded,
        FileTooLarge,
        ResourceBusy,
        ExecutableFileBusy,
        Deadlock,
        CrossesDevices,
        TooManyLinks,
        ArgumentListTooLong,
        Interrupted,
        Unsupported,
        UnexpectedEof,
        OutOfMemory,
        Other,
    ]
};

impl ReplayError<via::Io> for std::io::Error {
    fn failure_record(&self) -> ErrorRecord {
        // `io::Error` hides its inner error from `source()`: look inside it too.
        let mut record = ErrorRecord::from_error(self);
        if record.retry_after.is_none() {
            record.retry_after = crate::failure::RetryAfter::find(self);
        }
        record
    }

    fn replay_data(&self) -> Result<Value, String> {
        Ok(json!({ "ioKind": format!("{:?}", self.kind()) }))
    }

    fn rebuild(failure: StepFailure, data: &Value) -> Result<Self, String> {
        let name = data
            .get("ioKind")
            .and_then(Value::as_str)
            .unwrap_or("Other");
        let kind = IO_KINDS
            .iter()
            .copied()
            .find(|kind| format!("{kind:?}") == name)
            .unwrap_or(std::io::ErrorKind::Other);
        Ok(std::io::Error::new(kind, failure))
    }
}

/// The JSON stored for a step's final error: its record (fitted to the limits) with the
/// [`REPLAY_KEY`] that rebuilds it. `Err` says why it cannot be stored.
pub(crate) fn final_error_json(record: &ErrorRecord, data: Value) -> Result<Value, String> {
    let mut stored = record.to_json();
    if let Value::Object(object) = &mut stored {
        object.insert(REPLAY_KEY.to_owned(), data);
    }
    crate::limits::check_json(crate::limits::Field::Error, &stored)
        .map_err(|error| format!("it cannot be stored: {error}"))?;
    Ok(stored)
}

/// The final error stored with an attempt, rebuilt as `E`: `None` when the attempt's error is
/// not a final one (it was retried, or written before errors were replayed).
pub(crate) fn rebuild_final<E: ReplayError<Via>, Via>(
    stored: &Value,
) -> Option<(ErrorRecord, Result<E, String>)> {
    let data = stored.get(REPLAY_KEY)?;
    let record = ErrorRecord::from_json(stored);
    let failure = StepFailure::new(record.clone());
    Some((record, E::rebuild(failure, data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize, thiserror::Error)]
    enum Payment {
        #[error("card declined: {0}")]
        Declined(String),
        #[error("try later")]
        Busy { seconds: u32 },
    }

    fn round_trip<E: ReplayError<V>, V>(error: &E) -> E {
        let record = error.failure_record().with_kind("step");
        let data = error.replay_data().unwrap();
        let stored = final_error_json(&record, data).unwrap();
        let (back, rebuilt) = rebuild_final::<E, V>(&stored).unwrap();
        assert_eq!(back, record);
        rebuilt.unwrap()
    }

    #[test]
    fn serde_errors_come_back_equal() {
        for error in [
            Payment::Declined("no funds".into()),
            Payment::Busy { seconds: 3 },
        ] {
            assert_eq!(round_trip(&error), error);
        }
    }

    #[test]
    fn boxed_and_workflow_errors_keep_message_sources_and_retryability() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let error = WorkflowError::from(Payment::Declined("x".into())).non_retryable();
        let back = round_trip(&error);
        assert_eq!(back.record(), error.record());
        assert!(back.downcast_ref::<StepFailure>().is_some());

        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(WrapIo(io));
        let back = round_trip(&boxed);
        assert_eq!(
            ErrorRecord::from_error(&*back),
            ErrorRecord::from_error(&*boxed)
        );
        assert_eq!(ErrorRecord::from_error(&*back).sources, ["gone"]);
    }

    #[cfg(feature = "anyhow")]
    #[test]
    fn anyhow_errors_keep_message_and_sources() {
        let error = anyhow::Error::new(WrapIo(std::io::Error::other("inner"))).context("outer");
        let back = round_trip(&error);
        assert_eq!(back.to_string(), "outer");
        let chain: Vec<String> = back.chain().map(ToString::to_string).collect();
        assert_eq!(chain, ["outer", "wrapped", "inner"]);
    }

    #[test]
    fn io_errors_keep_their_kind() {
        let error = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        let back = round_trip(&error);
        assert_eq!(back.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(back.to_string(), "slow");
    }

    #[test]
    fn a_timeout_is_a_step_failure_in_every_type_with_room_for_one() {
        let record = ErrorRecord::new("step slow timed out after 1s").with_kind(TIMEOUT_KIND);
        let error: WorkflowError = timeout_error(&record).unwrap();
        assert!(error.downcast_ref::<StepFailure>().unwrap().is_timeout());
        let error: std::io::Error = timeout_error(&record).unwrap();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        let error: Box<dyn std::error::Error + Send + Sync> = timeout_error(&record).unwrap();
        assert!(error.downcast_ref::<StepFailure>().unwrap().is_timeout());
        assert!(timeout_error::<Payment, _>(&record).is_none());
    }

    #[test]
    fn a_retried_attempt_is_not_final() {
        let stored = ErrorRecord::new("flaky").to_json();
        assert!(rebuild_final::<WorkflowError, _>(&stored).is_none());
    }

    #[test]
    fn a_changed_error_type_is_an_error_not_a_panic() {
        let stored = final_error_json(&ErrorRecord::new("x"), json!({})).unwrap();
        let (_, rebuilt) = rebuild_final::<Payment, _>(&stored).unwrap();
        assert!(rebuilt.unwrap_err().contains("no value"));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct WrapIo(#[source] std::io::Error);
}
