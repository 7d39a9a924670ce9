//! A JSON API over HTTP, for callers in other languages (feature `http-api`): an axum
//! [`Router`] to mount in your own application, or served by the command line's `api`.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use tasks::http_api::{HttpApi, Token};
//!
//! let client = tasks::Client::new(tasks::connect_from_env().await?)?;
//! let api = HttpApi::new(client)
//!     .token(Token::new(std::env::var("BILLING_TOKEN")?)?.namespace("billing").operate())
//!     .token(Token::new(std::env::var("AUDIT_TOKEN")?)?.any_namespace())
//!     .router();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
//! tasks::http_api::serve(listener, api).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every route but `/v1/workflows` and `/openapi.json` is under
//! `/v1/namespaces/{namespace}/`: one API serves every namespace of the store, and each
//! token reaches the namespaces it was given. The guide's `http_api` chapter shows each
//! endpoint with `curl`; `GET /openapi.json` is the OpenAPI 3.1 document, with a typed
//! start path for each workflow.
//!
//! | method and path | what it does |
//! | --- | --- |
//! | `POST /v1/namespaces/{ns}/workflows/{workflow}/runs` | starts a run (input validated first) |
//! | `GET /v1/namespaces/{ns}/runs` | a page of runs (`status`, `workflow`, `version`, `queue`, `concurrency_key`, `parent`, `q` (a run id or an idempotency key), `limit`, `after`, `before`, `order`) |
//! | `GET /v1/namespaces/{ns}/runs/{id}` | a run: status, input, output, error |
//! | `GET /v1/namespaces/{ns}/runs/{id}/steps` | its step attempts |
//! | `GET /v1/namespaces/{ns}/runs/{id}/result?timeout=30` | waits for it to finish (long poll) |
//! | `POST /v1/namespaces/{ns}/runs/{id}/events` | sends it an event (payload validated first) |
//! | `POST /v1/namespaces/{ns}/workflows/{workflow}/keys/{key}/events` | sends an event to the run started with that idempotency key |
//! | `POST /v1/namespaces/{ns}/workflows/{workflow}/keys/{key}/signal-with-start` | sends an event to the run of that key, starting it first if there is none, in one transaction (201 started, 200 existing) |
//! | `GET /v1/namespaces/{ns}/runs/{id}/state[/{key}]` | the state it published |
//! | `GET /v1/namespaces/{ns}/runs/{id}/state/{key}/wait?after=N&timeout=30` | waits for a newer version (long poll) |
//! | `POST /v1/namespaces/{ns}/runs/{id}/{cancel,pause,resume,retry,fork}` | operates on it |
//! | `GET`, `POST /v1/namespaces/{ns}/schedules`; `POST .../{name}/{pause,resume}`; `DELETE .../{name}` | cron schedules (feature `schedules`) |
//! | `GET /v1/workflows` | the workflows of the binary, with their schemas |
//! | `GET /openapi.json` | the OpenAPI 3.1 document |
//!
//! Safety:
//!
//! - every request needs `Authorization: Bearer TOKEN` with one of the API's [`Token`]s
//!   (401 otherwise), unless it was built with [`HttpApi::without_authentication`]; an
//!   API with neither answers 401 to everything. Authentication comes first: a path or a
//!   method the API does not have answers 401 too without a valid token (404 and 405
//!   only with one), so that a caller without a token learns nothing of the routes. Tokens are compared in constant time
//!   (`subtle`), every one of them, whichever matches;
//! - a token reaches its namespaces only, and a namespace it does not reach answers the
//!   same 404 as a run that does not exist; a read-only token gets 403 on every write;
//! - bodies are limited ([`HttpApi::body_limit`]), and inputs and payloads are checked
//!   against the store's limits and the JSON Schemas before anything is written;
//! - there are no cookies: nothing a browser sends on its own authenticates a request.
//!
//! Errors are RFC 9457 problem documents ([`Problem`], `application/problem+json`) with a
//! stable `type` per [`ProblemKind`].

mod auth;
mod events;
mod openapi;
mod problem;
mod runs;
#[cfg(feature = "schedules")]
mod schedules;
mod types;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use auth::{MIN_SECRET_CHARS, Rights, Token, TokenError};
/// The `axum` this API is built with, for mounting its [`Router`].
pub use axum;
pub use openapi::openapi;
pub use problem::{PROBLEM_JSON, Problem, ProblemKind, ProblemViolation};
#[cfg(feature = "schedules")]
pub use schedules::{CreateSchedule, ScheduleInfo};
pub use types::{
    ConcurrencyKey, Event, EventInfo, ForkBody, ListQuery, Run, RunPage, SendEventBody, StartRun,
    State, StateWaitQuery, Status, Step, StepPage, WaitQuery, WorkflowInfo,
};

use crate::{Client, Registry};

/// The largest body accepted by default: the store's largest payload, plus room for the
/// options around it.
pub const DEFAULT_BODY_LIMIT: usize = crate::limits::MAX_PAYLOAD_BYTES + 64 * 1024;

/// How long a long poll waits when the request names no timeout.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// An API's settings; [`HttpApi::router`] builds its [`Router`].
#[derive(Debug, Clone)]
pub struct HttpApi {
    client: Client,
    tokens: Vec<Token>,
    unauthenticated: bool,
    body_limit: usize,
    max_wait: Duration,
}

impl HttpApi {
    /// An API on `client`'s store (every namespace of it) and registry, accepting no
    /// request until given a [`Token`] (or told [`HttpApi::without_authentication`]).
    pub fn new(client: Client) -> Self {
        HttpApi {
            client,
            tokens: Vec::new(),
            unauthenticated: false,
            body_limit: DEFAULT_BODY_LIMIT,
            max_wait: Duration::from_secs(60),
        }
    }

    /// Accepts this token.
    pub fn token(mut self, token: Token) -> Self {
        self.tokens.push(token);
        self
    }

    /// Accepts these tokens.
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = Token>) -> Self {
        self.tokens.extend(tokens);
        self
    }

    /// Accepts every request, in every namespace, with every right: only behind something
    /// else that authenticates (a proxy), or on loopback for development. Tokens given too
    /// are then not needed.
    pub fn without_authentication(mut self) -> Self {
        self.unauthenticated = true;
        self
    }

    /// The largest request body, in bytes (larger ones get 413); default
    /// [`DEFAULT_BODY_LIMIT`].
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The longest a long poll waits, whatever its `timeout` asks (default 60 s): keep it
    /// under the idle timeouts of the proxies in front.
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = max;
        self
    }

    /// The OpenAPI 3.1 document of this API, with the client's workflows.
    pub fn openapi(&self) -> serde_json::Value {
        openapi(self.client.registry())
    }

    /// The router. Mount it where you like ([`Router::merge`], or
    /// [`Router::nest_service`] under a prefix); its paths are listed in the module docs.
    pub fn router(self) -> Router {
        let registry = Arc::new(copy_registry(self.client.registry()));
        let openapi = Arc::new(openapi(&registry));
        let state = Arc::new(ApiState {
            client: self.client,
            registry,
            tokens: self.tokens.into(),
            unauthenticated: self.unauthenticated,
            max_wait: self.max_wait,
            openapi,
        });
        let ns = "/v1/namespaces/{namespace}";
        let router = Router::new();
        #[cfg(feature = "schedules")]
        let router = router
            .route(
                &format!("{ns}/schedules"),
                get(schedules::list).post(schedules::create),
            )
            .route(
                &format!("{ns}/schedules/{{name}}"),
                axum::routing::delete(schedules::delete),
            )
            .route(
                &format!("{ns}/schedules/{{name}}/pause"),
                post(schedules::pause),
            )
            .route(
                &format!("{ns}/schedules/{{name}}/resume"),
                post(schedules::resume),
            );
        router
            .route("/openapi.json", get(openapi_document))
            .route("/v1/workflows", get(openapi::workflows))
            .route(
                &format!("{ns}/workflows/{{workflow}}/runs"),
                post(runs::start),
            )
            .route(
                &format!("{ns}/workflows/{{workflow}}/keys/{{key}}/events"),
                post(events::send_by_key),
            )
            .route(
                &format!("{ns}/workflows/{{workflow}}/keys/{{key}}/signal-with-start"),
                post(events::signal_with_start),
            )
            .route(&format!("{ns}/runs"), get(runs::list))
            .route(&format!("{ns}/runs/{{id}}"), get(runs::get))
            .route(&format!("{ns}/runs/{{id}}/steps"), get(runs::steps))
            .route(&format!("{ns}/runs/{{id}}/result"), get(runs::result))
            .route(
                &format!("{ns}/runs/{{id}}/events"),
                post(events::send_to_run),
            )
            .route(&format!("{ns}/runs/{{id}}/state"), get(events::list_state))
            .route(
                &format!("{ns}/runs/{{id}}/state/{{key}}"),
                get(events::get_state),
            )
            .route(
                &format!("{ns}/runs/{{id}}/state/{{key}}/wait"),
                get(events::wait_state),
            )
            .route(&format!("{ns}/runs/{{id}}/cancel"), post(runs::cancel))
            .route(&format!("{ns}/runs/{{id}}/pause"), post(runs::pause))
            .route(&format!("{ns}/runs/{{id}}/resume"), post(runs::resume))
            .route(&format!("{ns}/runs/{{id}}/retry"), post(runs::retry))
            .route(&format!("{ns}/runs/{{id}}/fork"), post(runs::fork))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(self.body_limit))
            .layer(axum::middleware::map_response(headers))
            .with_state(state)
    }
}

/// What every handler shares.
struct ApiState {
    client: Client,
    registry: Arc<Registry>,
    tokens: Arc<[Token]>,
    unauthenticated: bool,
    max_wait: Duration,
    openapi: Arc<serde_json::Value>,
}

impl ApiState {
    /// The wait a long poll asked for, in seconds, within the maximum.
    fn wait_timeout(&self, seconds: Option<u64>) -> Duration {
        seconds
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WAIT)
            .min(self.max_wait)
    }
}

/// A copy of `registry` for the API to share (a registry is not `Clone`).
fn copy_registry(registry: &Registry) -> Registry {
    let mut copy = Registry::new();
    for definition in registry.iter() {
        // The definitions come from a registry, so they cannot be duplicates.
        let _ = copy.add(definition);
    }
    copy
}

/// A JSON response with its status.
struct Json<T>(StatusCode, T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.1) {
            Ok(body) => (
                self.0,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(error) => Problem::new(
                ProblemKind::StoreUnavailable,
                format!("the response could not be encoded: {error}"),
            )
            .into_response(),
        }
    }
}

/// The request body as `T`; an empty body is `{}`.
fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, Problem> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(ProblemKind::PayloadTooLarge, rejection.body_text())
        } else {
            Problem::invalid_request(rejection.body_text())
        }
    })?;
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        &body
    };
    serde_json::from_slice(body).map_err(|error| {
        Problem::invalid_request(format!("the body is not the expected JSON: {error}"))
    })
}

/// The query string as `T`.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Problem> {
    query
        .map(|Query(query)| query)
        .map_err(|rejection| Problem::invalid_request(rejection.body_text()))
}

async fn openapi_document(
    _: auth::Authenticated,
    axum::extract::State(state): axum::extract::State<Arc<ApiState>>,
) -> Json<serde_json::Value> {
    Json(StatusCode::OK, (*state.openapi).clone())
}

/// A path the API does not have: 404, after the caller proved who it is (401 otherwise),
/// so that a caller without a token learns nothing of the routes.
async fn not_found(_: auth::Authenticated) -> Problem {
    Problem::not_found("this path")
}

/// A path the API has, with a method it does not take: 405, after the caller proved who it
/// is (401 otherwise).
async fn method_not_allowed(_: auth::Authenticated, method: axum::http::Method) -> Problem {
    Problem::new(
        ProblemKind::MethodNotAllowed,
        format!("this path does not take {method}"),
    )
}

/// Headers of every response: never cached, never sniffed.
async fn headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Serves `router` on `listener` until Ctrl-C, then finishes the requests in flight. Bind
/// to loopback unless the API must be reached from other hosts, and then give it tokens;
/// the command line's `api` does both.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
