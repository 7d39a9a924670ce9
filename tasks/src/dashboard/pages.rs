//! The dashboard's handlers: each reads the store through the client and renders a view.
//! One module per page (`overview` with the queues and workers, `runs`, `workflows`,
//! `schedules`); here, the responses they share and the assets.

use super::views;
use super::views::Base;
use crate::StoreError;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::Markup;

mod overview;
mod runs;
#[cfg(feature = "schedules")]
mod schedules;
mod workflows;

pub(super) use overview::{overview, queues, workers};
pub(super) use runs::{act, fork, run, runs, send_event};
#[cfg(feature = "schedules")]
pub(super) use schedules::{schedule_action, schedules};
pub(super) use workflows::{start, workflow, workflows};

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

fn forbidden(base: &Base) -> Response {
    problem(
        base,
        StatusCode::FORBIDDEN,
        "Refused",
        "The form's token is missing or stale: reload the page and try again.",
    )
}
