//! The web dashboard, an axum [`Router`] to mount in your own application (feature
//! `dashboard`).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = tasks::connect_from_env().await?;
//! use tasks::dashboard::axum;
//!
//! // `/tasks` and `/tasks/` both open the overview.
//! let app = axum::Router::new().nest_service("/tasks", tasks::dashboard::router(store)?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Pages: the overview (the landing page: runs by status, throughput and failures over the
//! last hour as a chart drawn on the server, the backlog of each queue, the live workers,
//! the schedules due next), the queues and the workers, the runs (filters by status,
//! workflow, version, queue and concurrency key, a search by run id or idempotency key,
//! cursor pagination, live refresh), a run (its fields and a step
//! timeline drawn to scale, with attempts, errors, outputs and sleeps; the cancel, pause,
//! resume and retry actions, "fork from this step" on each step of a finished run, and a
//! form sending an event its workflow declares, validated against the payload's schema),
//! the workflows linked into the binary (their JSON Schemas) and a start form per workflow,
//! validated against its schema, and (feature `schedules`) the cron schedules with their
//! pause, resume and delete actions.
//!
//! It is safe by default:
//!
//! - the command line's `dashboard` binds to loopback unless told otherwise;
//! - [`Dashboard::bearer_token`] and [`Dashboard::basic_auth`] require credentials on every
//!   request;
//! - actions are POSTs carrying a token that only the dashboard's own pages know, and a
//!   request another site's page sends (by `Origin` or `Sec-Fetch-Site`) is refused;
//! - every value is HTML-escaped (the templates are `maud`'s, which escape by default), and
//!   the pages forbid inline scripts and framing by other sites (`Content-Security-Policy`);
//! - the stylesheet and the script are compiled into the binary: no CDN, no Node build step,
//!   no network access.

mod pages;
mod security;
mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

use crate::{Client, RegistryError, SharedStore};

/// The `axum` this dashboard is built with, for mounting its [`Router`].
pub use axum;
pub use security::Credentials;

/// The dashboard of `store`, knowing every `#[workflow]` linked into this binary, without
/// authentication. Use [`Dashboard`] for credentials or another client.
///
/// Fails when the workflows linked into the binary do not form a valid registry (the same
/// check as [`Client::new`]).
pub fn router(store: impl Into<SharedStore>) -> Result<Router, RegistryError> {
    Ok(Dashboard::new(Client::new(store)?).router())
}

/// A dashboard's settings; [`Dashboard::router`] builds its [`Router`].
#[derive(Debug, Clone)]
pub struct Dashboard {
    client: Client,
    credentials: Option<Credentials>,
    refresh: Duration,
    #[cfg(feature = "prometheus")]
    metrics: Option<crate::metrics::Prometheus>,
}

impl Dashboard {
    /// A dashboard on `client`'s store and registry, without authentication, refreshing the
    /// live pages (the overview, the runs, the queues, the workers) every 2 s.
    pub fn new(client: Client) -> Self {
        Dashboard {
            client,
            credentials: None,
            refresh: Duration::from_secs(2),
            #[cfg(feature = "prometheus")]
            metrics: None,
        }
    }

    /// Requires `Authorization: Bearer TOKEN` on every request.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.credentials = Some(Credentials::Bearer(token.into()));
        self
    }

    /// Requires HTTP basic authentication with this user and password on every request
    /// (browsers ask for them).
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials::Basic {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Requires these credentials on every request (`None`: none).
    pub fn credentials(mut self, credentials: Option<Credentials>) -> Self {
        self.credentials = credentials;
        self
    }

    /// How often the live pages refresh their figures while live refresh is on (at least
    /// 250 ms).
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh = interval.max(Duration::from_millis(250));
        self
    }

    /// Serves `prometheus` at `/metrics`, for the client's store's namespace, behind the
    /// dashboard's credentials (Prometheus scrapes with a bearer token or basic auth too).
    #[cfg(feature = "prometheus")]
    pub fn metrics(mut self, prometheus: crate::metrics::Prometheus) -> Self {
        self.metrics = Some(prometheus);
        self
    }

    /// The router: pages at `/` (the overview), `/runs`, `/run`, `/queues`, `/workers`,
    /// `/workflows`, `/workflow` and `/schedules`, actions
    /// (POST) at `/action`, `/fork`, `/event`, `/start` and `/schedule`, assets under
    /// `/assets/`, and `/metrics` when given one. Every link starts at the mount point, so
    /// it can be mounted anywhere. Mount it with [`Router::nest_service`], which answers the
    /// mount point with and without a trailing slash (`/tasks` and `/tasks/`); with
    /// [`Router::nest`], axum answers 404 to `/tasks/`.
    pub fn router(self) -> Router {
        let state = Arc::new(State {
            client: self.client,
            csrf_token: security::new_token(),
            refresh: self.refresh,
        });
        let credentials = self.credentials.map(Arc::new);
        let router = Router::new();
        #[cfg(feature = "prometheus")]
        let router = match &self.metrics {
            Some(prometheus) => {
                router.route("/metrics", prometheus.route(state.client.store().clone()))
            }
            None => router,
        };
        #[cfg(feature = "schedules")]
        let router = router
            .route("/schedules", get(pages::schedules))
            .route("/schedule", post(pages::schedule_action));
        router
            .route("/", get(pages::overview))
            .route("/runs", get(pages::runs))
            .route("/queues", get(pages::queues))
            .route("/workers", get(pages::workers))
            .route("/run", get(pages::run))
            .route("/action", post(pages::act))
            .route("/workflows", get(pages::workflows))
            .route("/workflow", get(pages::workflow))
            .route("/start", post(pages::start))
            .route("/fork", post(pages::fork))
            .route("/event", post(pages::send_event))
            .route("/assets/{file}", get(pages::asset))
            .fallback(pages::not_found)
            .layer(axum::middleware::from_fn(security::guard_posts))
            .layer(axum::middleware::from_fn_with_state(
                credentials,
                security::authenticate,
            ))
            // Outermost, so that every response carries the headers, the 401 of a request
            // without credentials included.
            .layer(axum::middleware::from_fn(security::headers))
            .with_state(state)
    }
}

/// What every page handler shares.
struct State {
    client: Client,
    /// The token every form carries and every POST must echo.
    csrf_token: String,
    refresh: Duration,
}

type AppState = Arc<State>;

/// Serves `router` on `listener` until Ctrl-C, then finishes the requests in flight. Bind
/// the listener to loopback (`127.0.0.1:8080`) unless the dashboard must be reached from
/// other hosts, and then give it credentials; the command line's `dashboard` does both.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
