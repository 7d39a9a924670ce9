//! Events sent to runs (by run id, or by workflow and the idempotency key a run was
//! started with, starting that run if need be), and the state runs publish: read it, and
//! wait for a newer version.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::auth::Scope;
use super::problem::Problem;
use super::types::{
    Event, Run, SendEventBody, SignalWithStartBody, Signalled, State as StateValue, StateWaitQuery,
};
use super::{ApiState, Json, json_body, query};
use crate::{EventTarget, IdempotencyScope, StoreError, WaitError};

/// Sends an event to a run; the payload is validated against the schema of the topic's
/// payload, which the run's workflow declares, before anything is stored.
#[utoipa::path(
    operation_id = "send_event",
    post,
    path = "/v1/namespaces/{namespace}/runs/{id}/events",
    tag = "events",
    params(("namespace" = String, Path), ("id" = String, Path, description = "The run's id")),
    request_body = SendEventBody,
    responses(
        (status = 201, description = "Stored (or, for a repeated deduplication key, the first event: `duplicate` is true)", body = Event),
        (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn send_to_run(
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Event>, Problem> {
    scope.operator()?;
    let id = scope.run_id()?;
    send(&scope, EventTarget::Run(id), body).await
}

/// Sends an event to the run of `workflow` started with idempotency key `key` (for a caller
/// that knows a business id, not a run id).
#[utoipa::path(
    operation_id = "send_event_by_key",
    post,
    path = "/v1/namespaces/{namespace}/workflows/{workflow}/keys/{key}/events",
    tag = "events",
    params(
        ("namespace" = String, Path),
        ("workflow" = String, Path, description = "The workflow's name"),
        ("key" = String, Path, description = "The idempotency key the run was started with"),
    ),
    request_body = SendEventBody,
    responses(
        (status = 201, body = Event),
        (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn send_by_key(
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Event>, Problem> {
    scope.operator()?;
    let target = EventTarget::Key {
        workflow_name: scope.param("workflow")?.to_owned(),
        idempotency_key: scope.param("key")?.to_owned(),
    };
    send(&scope, target, body).await
}

/// Sends an event to the run of `workflow` started with idempotency key `key`, starting
/// that run first (with `start`, and the key) when no run holds the key, in one
/// transaction: concurrent requests for one key start one run, which receives every one of
/// their events. The start's input and the payload are validated before anything is
/// stored. 201 when the request started the run, 200 when a run held the key; 409 when that
/// run has finished and still holds its key (nothing is stored).
#[utoipa::path(
    operation_id = "signal_with_start",
    post,
    path = "/v1/namespaces/{namespace}/workflows/{workflow}/keys/{key}/signal-with-start",
    tag = "events",
    params(
        ("namespace" = String, Path),
        ("workflow" = String, Path, description = "The workflow's name"),
        ("key" = String, Path, description = "The idempotency key that names the run"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context of a started run"),
        ("tracestate" = Option<String>, Header, description = "W3C trace state, with `traceparent`"),
    ),
    request_body = SignalWithStartBody,
    responses(
        (status = 201, description = "The run was started with the event", body = Signalled),
        (status = 200, description = "A run held the key: the event went to it", body = Signalled),
        (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn signal_with_start(
    scope: Scope,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let client = scope.operator()?;
    let workflow = scope.param("workflow")?;
    let key = scope.param("key")?;
    let request: SignalWithStartBody = json_body(body)?;
    let start = request.start.unwrap_or_default();
    if start
        .idempotency_key
        .as_deref()
        .is_some_and(|given| given != key)
    {
        return Err(Problem::invalid_request(
            "the start's idempotency_key differs from the key in the path",
        ));
    }
    let mut start =
        super::runs::start_builder(client, workflow, start, &headers).idempotency_key(key);
    if request.while_active {
        start = start.idempotency_scope(IdempotencyScope::WhileActive);
    }
    let mut signal = start.with_event_by_topic(&request.topic, request.payload);
    if let Some(dedup_key) = request.dedup_key {
        signal = signal.dedup_key(dedup_key);
    }
    let signalled = signal.await?;
    let status = if signalled.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = Signalled {
        created: signalled.created,
        run: Run::from(signalled.run),
        event: signalled.event.into(),
    };
    Ok(Json(status, body).into_response())
}

async fn send(
    scope: &Scope,
    target: EventTarget,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Event>, Problem> {
    let request: SendEventBody = json_body(body)?;
    let mut send = scope
        .client
        .send_event_by_topic(target, &request.topic, request.payload);
    if let Some(key) = request.dedup_key {
        send = send.dedup_key(key);
    }
    Ok(Json(StatusCode::CREATED, send.await?.into()))
}

/// The latest value of every key the run published.
#[utoipa::path(
    operation_id = "list_state",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}/state",
    tag = "state",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses(
        (status = 200, body = Vec<StateValue>),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn list_state(scope: Scope) -> Result<Json<Vec<StateValue>>, Problem> {
    let id = scope.run_id()?;
    let states = scope.client.list_state(id).await?;
    Ok(Json(
        StatusCode::OK,
        states.into_iter().map(Into::into).collect(),
    ))
}

/// The latest value the run published under `key` (404 when it published none yet).
#[utoipa::path(
    operation_id = "get_state",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}/state/{key}",
    tag = "state",
    params(("namespace" = String, Path), ("id" = String, Path), ("key" = String, Path)),
    responses(
        (status = 200, body = StateValue),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn get_state(scope: Scope) -> Result<Json<StateValue>, Problem> {
    let id = scope.run_id()?;
    let key = scope.param("key")?;
    match scope.client.get_state_json(id, key).await? {
        Some(state) => Ok(Json(StatusCode::OK, state.into())),
        None => Err(Problem::not_found(format_args!(
            "state {key:?} of run {id}"
        ))),
    }
}

/// Waits until the run publishes a version of `key` greater than `after` (a long poll
/// woken by the store's notifications) and answers with it; `204` when `timeout` passed
/// first, `409` when the run finished without publishing one.
#[utoipa::path(
    operation_id = "wait_for_state",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}/state/{key}/wait",
    tag = "state",
    params(("namespace" = String, Path), ("id" = String, Path), ("key" = String, Path), StateWaitQuery),
    responses(
        (status = 200, description = "A version newer than `after`", body = StateValue),
        (status = 204, description = "The timeout passed first: ask again"),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run finished without a newer version", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn wait_state(
    State(state): State<Arc<ApiState>>,
    scope: Scope,
    params: Result<Query<StateWaitQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let id = scope.run_id()?;
    let key = scope.param("key")?;
    let params = query(params)?;
    let timeout = state.wait_timeout(params.timeout);
    let waited = scope
        .client
        .wait_for_state_json(id, key, params.after.unwrap_or(0), timeout)
        .await;
    match waited {
        Ok(value) => Ok(Json(StatusCode::OK, StateValue::from(value)).into_response()),
        Err(WaitError::Timeout { .. }) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(WaitError::Store(StoreError::RunNotFound { .. })) => {
            Err(Problem::not_found(format_args!("run {id}")))
        }
        Err(error) => Err(error.into()),
    }
}
