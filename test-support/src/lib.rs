//! Test support for `tasks` and its stores, shared by the integration tests, the store
//! conformance suite, the benchmark and the testing kit.
//!
//! # Map
//!
//! - Names no other test uses: [`unique_namespace`], [`unique_name`].
//! - Waiting for something that happens in the background: [`wait::poll`] (a probe that
//!   may fail, with a typed time-out) and [`wait::eventually`] (a yes-or-no condition).
//! - A fresh store of each backend, migrated, on a namespace of its own, one cargo feature
//!   each so that a crate takes only the drivers it tests:
//!   - `postgres`: [`postgres::store`] on `DATABASE_URL` (default
//!     [`postgres::DEFAULT_DATABASE_URL`]), with the pool helpers the tests use for raw SQL;
//!   - `sqlite`: [`sqlite::store`] on a new temporary database file;
//!   - `memory`: [`memory::store`].
//!
//! - A PgBouncer of a test's own in front of the test server: [`pgbouncer::PgBouncer`]
//!   (started as a process; no cargo feature).
//!
//! A factory panics with instructions when its database cannot be reached: it is meant for
//! tests, where a panic is the failure report.
//!
//! ```
//! # async fn demo() {
//! use std::time::Duration;
//! use tasks_test_support::{unique_namespace, wait};
//!
//! let namespace = unique_namespace("orders");
//! assert!(namespace.starts_with("orders-"));
//! let mut polls = 0;
//! assert!(wait::eventually(Duration::from_secs(5), async || { polls += 1; polls > 2 }).await);
//! # }
//! ```

#![warn(missing_docs)]

use uuid::Uuid;

pub mod pgbouncer;
pub mod wait;

#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// A namespace no other test uses: `prefix`, a dash and a random UUID.
pub fn unique_namespace(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4())
}

/// A name (of a workflow, a step, a schedule, a queue...) no other test uses: `prefix`, a
/// dash and a random UUID.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4())
}
