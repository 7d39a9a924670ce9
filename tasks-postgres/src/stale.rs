//! Pooled connections the pool must not hand out, though nothing it can see says so: those
//! opened on a Tokio runtime that may have shut down, and those opened before the server
//! dropped connections (a restart, a crash).
//!
//! Both are told by a connection's age alone (the pool's measure, in its `before_acquire`
//! hook of [`PgStore::pool_options`](super::PgStore::pool_options)): a connection older
//! than a moment is closed once and replaced, without a round trip, so neither costs a
//! statement anything while nothing happened.
//!
//! **Runtimes.** A connection's socket belongs to the runtime that opened it. A store kept
//! past that runtime (`#[tokio::test]`s sharing a store, a runtime rebuilt after a panic)
//! would hand such a connection to the next one, and its next statement would fail with "A
//! Tokio 1.x context was found, but it is being shutdown". A ping does not reliably find
//! it: the ping can complete without waiting on the dead runtime's driver, and the next
//! statement then fails. So the pool hands a runtime no connection opened before that
//! runtime first used the pool. A program with one runtime never closes one. Runtimes are
//! told apart by [`tokio::runtime::Id`], which Tokio draws from a counter.
//!
//! **Breaks.** A server that restarts ends every session; each idle pooled connection
//! learns it only when its next statement fails ("terminating connection due to
//! administrator command"), one failed statement per connection. So the first statement
//! that finds its connection broken ([`note_broken_connection`], called where a driver
//! error becomes a store error) marks every connection opened before that moment stale.
//! The mark is process-wide, not per pool (the pool's hooks cannot tell which server a
//! connection talks to): a process whose stores talk to several servers replaces the idle
//! connections of the others once too, which costs each a reconnect and no statement. A
//! connection opened after the restart but before the mark is replaced too, once.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Id};

/// When each runtime that opened or acquired a pooled connection was first and last seen.
/// One entry per runtime, a few bytes each; a process builds few runtimes (a test binary
/// one per test).
static SEEN: LazyLock<Mutex<HashMap<Id, Sighting>>> = LazyLock::new(Mutex::default);

/// When a runtime first and last opened or acquired a pooled connection.
#[derive(Debug, Clone, Copy)]
struct Sighting {
    first: Instant,
    last: Instant,
}

/// When a statement last found its connection broken.
static LAST_BREAK: Mutex<Option<Instant>> = Mutex::new(None);

/// How far apart the pool's reading of a new connection's age and ours may be. The thread
/// can be preempted between the two: with 1 ms, a loaded two-core machine made a runtime's
/// own new connection look older than the runtime, and the pool replaced it at every
/// acquire. The slack never reaches back past another runtime's last use of the pool
/// before the connection was opened: a runtime that shut down just before the next one
/// opened its first connection (a store kept from one `#[tokio::test]` runtime to the
/// next) does not pass its connections to it.
const READING_SLACK: Duration = Duration::from_millis(50);

/// Breaks noted less than this apart are one event: the warning is logged once for it.
const ONE_EVENT: Duration = Duration::from_secs(5);

/// Whether the pool must close a connection of `age` instead of handing it out: it may
/// have been opened on another runtime than the current one, or before the server last
/// dropped connections.
pub(super) fn is_stale(age: Duration) -> bool {
    predates_current_runtime(age) || predates_last_break(age)
}

/// Notes that a statement found its connection broken (see the module's docs): every
/// pooled connection opened until now is stale. Logs a warning once per burst of breaks.
pub(super) fn note_broken_connection(error: &dyn std::fmt::Display) {
    let now = Instant::now();
    let previous = LAST_BREAK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .replace(now);
    if previous.is_none_or(|at| now.duration_since(at) > ONE_EVENT) {
        tracing::warn!(
            %error,
            "a database connection broke (a server restart?); the pool replaces every \
             connection opened before now"
        );
    }
}

/// Whether a connection of `age` was opened before the last noted break.
fn predates_last_break(age: Duration) -> bool {
    let last = *LAST_BREAK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    last.is_some_and(|at| age > at.elapsed())
}

/// How long ago the current runtime was first seen (now, when this is the first time);
/// `None` outside a runtime.
fn since_first_seen() -> Option<Duration> {
    let id = Handle::try_current().ok()?.id();
    let now = Instant::now();
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let sighting = seen.entry(id).or_insert(Sighting {
        first: now,
        last: now,
    });
    sighting.last = now;
    Some(now.duration_since(sighting.first))
}

/// Notes that the current runtime opened a connection `age` ago (the pool's own measure,
/// which [`predates_current_runtime`] compares with later): the runtime was there by then.
/// [`READING_SLACK`] earlier, so that the two readings of the clock (the pool's `age`,
/// then ours) never make the connection look older than its runtime; but not before
/// another runtime last used the pool before the connection was opened, whose connections
/// are not this runtime's.
pub(super) fn opened_connection(age: Duration) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    let id = handle.id();
    let now = Instant::now();
    let created = now.checked_sub(age).unwrap_or(now);
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let others_before = seen
        .iter()
        .filter(|(other, sighting)| **other != id && sighting.last < created)
        .map(|(_, sighting)| sighting.last)
        .max();
    let mut opened = created.checked_sub(READING_SLACK).unwrap_or(created);
    if let Some(last) = others_before {
        opened = opened.max(last);
    }
    let sighting = seen.entry(id).or_insert(Sighting {
        first: opened,
        last: now,
    });
    sighting.first = sighting.first.min(opened);
    sighting.last = now;
}

/// Whether a pooled connection of `age` may have been opened on another runtime than the
/// current one: it is older than the current runtime's first sighting. (A connection that
/// another runtime opened after this one appeared is not caught; while that runtime runs,
/// the connection works.)
fn predates_current_runtime(age: Duration) -> bool {
    since_first_seen().is_some_and(|since| age > since)
}
