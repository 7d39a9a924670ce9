//! The dashboard's handlers: each reads the store through the client and renders a view.

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::Markup;
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use super::security::token_matches;
use super::views::{self, Base, EventForm, RunFilters, RunPage, StartForm};
use crate::uuid::Uuid;
use crate::{
    ClientError, Cursor, ListRuns, Order, RunStatus, StartOptions, StoreError, WorkflowRun,
};

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");

/// A page with a status.
fn respond(base: &Base, status: StatusCode, title: &str, nav: &str, body: Markup) -> Response {
    (
        status,
        Html(views::page(base, title, nav, body).into_string()),
    )
        .into_response()
}

fn problem(base: &Base, status: StatusCode, heading: &str, text: &str) -> Response {
    respond(
        base,
        status,
        heading,
        "",
        views::message(base, heading, text),
    )
}

/// The page of a store error.
fn store_problem(base: &Base, error: &StoreError) -> Response {
    let status = match error {
        StoreError::RunNotFound { .. }
        | StoreError::StepNotFound { .. }
        | StoreError::UnknownStep { .. }
        | StoreError::RunKeyNotFound { .. }
        | StoreError::ScheduleNotFound { .. } => StatusCode::NOT_FOUND,
        StoreError::WrongState { .. }
        | StoreError::LeaseLost { .. }
        | StoreError::ScheduleExists { .. } => StatusCode::CONFLICT,
        StoreError::InvalidCursor { .. }
        | StoreError::NotTerminal { .. }
        | StoreError::InvalidArgument(_)
        | StoreError::Limit(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let heading = match error {
        StoreError::Corrupt { .. }
        | StoreError::CorruptRun { .. }
        | StoreError::CorruptStep { .. } => "A stored row does not decode",
        _ => "The store refused",
    };
    problem(base, status, heading, &error.to_string())
}

pub(super) async fn not_found(base: Base) -> Response {
    problem(
        &base,
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no such page.",
    )
}

pub(super) async fn asset(base: Base, Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        "dashboard.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return not_found(base).await,
    };
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

/// The runs page; its query holds repeated `status` keys, so it is read as pairs.
pub(super) async fn runs(
    base: Base,
    State(state): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let mut filters = RunFilters {
        statuses: Vec::new(),
        workflow: None,
        limit: 25,
        oldest_first: false,
    };
    let (mut after, mut before) = (None, None);
    for (key, value) in &pairs {
        let parsed = match key.as_str() {
            "status" => value
                .parse::<RunStatus>()
                .map(|status| filters.statuses.push(status))
                .map_err(|error| error.to_string()),
            "workflow" if !value.is_empty() => {
                filters.workflow = Some(value.clone());
                Ok(())
            }
            "limit" => value
                .parse::<u32>()
                .ok()
                .filter(|limit| (1..=500).contains(limit))
                .map(|limit| filters.limit = limit)
                .ok_or_else(|| format!("the page size {value:?} is not a number from 1 to 500")),
            "oldest" => {
                filters.oldest_first = value == "1";
                Ok(())
            }
            "after" | "before" => value
                .parse::<Cursor>()
                .map(|cursor| {
                    if key == "after" {
                        after = Some(cursor);
                    } else {
                        before = Some(cursor);
                    }
                })
                .map_err(|error| error.to_string()),
            _ => Ok(()),
        };
        if let Err(text) = parsed {
            return problem(&base, StatusCode::BAD_REQUEST, "Invalid filter", &text);
        }
    }
    let query = ListRuns {
        statuses: filters.statuses.clone(),
        workflow_name: filters.workflow.clone(),
        order: if filters.oldest_first {
            Order::Asc
        } else {
            Order::Desc
        },
        limit: Some(filters.limit),
        after,
        before,
        ..ListRuns::default()
    };
    let page = match state.client.list_runs(query).await {
        Ok(page) => page,
        Err(error) => return store_problem(&base, &error),
    };
    let mut workflows: Vec<String> = state
        .client
        .registry()
        .iter()
        .map(|definition| definition.name.to_owned())
        .collect();
    workflows.dedup();
    let body = views::runs(
        &base,
        &filters,
        &workflows,
        &page.data,
        page.next.map(|cursor| cursor.to_string()),
        page.prev.map(|cursor| cursor.to_string()),
        state.refresh.as_millis(),
    );
    respond(&base, StatusCode::OK, "Runs", "runs", body)
}

#[derive(Deserialize)]
pub(super) struct RunQuery {
    id: String,
    done: Option<String>,
}

pub(super) async fn run(
    base: Base,
    State(state): State<AppState>,
    Query(query): Query<RunQuery>,
) -> Response {
    let Ok(id) = query.id.parse::<Uuid>() else {
        return problem(
            &base,
            StatusCode::BAD_REQUEST,
            "Invalid run id",
            &format!("{:?} is not a run id", query.id),
        );
    };
    // Only the dashboard's own words are shown back.
    let done = match query.done.as_deref() {
        Some("canceled") => Some("Run canceled."),
        Some("paused") => Some("Run paused."),
        Some("resumed") => Some("Run resumed."),
        Some("started") => Some("Run started."),
        Some("retried") => Some("Run retried: it runs again from its first unfinished step."),
        Some("forked") => Some("Run forked: this new run replays the steps before the fork."),
        Some("event") => Some("Event sent."),
        _ => None,
    };
    run_page(
        &base,
        &state,
        id,
        done,
        EventForm::default(),
        StatusCode::OK,
    )
    .await
}

/// The events `run`'s workflow (its name and version) declares: topic and payload schema,
/// by topic.
fn declared_events(run: &WorkflowRun) -> Vec<(&'static str, Value)> {
    let mut events: Vec<_> =
        crate::__private::inventory::iter::<crate::__private::EventRegistration>
            .into_iter()
            .map(|registration| registration.0)
            .filter(|declared| {
                declared.workflow == run.workflow_name && declared.version == run.version.as_deref()
            })
            .collect();
    events.sort_by_key(|declared| declared.topic);
    events.dedup_by_key(|declared| declared.topic);
    events
        .into_iter()
        .map(|declared| (declared.topic, (declared.schema)()))
        .collect()
}

/// A run's page, with `event_form` shown again when it holds a refusal (and then no live
/// refresh: the page is the answer to a POST).
async fn run_page(
    base: &Base,
    state: &AppState,
    id: Uuid,
    done: Option<&'static str>,
    event_form: EventForm,
    status: StatusCode,
) -> Response {
    let run = match state.client.get_run(id).await {
        Ok(Some(run)) => run,
        Ok(None) => {
            return store_problem(base, &StoreError::RunNotFound { id });
        }
        Err(error) => return store_problem(base, &error),
    };
    // A step row that does not decode still leaves the run to show: the page names the row
    // where the timeline would be.
    let (steps, steps_unreadable) = match state.client.store().contract().step_history(id).await {
        Ok(steps) => (steps, None),
        Err(error @ (StoreError::CorruptStep { .. } | StoreError::CorruptRun { .. })) => {
            (Vec::new(), Some(error.to_string()))
        }
        Err(error) => return store_problem(base, &error),
    };
    let published = match state.client.store().contract().published_state() {
        Ok(states) => states.list_state(id).await,
        Err(unsupported) => Err(unsupported),
    };
    let published = match published {
        Ok(published) => published,
        Err(error) => return store_problem(base, &error),
    };
    let page = RunPage {
        csrf: &state.csrf_token,
        published,
        done,
        refresh_ms: if status == StatusCode::OK {
            state.refresh.as_millis()
        } else {
            0
        },
        events: declared_events(&run),
        event_form,
        steps_unreadable,
    };
    let body = views::run(base, &run, &steps, &page);
    respond(base, status, &format!("Run {id}"), "runs", body)
}

#[derive(Deserialize)]
pub(super) struct ActionForm {
    csrf: String,
    id: Uuid,
    action: String,
}

/// `cancel`, `pause`, `resume` or `retry` from a run's page; back to the page when done.
pub(super) async fn act(
    base: Base,
    State(state): State<AppState>,
    Form(form): Form<ActionForm>,
) -> Response {
    if !token_matches(&state, &form.csrf) {
        return forbidden(&base);
    }
    let client = &state.client;
    let (result, done) = match form.action.as_str() {
        "cancel" => (client.cancel(form.id).await, "canceled"),
        "pause" => (client.pause(form.id).await, "paused"),
        "resume" => (client.resume(form.id).await, "resumed"),
        "retry" => (client.retry(form.id).await, "retried"),
        _ => {
            return problem(
                &base,
                StatusCode::BAD_REQUEST,
                "Unknown action",
                "The action must be cancel, pause, resume or retry.",
            );
        }
    };
    match result {
        Ok(run) => {
            Redirect::to(&base.link(&format!("run?id={}&done={done}", run.id))).into_response()
        }
        Err(error) => store_problem(&base, &error),
    }
}

#[derive(Deserialize)]
pub(super) struct ForkForm {
    csrf: String,
    id: Uuid,
    step: String,
}

/// "Fork from this step" on a finished run's page: on to the new run's page.
pub(super) async fn fork(
    base: Base,
    State(state): State<AppState>,
    Form(form): Form<ForkForm>,
) -> Response {
    if !token_matches(&state, &form.csrf) {
        return forbidden(&base);
    }
    match state.client.fork(form.id, &form.step).await {
        Ok(run) => {
            Redirect::to(&base.link(&format!("run?id={}&done=forked", run.id))).into_response()
        }
        Err(error) => store_problem(&base, &error),
    }
}

#[derive(Deserialize)]
pub(super) struct EventFormData {
    csrf: String,
    id: Uuid,
    topic: String,
    payload: String,
}

/// Sends an event from a run's page; a refusal shows the page again with the reason and
/// every violation, and nothing is stored.
pub(super) async fn send_event(
    base: Base,
    State(state): State<AppState>,
    Form(data): Form<EventFormData>,
) -> Response {
    if !token_matches(&state, &data.csrf) {
        return forbidden(&base);
    }
    let sent = match serde_json::from_str(&data.payload) {
        Ok(payload) => {
            state
                .client
                .send_event_by_topic(data.id, &data.topic, payload)
                .await
        }
        Err(error) => Err(ClientError::Json(error)),
    };
    let mut form = EventForm {
        topic: data.topic.clone(),
        payload: data.payload.clone(),
        ..EventForm::default()
    };
    match sent {
        Ok(_) => {
            return Redirect::to(&base.link(&format!("run?id={}&done=event", data.id)))
                .into_response();
        }
        Err(ClientError::InvalidEvent {
            topic, violations, ..
        }) => {
            let count = violations.len();
            form.error = Some(format!(
                "The payload does not match the schema of the event {topic} ({count} violation{}). Nothing was stored.",
                if count == 1 { "" } else { "s" }
            ));
            form.violations = violations;
        }
        Err(ClientError::Json(error)) => {
            form.error = Some(format!(
                "The payload is not valid JSON: {error}. Nothing was stored."
            ));
        }
        Err(ClientError::Store(error)) => return store_problem(&base, &error),
        Err(error) => form.error = Some(format!("{error}. Nothing was stored.")),
    }
    run_page(
        &base,
        &state,
        data.id,
        None,
        form,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

#[cfg(feature = "schedules")]
#[derive(Deserialize)]
pub(super) struct SchedulesQuery {
    done: Option<String>,
}

/// The schedules of the client's namespace.
#[cfg(feature = "schedules")]
pub(super) async fn schedules(
    base: Base,
    State(state): State<AppState>,
    Query(query): Query<SchedulesQuery>,
) -> Response {
    let schedules = match state.client.list_schedules().await {
        Ok(schedules) => schedules,
        Err(error) => return store_problem(&base, &error),
    };
    // Only the dashboard's own words are shown back.
    let done = match query.done.as_deref() {
        Some("paused") => Some("Schedule paused."),
        Some("resumed") => Some("Schedule resumed: the slots it missed go to its catch-up policy."),
        Some("deleted") => Some("Schedule deleted; the runs it started are kept."),
        _ => None,
    };
    respond(
        &base,
        StatusCode::OK,
        "Schedules",
        "schedules",
        views::schedules(&base, &schedules, &state.csrf_token, done),
    )
}

#[cfg(feature = "schedules")]
#[derive(Deserialize)]
pub(super) struct ScheduleForm {
    csrf: String,
    name: String,
    action: String,
}

/// `pause`, `resume` or `delete` a schedule; back to the schedules when done.
#[cfg(feature = "schedules")]
pub(super) async fn schedule_action(
    base: Base,
    State(state): State<AppState>,
    Form(form): Form<ScheduleForm>,
) -> Response {
    if !token_matches(&state, &form.csrf) {
        return forbidden(&base);
    }
    let client = &state.client;
    let (result, done) = match form.action.as_str() {
        "pause" => (client.pause_schedule(&form.name).await.map(drop), "paused"),
        "resume" => (
            client.resume_schedule(&form.name).await.map(drop),
            "resumed",
        ),
        "delete" => (client.delete_schedule(&form.name).await, "deleted"),
        _ => {
            return problem(
                &base,
                StatusCode::BAD_REQUEST,
                "Unknown action",
                "The action must be pause, resume or delete.",
            );
        }
    };
    match result {
        Ok(()) => Redirect::to(&base.link(&format!("schedules?done={done}"))).into_response(),
        Err(error) => store_problem(&base, &error),
    }
}

fn forbidden(base: &Base) -> Response {
    problem(
        base,
        StatusCode::FORBIDDEN,
        "Refused",
        "The form's token is missing or stale: reload the page and try again.",
    )
}

pub(super) async fn workflows(base: Base, State(state): State<AppState>) -> Response {
    let definitions: Vec<_> = state.client.registry().iter().collect();
    respond(
        &base,
        StatusCode::OK,
        "Workflows",
        "workflows",
        views::workflows(&base, &definitions),
    )
}

#[derive(Deserialize)]
pub(super) struct WorkflowQuery {
    name: String,
    version: Option<String>,
}

fn definition_or_404(
    base: &Base,
    state: &AppState,
    name: &str,
    version: Option<&str>,
) -> Result<&'static crate::WorkflowDefinition, Box<Response>> {
    let registry = state.client.registry();
    let found = match version.filter(|version| !version.is_empty()) {
        Some(version) => registry.get(name, Some(version)),
        None => registry.latest(name),
    };
    found.ok_or_else(|| {
        Box::new(problem(
            base,
            StatusCode::NOT_FOUND,
            "Unknown workflow",
            &format!("No workflow {name:?} is linked into this binary."),
        ))
    })
}

pub(super) async fn workflow(
    base: Base,
    State(state): State<AppState>,
    Query(query): Query<WorkflowQuery>,
) -> Response {
    let definition = match definition_or_404(&base, &state, &query.name, query.version.as_deref()) {
        Ok(definition) => definition,
        Err(response) => return *response,
    };
    let form = StartForm {
        input: "{}".to_owned(),
        ..StartForm::default()
    };
    let body = views::workflow(&base, definition, &state.csrf_token, &form);
    respond(
        &base,
        StatusCode::OK,
        &definition.display_name(),
        "workflows",
        body,
    )
}

#[derive(Deserialize)]
pub(super) struct StartFormData {
    csrf: String,
    name: String,
    #[serde(default)]
    version: String,
    input: String,
    #[serde(default)]
    idempotency_key: String,
}

/// Starts a run from a workflow's form; a refusal shows the form again with the reason.
pub(super) async fn start(
    base: Base,
    State(state): State<AppState>,
    Form(data): Form<StartFormData>,
) -> Response {
    if !token_matches(&state, &data.csrf) {
        return forbidden(&base);
    }
    let version = Some(data.version.as_str()).filter(|version| !version.is_empty());
    let definition = match definition_or_404(&base, &state, &data.name, version) {
        Ok(definition) => definition,
        Err(response) => return *response,
    };
    let mut form = StartForm {
        input: data.input.clone(),
        idempotency_key: data.idempotency_key.clone(),
        ..StartForm::default()
    };
    let refuse = |form: &StartForm| {
        let body = views::workflow(&base, definition, &state.csrf_token, form);
        respond(
            &base,
            StatusCode::UNPROCESSABLE_ENTITY,
            &definition.display_name(),
            "workflows",
            body,
        )
    };
    let input: Value = match serde_json::from_str(&data.input) {
        Ok(input) => input,
        Err(error) => {
            form.error = Some(format!(
                "The input is not valid JSON: {error}. Nothing was stored."
            ));
            return refuse(&form);
        }
    };
    let mut options = StartOptions::new();
    if let Some(version) = definition.version {
        options = options.version(version);
    }
    if !data.idempotency_key.is_empty() {
        options = options.idempotency_key(&data.idempotency_key);
    }
    match state
        .client
        .start_by_name(definition.name, input)
        .options(options)
        .await
    {
        Ok(handle) => Redirect::to(&base.link(&format!("run?id={}&done=started", handle.id())))
            .into_response(),
        Err(ClientError::InvalidInput(invalid)) => {
            let count = invalid.violations.len();
            form.error = Some(format!(
                "The input does not match the schema of {} ({count} violation{}). Nothing was stored.",
                invalid.workflow,
                if count == 1 { "" } else { "s" }
            ));
            form.violations = invalid.violations;
            refuse(&form)
        }
        Err(ClientError::Store(error)) => store_problem(&base, &error),
        Err(error) => {
            form.error = Some(format!("{error}. Nothing was stored."));
            refuse(&form)
        }
    }
}
