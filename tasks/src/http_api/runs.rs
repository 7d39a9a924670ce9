//! Runs: start one by workflow name, read it and its steps, wait for its result, list
//! runs, and operate on one (cancel, pause, resume, retry, fork).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::auth::Scope;
use super::problem::Problem;
use super::types::{ForkBody, ListQuery, Run, RunPage, StartRun, StepPage, WaitQuery};
use super::{ApiState, Json, json_body, query};
use crate::{Cursor, ListRuns, ListStepAttempts, Order, RunStatus};

/// Starts a run of `workflow` with JSON input, validated against the workflow's input
/// schema before anything is stored. 201 when it started a run; 200, with that run, when a
/// run holds the idempotency key already (nothing new was started). A W3C `traceparent`
/// header (and its `tracestate`) is the trace every execution of the run joins; an invalid
/// one is ignored, as the W3C Trace Context recommendation says.
#[utoipa::path(
    operation_id = "start_run",
    post,
    path = "/v1/namespaces/{namespace}/workflows/{workflow}/runs",
    tag = "runs",
    params(
        ("namespace" = String, Path, description = "The namespace"),
        ("workflow" = String, Path, description = "The workflow's name"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context: the trace the run's executions join"),
        ("tracestate" = Option<String>, Header, description = "W3C trace state, with `traceparent`"),
    ),
    request_body = StartRun,
    responses(
        (status = 201, description = "The run was started", body = Run),
        (status = 200, description = "A run held the idempotency key already: that run (nothing new was started)", body = Run),
        (status = "4XX", description = "See the problem's type", body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn start(
    scope: Scope,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let client = scope.operator()?;
    let workflow = scope.param("workflow")?;
    let request: StartRun = json_body(body)?;
    let start = start_builder(client, workflow, request, &headers);
    // The run as the start left it (a fast worker may have finished it since: a read would
    // answer that, and a caller could not tell what its start did).
    let started = start.outcome().await?;
    let status = if started.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Json(status, Run::from(started.run)).into_response())
}

/// The start a [`StartRun`] request asks for, with the trace context of its headers.
pub(super) fn start_builder<'c>(
    client: &'c crate::Client,
    workflow: &str,
    request: StartRun,
    headers: &HeaderMap,
) -> crate::StartBuilder<'c, serde_json::Value> {
    let mut start = client.start_by_name(workflow, request.input);
    if let Some(trace) = trace_context(headers) {
        start = start.trace_context(trace);
    }
    if let Some(version) = request.version {
        start = start.version(version);
    }
    if let Some(key) = request.idempotency_key {
        start = start.idempotency_key(key);
    }
    if let Some(at) = request.start_at {
        start = start.start_at(at);
    }
    if let Some(delay) = request.delay_ms {
        start = start.delay(Duration::from_millis(delay));
    }
    if let Some(deadline) = request.deadline {
        start = start.deadline(deadline);
    }
    if let Some(queue) = request.queue {
        start = start.queue(queue);
    }
    if let Some(concurrency) = request.concurrency {
        start = start.concurrency_key(concurrency.key, concurrency.limit);
    }
    if let Some(priority) = request.priority {
        start = start.priority(priority);
    }
    if let Some(context) = request.context {
        start = start.context(context);
    }
    start
}

/// The W3C trace context of a request's `traceparent` and `tracestate` headers, when its
/// `traceparent` is valid.
fn trace_context(headers: &HeaderMap) -> Option<crate::TraceContext> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
    };
    let traceparent = text("traceparent")?;
    crate::TraceContext::new(traceparent, text("tracestate").map(str::to_owned)).ok()
}

async fn read_run(scope: &Scope, id: crate::uuid::Uuid) -> Result<Run, Problem> {
    scope
        .client
        .get_run(id)
        .await?
        .map(Run::from)
        .ok_or_else(|| Problem::not_found(format_args!("run {id}")))
}

/// A run: its status, input, output or error.
#[utoipa::path(
    operation_id = "get_run",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}",
    tag = "runs",
    params(("namespace" = String, Path), ("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, body = Run),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn get(scope: Scope) -> Result<Json<Run>, Problem> {
    let id = scope.run_id()?;
    Ok(Json(StatusCode::OK, read_run(&scope, id).await?))
}

/// A run's step attempts, oldest first.
#[utoipa::path(
    operation_id = "list_steps",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}/steps",
    tag = "runs",
    params(
        ("namespace" = String, Path), ("id" = String, Path),
        ("after" = Option<String>, Query, description = "The page after this cursor"),
        ("limit" = Option<u32>, Query, description = "Attempts per page (default 100)"),
    ),
    responses(
        (status = 200, body = StepPage),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn steps(
    scope: Scope,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<StepPage>, Problem> {
    let id = scope.run_id()?;
    let params = query(params)?;
    read_run(&scope, id).await?;
    let page = scope
        .client
        .list_steps(ListStepAttempts {
            limit: params.limit,
            after: cursor(params.after.as_deref())?,
            ..ListStepAttempts::new(id)
        })
        .await?;
    Ok(Json(
        StatusCode::OK,
        StepPage {
            steps: page.data.into_iter().map(Into::into).collect(),
            next: page.next.map(|cursor| cursor.to_string()),
        },
    ))
}

/// Waits until the run finishes (a long poll woken by the store's notifications), then
/// answers with it; after `timeout` seconds, answers with the run as it is (`finished`
/// false): ask again.
#[utoipa::path(
    operation_id = "wait_for_result",
    get,
    path = "/v1/namespaces/{namespace}/runs/{id}/result",
    tag = "runs",
    params(("namespace" = String, Path), ("id" = String, Path), WaitQuery),
    responses(
        (status = 200, description = "The run: finished, or as it was when the timeout passed", body = Run),
        (status = 404, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn result(
    State(state): State<Arc<ApiState>>,
    scope: Scope,
    params: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<Run>, Problem> {
    let id = scope.run_id()?;
    let timeout = state.wait_timeout(query(params)?.timeout);
    let waited = scope
        .client
        .wait_for_run(id, timeout, |run| run.status.is_terminal())
        .await;
    match waited {
        Ok(run) => Ok(Json(StatusCode::OK, run.into())),
        Err(crate::WaitError::Timeout { .. }) => {
            Ok(Json(StatusCode::OK, read_run(&scope, id).await?))
        }
        Err(error) => Err(error.into()),
    }
}

/// A page of runs, newest first unless `order=asc`, with the client's filters.
#[utoipa::path(
    operation_id = "list_runs",
    get,
    path = "/v1/namespaces/{namespace}/runs",
    tag = "runs",
    params(("namespace" = String, Path), ListQuery),
    responses(
        (status = 200, body = RunPage),
        (status = 400, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn list(
    scope: Scope,
    params: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<RunPage>, Problem> {
    let params = query(params)?;
    let statuses = match params.status.as_deref() {
        None | Some("") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|status| {
                status
                    .trim()
                    .parse::<RunStatus>()
                    .map_err(|_| Problem::invalid_request(format!("unknown status {status:?}")))
            })
            .collect::<Result<_, _>>()?,
    };
    let order = match params.order.as_deref() {
        None | Some("desc") => Order::Desc,
        Some("asc") => Order::Asc,
        Some(other) => {
            return Err(Problem::invalid_request(format!(
                "order is asc or desc, not {other:?}"
            )));
        }
    };
    let page = scope
        .client
        .list_runs(ListRuns {
            statuses,
            workflow_name: params.workflow,
            parent_run_id: params.parent,
            version: params.version,
            queue: params.queue,
            concurrency_key: params.concurrency_key,
            search: params.q,
            order,
            limit: params.limit,
            after: cursor(params.after.as_deref())?,
            before: cursor(params.before.as_deref())?,
            ..Default::default()
        })
        .await?;
    Ok(Json(
        StatusCode::OK,
        RunPage {
            runs: page.data.into_iter().map(Into::into).collect(),
            next: page.next.map(|cursor| cursor.to_string()),
            prev: page.prev.map(|cursor| cursor.to_string()),
        },
    ))
}

fn cursor(text: Option<&str>) -> Result<Option<Cursor>, Problem> {
    text.map(|text| {
        text.parse()
            .map_err(|_| Problem::invalid_request(format!("{text:?} is not a cursor")))
    })
    .transpose()
}

/// An operation on a run.
#[derive(Debug, Clone, Copy)]
pub(super) enum Operation {
    Cancel,
    Pause,
    Resume,
    Retry,
}

/// Cancels a run for good.
#[utoipa::path(
    operation_id = "cancel_run",post, path = "/v1/namespaces/{namespace}/runs/{id}/cancel", tag = "operations",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = Run), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn cancel(scope: Scope) -> Result<Json<Run>, Problem> {
    operate(scope, Operation::Cancel).await
}

/// Pauses a run: no worker claims it until it is resumed.
#[utoipa::path(
    operation_id = "pause_run",post, path = "/v1/namespaces/{namespace}/runs/{id}/pause", tag = "operations",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = Run), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn pause(scope: Scope) -> Result<Json<Run>, Problem> {
    operate(scope, Operation::Pause).await
}

/// Resumes a paused run.
#[utoipa::path(
    operation_id = "resume_run",post, path = "/v1/namespaces/{namespace}/runs/{id}/resume", tag = "operations",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = Run), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn resume(scope: Scope) -> Result<Json<Run>, Problem> {
    operate(scope, Operation::Resume).await
}

/// Runs a failed or canceled run again from its first unfinished step.
#[utoipa::path(
    operation_id = "retry_run",post, path = "/v1/namespaces/{namespace}/runs/{id}/retry", tag = "operations",
    params(("namespace" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = Run), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn retry(scope: Scope) -> Result<Json<Run>, Problem> {
    operate(scope, Operation::Retry).await
}

async fn operate(scope: Scope, operation: Operation) -> Result<Json<Run>, Problem> {
    let client = scope.operator()?;
    let id = scope.run_id()?;
    let run = match operation {
        Operation::Cancel => client.cancel(id).await,
        Operation::Pause => client.pause(id).await,
        Operation::Resume => client.resume(id).await,
        Operation::Retry => client.retry(id).await,
    }?;
    Ok(Json(StatusCode::OK, run.into()))
}

/// Starts a new run from a finished one: the steps before `from_step` replay their
/// outputs, the rest run again.
#[utoipa::path(
    operation_id = "fork_run",post, path = "/v1/namespaces/{namespace}/runs/{id}/fork", tag = "operations",
    params(("namespace" = String, Path), ("id" = String, Path)),
    request_body = ForkBody,
    responses((status = 201, description = "The new run", body = Run), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn fork(
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Run>, Problem> {
    let client = scope.operator()?;
    let id = scope.run_id()?;
    let ForkBody { from_step } = json_body(body)?;
    let run = client.fork(id, &from_step).await?;
    Ok(Json(StatusCode::CREATED, run.into()))
}
