//! The checks of names, keys, namespaces, instants and durations.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::error::{Field, LimitError};
use super::{
    EARLIEST, LATEST, MAX_DURATION, MAX_NAMESPACE_BYTES, MAX_QUEUE_NAME_BYTES, MAX_STEP_NAME_BYTES,
    MAX_TOPIC_BYTES, MAX_WORKER_ID_BYTES,
};

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
///
/// An empty topic is refused: a run parked in a select over several topics waits on the
/// empty topic ([`select::ANY_TOPIC`](crate::select::ANY_TOPIC)), which a send on any
/// topic matches.
pub fn check_topic(topic: &str) -> Result<(), LimitError> {
    if topic.is_empty() {
        return Err(LimitError::InvalidName {
            field: Field::Topic,
            value: String::new(),
            reason: "a topic is not empty".into(),
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_IDEMPOTENCY_KEY_BYTES;

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
