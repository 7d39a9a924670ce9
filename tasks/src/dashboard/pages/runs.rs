//! The runs: the list, one run, and the operator's actions on it (cancel, pause, resume,
//! retry, fork, send an event).

use super::{forbidden, problem, respond, store_problem};
use crate::dashboard::security::token_matches;
use crate::dashboard::views::{Base, EventForm, RunFilters, RunPage};
use crate::dashboard::{AppState, views};
use crate::uuid::Uuid;
use crate::{ClientError, Cursor, ListRuns, Order, RunStatus, StoreError, WorkflowRun};
use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

/// The runs page; its query holds repeated `status` keys, so it is read as pairs.
pub(in crate::dashboard) async fn runs(
    base: Base,
    State(state): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let mut filters = RunFilters {
        statuses: Vec::new(),
        workflow: None,
        version: None,
        queue: None,
        key: None,
        search: None,
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
            "workflow" | "version" | "queue" | "key" | "q" if !value.trim().is_empty() => {
                let value = Some(value.trim().to_owned());
                match key.as_str() {
                    "workflow" => filters.workflow = value,
                    "version" => filters.version = value,
                    "queue" => filters.queue = value,
                    "key" => filters.key = value,
                    _ => filters.search = value,
                }
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
        version: filters.version.clone(),
        queue: filters.queue.clone(),
        concurrency_key: filters.key.clone(),
        search: filters.search.clone(),
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
pub(in crate::dashboard) struct RunQuery {
    id: String,
    done: Option<String>,
}

pub(in crate::dashboard) async fn run(
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
pub(in crate::dashboard) struct ActionForm {
    csrf: String,
    id: Uuid,
    action: String,
}

/// `cancel`, `pause`, `resume` or `retry` from a run's page; back to the page when done.
pub(in crate::dashboard) async fn act(
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
pub(in crate::dashboard) struct ForkForm {
    csrf: String,
    id: Uuid,
    step: String,
}

/// "Fork from this step" on a finished run's page: on to the new run's page.
pub(in crate::dashboard) async fn fork(
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
pub(in crate::dashboard) struct EventFormData {
    csrf: String,
    id: Uuid,
    topic: String,
    payload: String,
}

/// Sends an event from a run's page; a refusal shows the page again with the reason and
/// every violation, and nothing is stored.
pub(in crate::dashboard) async fn send_event(
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
