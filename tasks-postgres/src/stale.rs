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

/// When each runtime that opened or acquired a pooled connection was first seen. One entry
/// per runtime, a few bytes each; a process builds few runtimes (a test binary one per
/// test).
static FIRST_SEEN: LazyLock<Mutex<HashMap<Id, Instant>>> = LazyLock::new(Mutex::default);

/// When a statement last found its connection broken.
static LAST_BREAK: Mutex<Option<Instant>> = Mutex::new(None);

/// How far apart the pool's reading of a new connection's age and ours may be. The thread
/// can be preempted between the two: with 1 ms, a loaded two-core machine made a runtime's
/// own new connection look older than the runtime, and the pool replaced it at every
/// acquire. A connection of a runtime that shut down this little before the next one first
/// opened a connection would still be handed out: runtimes of one process do not come and
/// go that fast.
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
    let mut seen = FIRST_SEEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(seen.entry(id).or_insert_with(Instant::now).elapsed())
}

/// Notes that the current runtime opened a connection `age` ago (the pool's own measure,
/// which [`predates_current_runtime`] compares with later): the runtime was there by then.
/// [`READING_SLACK`] earlier, so that the two readings of the clock (the pool's `age`,
/// then ours) never make the connection look older than its runtime.
pub(super) fn opened_connection(age: Duration) {
    let Ok(handle) = Handle::try_current() else {
        return;
    };
    let now = Instant::now();
    let opened = now.checked_sub(age + READING_SLACK).unwrap_or(now);
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
fn predates_current_runtime(age: Duration) -> bool {
    since_first_seen().is_some_and(|since| age > since)
}
