//! Durable workflows for Rust, written as ordinary async functions and stored in Postgres.
//!
//! A `#[step]` is an async function whose output is stored once it completes. A
//! `#[workflow]` is an async function that calls steps; when its worker dies, another worker
//! replays it, and completed steps return their stored output instead of running again.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use tasks::prelude::*;
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
//! struct Order {
//!     id: u64,
//!     amount_cents: u64,
//! }
//!
//! #[step(retry(max_attempts = 5, initial_interval = "200ms"))]
//! async fn charge(order: &Order) -> Result<String, std::io::Error> {
//!     Ok(format!("ch_{}", order.id)) // a real side effect goes here
//! }
//!
//! /// Charges an order, then waits before closing it.
//! #[workflow(name = "checkout", version = "2")]
//! async fn checkout(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
//!     let charge_id = charge(&order).await?; // runs once, memoized
//!     ctx.sleep("cool-off", Duration::from_secs(3600)).await?; // durable timer
//!     Ok(charge_id)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let store = tasks::postgres::PgStore::connect("postgres://postgres@127.0.0.1/app").await?;
//!     store.migrate().await?;
//!
//!     // Executes every #[workflow] linked into this binary.
//!     let worker = Worker::builder(store.clone()).concurrency(16).build()?.spawn();
//!
//!     let client = Client::new(store)?;
//!     let run = checkout::start(&client, Order { id: 7, amount_cents: 1999 }).await?;
//!     println!("charged: {}", run.result().await?);
//!     worker.shutdown().await;
//!     Ok(())
//! }
//! ```
//!
//! - [`workflow`] and [`step`] are the attributes; misuse is a compile error on your tokens.
//! - [`Worker`] claims and executes runs; [`Client`] starts, awaits, lists and operates on
//!   them; [`postgres::PgStore`] is the production [`Store`].
//! - Step calls resolve their names in call order (`name`, `name:1`, ...). Outside a running
//!   workflow a step is a plain function call.
//! - The [`guide`] is the manual: the path of a run through the crates, and one chapter
//!   for each part (semantics, versioning, limits, testing, the command line, the
//!   dashboard, metrics and traces, features, stores).
#![warn(missing_docs)]

pub use tasks_macros::{step, workflow};
pub use tasks_runtime::*;

/// The names most programs need: `use tasks::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Client, RunHandle, RunStatus, StartOptions, Worker, WorkflowContext, WorkflowError, step,
        workflow,
    };
}

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "dashboard")]
pub mod dashboard;
#[cfg(any(feature = "cli", feature = "dashboard"))]
mod display;
pub mod guide;
pub mod metrics;

#[doc(hidden)]
pub mod __private {
    pub use tasks_runtime::private::*;
}
