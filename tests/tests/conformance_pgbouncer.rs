//! The store conformance suite against the Postgres store through PgBouncer in transaction
//! mode (`Pooling::Transaction`, two server connections shared by each store's pool).
//!
//! Needs a running Postgres (`DATABASE_URL`) and PgBouncer (Debian's `pgbouncer`;
//! `scripts/test.sh` installs it). Without PgBouncer the cases run directly, saying so, but
//! fail in CI.

tasks_conformance::conformance_suite!(tasks_tests::pgbouncer_store);
