//! Metrics of workers, clients and the backlog, and (feature `prometheus`) a Prometheus
//! endpoint.
//!
//! Workers and clients record their figures through the [`metrics`](https://docs.rs/metrics)
//! facade, always: without an installed recorder that costs next to nothing and keeps
//! nothing. The table of every metric, its labels and its meaning is in
//! [`tasks_runtime::metrics`] (re-exported here).
//!
#![cfg_attr(
    all(feature = "prometheus", feature = "dashboard"),
    doc = "With the `prometheus` feature, [`Prometheus::install`] installs a Prometheus recorder
for the process, and [`Prometheus::router`] serves it at `GET /metrics` (mount it in your axum
app, or serve it on its own port). The dashboard serves it too, behind its own credentials, when
given one ([`Dashboard::metrics`](crate::dashboard::Dashboard::metrics))."
)]
#![cfg_attr(
    not(all(feature = "prometheus", feature = "dashboard")),
    doc = "With the `prometheus` feature, `Prometheus::install` installs a Prometheus recorder
for the process, and `Prometheus::router` serves it at `GET /metrics` (mount it in your axum
app, or serve it on its own port). The dashboard (feature `dashboard`) serves it too, behind
its own credentials, when given one (`Dashboard::metrics`)."
)]
//!
//! ```no_run
//! # #[cfg(feature = "prometheus")]
//! # async fn demo(store: tasks::SharedStore) -> Result<(), Box<dyn std::error::Error>> {
//! let prometheus = tasks::metrics::Prometheus::install()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
//! tasks::metrics::axum::serve(listener, prometheus.router(store)).await?;
//! # Ok(())
//! # }
//! ```

pub use tasks_runtime::metrics::*;

#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
pub use prometheus::{InstallError, Prometheus};

/// The `axum` the endpoint is built with, for serving or mounting its router.
#[cfg(feature = "prometheus")]
pub use axum;
