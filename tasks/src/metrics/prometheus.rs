//! The Prometheus recorder of the process and its endpoint.

use std::sync::Mutex;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

use super::{CLAIM_DURATION, DURATION_BUCKETS, STEP_DURATION, describe, refresh_backlog};
use crate::SharedStore;

/// The recorder this module installed, shared by every [`Prometheus::install`] after the
/// first.
static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// The process's Prometheus recorder: renders every `tasks` metric (and whatever else the
/// application records through the `metrics` facade) in Prometheus's text format.
#[derive(Clone)]
pub struct Prometheus {
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus").finish_non_exhaustive()
    }
}

/// Why [`Prometheus::install`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The process already has a `metrics` recorder that is not this module's (a `metrics`
    /// recorder is global, and set once). Record into it instead: `tasks`'s figures already
    /// go there.
    #[error("another `metrics` recorder is installed in this process; tasks's metrics go to it")]
    OtherRecorder,
    /// The exporter refused its settings.
    #[error("the Prometheus exporter refused its settings: {0}")]
    Build(#[from] BuildError),
}

impl Prometheus {
    /// Installs a Prometheus recorder as the process's `metrics` recorder, with buckets for
    /// the duration histograms ([`DURATION_BUCKETS`]) and every `tasks` metric described.
    /// Installing again returns the same recorder.
    pub fn install() -> Result<Prometheus, InstallError> {
        let mut installed = INSTALLED
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(handle) = installed.as_ref() {
            return Ok(Prometheus {
                handle: handle.clone(),
            });
        }
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(STEP_DURATION.to_owned()),
                DURATION_BUCKETS,
            )?
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(CLAIM_DURATION.to_owned()),
                DURATION_BUCKETS,
            )?
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).map_err(|_| InstallError::OtherRecorder)?;
        describe();
        *installed = Some(handle.clone());
        Ok(Prometheus { handle })
    }

    /// Every metric in Prometheus's text format, with the backlog of `store`'s namespace
    /// read from the store first. A store that cannot be read leaves the backlog at its last
    /// values (and logs why); the rest is rendered anyway.
    pub async fn render(&self, store: &SharedStore) -> String {
        if let Err(error) = refresh_backlog(store.contract()).await {
            tracing::warn!(%error, "could not count the backlog for the metrics");
        }
        self.handle.run_upkeep();
        self.handle.render()
    }

    /// `GET /metrics` for `store`'s namespace, as a route to add to any router:
    /// `Router::new().route("/metrics", prometheus.route(store))`.
    pub fn route<S>(&self, store: impl Into<SharedStore>) -> MethodRouter<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        get(scrape).with_state((self.clone(), store.into()))
    }

    /// A router that serves [`Prometheus::route`] at `/metrics`.
    pub fn router(&self, store: impl Into<SharedStore>) -> Router {
        Router::new().route("/metrics", self.route(store))
    }
}

async fn scrape(State((prometheus, store)): State<(Prometheus, SharedStore)>) -> Response {
    let body = prometheus.render(&store).await;
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
