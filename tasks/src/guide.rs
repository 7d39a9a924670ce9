//! The guide: what `tasks` promises and how to use each part of it, one chapter a module.
//! It holds no code.
//!
//! # The path of a run
//!
//! Each step of a run's life, and where it lives:
//!
//! | step | what happens | crate | where |
//! |---|---|---|---|
//! | macro | `#[workflow]` and `#[step]` turn async functions into a registered definition and memoized calls | `tasks-macros` | [`workflow`](crate::workflow), [`step`](crate::step) |
//! | registry | every `#[workflow]` linked into the binary is collected at start-up, by name and version | `tasks-runtime` | [`Registry`](crate::Registry) |
//! | client.start | the input is checked against its schema and the run is stored, pending | `tasks-runtime` | [`Client`](crate::Client), [`StartBuilder`](crate::StartBuilder) |
//! | store | every write is one fenced statement, decided by the contract's rules and rendered by a store | `tasks-core`, `tasks-postgres`, `tasks-sqlite` | [`store`](crate::store), [`postgres`](crate::postgres), [`sqlite`](crate::sqlite) |
//! | worker claim | a worker claims runs in batches (dead workers' runs first), holds and heartbeats a lease | `tasks-runtime` | [`Worker`](crate::Worker), [`LeaseStore::claim_runs`](crate::store::LeaseStore::claim_runs) |
//! | replay | the workflow runs from the top; completed steps return their stored output | `tasks-runtime` | [`WorkflowContext`](crate::WorkflowContext) |
//! | store | each finished step is recorded once, and the run completes, fails, sleeps or waits | `tasks-core`, a store | [`StepStore::record_step_attempt`](crate::store::StepStore::record_step_attempt) |
//!
//! The crates: `tasks` (this facade), `tasks-macros` (the attributes), `tasks-runtime` (the
//! engine: registry, client, worker, executor, replay, context), `tasks-core` (the records,
//! limits, failures and retry, the store contract and the rules every store executes; no
//! driver, no worker), `tasks-postgres` and `tasks-sqlite` (the stores: SQL and row
//! decoding), `tasks-migrations` (each dialect's schema migrations) and
//! `tasks-conformance` (the contract's specification by example).
//!
//! # Chapters
//!
//! - [`start`]: starting runs (typed, by name with JSON, with options) and sending events.
//! - [`semantics`]: what the engine promises: step names, replay, retries, recovery,
//!   events, state, children, selects, continue-as-new, flow control, schedules, retention.
//! - [`versioning`]: changing a workflow's code under runs in flight, and replay
//!   verification, the deploy gate that checks a new binary against their histories.
//! - [`errors`]: which call returns which error, and how the errors nest.
//! - [`limits`]: the values every store refuses, and the error it gives.
//! - [`testing`]: unit tests of workflows without a database server.
//! - [`cli`]: the operator command line compiled into your binary.
//! - [`dashboard`]: the web dashboard.
//! - [`http_api`]: the HTTP JSON API, for callers in other languages.
//! - [`observability`]: metrics and traces.
//! - [`features`]: the cargo features and what each one costs.
//! - [`stores`]: choosing Postgres or SQLite, and writing another store.
//! - [`operations`]: what an operator of Postgres sets and watches: one queue's backlog
//!   beside another queue, long-held snapshots.

#[doc = include_str!("guide/start.md")]
pub mod start {}

#[doc = include_str!("guide/semantics.md")]
pub mod semantics {}

#[doc = include_str!("guide/versioning.md")]
pub mod versioning {}

#[doc = include_str!("guide/errors.md")]
pub mod errors {}

#[doc = include_str!("guide/limits.md")]
pub mod limits {}

#[doc = include_str!("guide/testing.md")]
pub mod testing {}

#[doc = include_str!("guide/cli.md")]
pub mod cli {}

#[doc = include_str!("guide/dashboard.md")]
pub mod dashboard {}

#[doc = include_str!("guide/http_api.md")]
pub mod http_api {}

#[doc = include_str!("guide/observability.md")]
pub mod observability {}

#[doc = include_str!("guide/features.md")]
pub mod features {}

#[doc = include_str!("guide/stores.md")]
pub mod stores {}

#[doc = include_str!("guide/operations.md")]
pub mod operations {}
