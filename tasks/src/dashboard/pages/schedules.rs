//! The schedules page and its actions.

use super::{forbidden, problem, respond, store_problem};
use crate::dashboard::security::token_matches;
use crate::dashboard::views::Base;
use crate::dashboard::{AppState, views};
use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

#[derive(Deserialize)]
pub(in crate::dashboard) struct SchedulesQuery {
    done: Option<String>,
}

/// The schedules of the client's namespace.
pub(in crate::dashboard) async fn schedules(
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

#[derive(Deserialize)]
pub(in crate::dashboard) struct ScheduleForm {
    csrf: String,
    name: String,
    action: String,
}

/// `pause`, `resume` or `delete` a schedule; back to the schedules when done.
pub(in crate::dashboard) async fn schedule_action(
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
