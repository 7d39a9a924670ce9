//! Connections a store's pool opened on a Tokio runtime that may have shut down.
//!
//! A connection's socket belongs to the runtime that opened it. A store kept past that
//! runtime (`#[tokio::test]`s sharing a store, a runtime rebuilt after a panic) would hand
//! such a connection to the next one, and its next statement would fail with "A Tokio 1.x
//! context was found, but it is being shutdown". A ping does not reliably find it: the ping
//! can complete without waiting on the dead runtime's driver, and the next statement then
//! fails. So the pool (through [`PgStore::pool_options`](super::PgStore::pool_options))
//! hands a runtime no connection opened before that runtime first used the pool: each such
//! connection is closed once and replaced. A program with one runtime never closes one.
//!
//! Runtimes are told apart by [`tokio::runtime::Id`], which Tokio draws from a counter.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Id};

/// When each runtime that opened or acquired a pooled connection was first seen. One entry
/// per runtime, a few bytes each; a process builds few runtimes (a test binary one per
/// test).
static FIRST_SEEN: LazyLock<Mutex<HashMap<Id, Instant>>> = LazyLock::new(Mutex::default);

/// How long ago the current runtime was first seen (now, when this is the first time);
/// `None` outside a runtime.
fn since_first_seen() -> Option<Duration> {
    let id = Handle::try_current().ok()?.id();
    let mut seen = FIRST_SEEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(seen.entry(id).or_insert_with(Instant::now).elapsed())
}

/// Notes that the current runtime opened a connection `age` ago (the pool's own measure,
/// which [`predates_current_runtime`] compares with later): the runtime was there by then.
/// A millisecond earlier, so that two readings of the clock never make the connection look
/// older than its runtime.
pub(super) fn opened_connection(age: Duration) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    let now = Instant::now();
    let opened = now
        .checked_sub(age + Duration::from_millis(1))
        .unwrap_or(now);
    let mut seen = FIRST_SEEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    seen.entry(handle.id())
        .and_modify(|first| *first = (*first).min(opened))
        .or_insert(opened);
}

/// Whether a pooled connection of `age` may have been opened on another runtime than the
/// current one: it is older than the current runtime's first sighting. (A connection that
/// another runtime opened after this one appeared is not caught; while that runtime runs,
/// the connection works.)
pub(super) fn predates_current_runtime(age: Duration) -> bool {
    since_first_seen().is_some_and(|since| age > since)
}
