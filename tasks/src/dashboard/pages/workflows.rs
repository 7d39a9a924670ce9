//! The registered workflows, one workflow, and starting a run of it.

use super::{forbidden, problem, respond, store_problem};
use crate::dashboard::security::token_matches;
use crate::dashboard::views::{Base, StartForm};
use crate::dashboard::{AppState, views};
use crate::{ClientError, StartOptions};
use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

pub(in crate::dashboard) async fn workflows(base: Base, State(state): State<AppState>) -> Response {
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
pub(in crate::dashboard) struct WorkflowQuery {
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

pub(in crate::dashboard) async fn workflow(
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
pub(in crate::dashboard) struct StartFormData {
    csrf: String,
    name: String,
    #[serde(default)]
    version: String,
    input: String,
    #[serde(default)]
    idempotency_key: String,
}

/// Starts a run from a workflow's form; a refusal shows the form again with the reason.
pub(in crate::dashboard) async fn start(
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
