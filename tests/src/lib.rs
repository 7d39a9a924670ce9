//! The integration tests of `tasks`: their helper processes (`src/bin`) and Postgres
//! clusters of their own ([`cluster`]).
//!
//! Store factories, unique namespaces and polling are the `tasks-test-support` crate's,
//! shared with the conformance suite, the benchmark and the testing kit; the names the
//! tests use most are re-exported here. The store conformance suite itself is the
//! `tasks-conformance` crate.

#![warn(missing_docs)]

pub mod cluster;

pub use tasks_test_support::postgres::{
    DEFAULT_DATABASE_URL, PGBOUNCER_POOL_SIZE, TEST_POOL_SIZE, connect_options, connect_pool,
    database_url, pgbouncer_store, store as pg_store,
};
pub use tasks_test_support::{sqlite, unique_namespace};
