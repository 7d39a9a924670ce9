//! What the stores accept: the longest names and keys, the largest and deepest JSON
//! documents, the instants and durations that every store can hold.
//!
//! Every limit is checked before a database sees the value, in one place shared by every store:
//! [`store::check`](crate::store::check) names, for each operation of the contract, what it checks
//! (with [`CreateRun::check`](crate::CreateRun::check),
//! [`ListRuns::check`](crate::ListRuns::check), ... and the functions here), so that Postgres,
//! SQLite and any third store refuse exactly the same values, with the same typed [`LimitError`],
//! and store nothing when they do. A store reports it as
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
//!
//! This module is the table of limits; what a refusal says is in `error` ([`Field`],
//! [`LimitError`]), the checks of names, keys, instants and durations in `checks`, and the
//! walk that checks a JSON document in `json` ([`check_json`]).

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};

pub use crate::finite::{NonFiniteFloat, check_finite};

mod checks;
mod error;
mod json;

pub use checks::{
    add_duration, check_duration, check_lease, check_namespace, check_queue_name, check_state_key,
    check_step_name, check_text, check_time, check_topic, check_worker_id, is_valid_name,
};
pub use error::{Field, LimitError};
pub use json::{check_json, check_round_trip};

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
/// Most arms of one select (`WorkflowContext::select`), and most topics and most children
/// one select waits for in the store.
pub const MAX_SELECT_ARMS: usize = 64;
/// Longest worker id, in bytes.
pub const MAX_WORKER_ID_BYTES: usize = 255;
/// Longest concurrency key, in bytes.
pub const MAX_CONCURRENCY_KEY_BYTES: usize = 512;
/// Largest concurrency limit (runs of one key running at once).
pub const MAX_CONCURRENCY_LIMIT: u32 = i32::MAX as u32;
// Named queues.
/// Longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 255;
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
