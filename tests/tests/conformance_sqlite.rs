//! The store conformance suite against the SQLite store: the same cases as
//! `conformance_postgres.rs`, with a fresh database file per store.

tasks_conformance::conformance_suite!(tasks_tests::sqlite::store);
