//! The store conformance suite against the Postgres store.
//!
//! Needs a running Postgres: `DATABASE_URL`, or `postgres://postgres@127.0.0.1:5432/test`.

tasks_conformance::conformance_suite!(tasks_tests::pg_store);
