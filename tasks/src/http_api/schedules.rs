//! Cron schedules of a namespace: list, create, pause, resume, delete (feature
//! `schedules`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::auth::Scope;
use super::problem::Problem;
use super::{Json, json_body};
use crate::chrono::{DateTime, Utc};
use crate::{CatchUp, NewSchedule, Schedule};

/// A cron schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleInfo {
    /// Its name, unique in the namespace.
    pub name: String,
    /// The workflow it starts.
    pub workflow: String,
    /// The workflow's version.
    pub version: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// The IANA timezone the expression is read in.
    pub timezone: String,
    /// The input of every run it starts.
    pub input: Value,
    /// What missed slots do: `latest`, `skip` or `all(N)`.
    pub catch_up: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Its next slot.
    pub next_slot: Option<DateTime<Utc>>,
}

impl From<Schedule> for ScheduleInfo {
    fn from(schedule: Schedule) -> Self {
        ScheduleInfo {
            name: schedule.name,
            workflow: schedule.workflow_name,
            version: schedule.version,
            cron: schedule.cron,
            timezone: schedule.timezone,
            input: schedule.input,
            catch_up: schedule.catch_up.to_string(),
            paused: schedule.paused,
            next_slot: schedule.next_slot,
        }
    }
}

/// A schedule to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    /// Its name, unique in the namespace.
    pub name: String,
    /// The workflow it starts.
    pub workflow: String,
    /// The workflow's version (default: the latest this binary knows).
    pub version: Option<String>,
    /// The cron expression (five or six fields).
    pub cron: String,
    /// The IANA timezone (default `UTC`).
    pub timezone: Option<String>,
    /// The input of every run, validated against the workflow's input schema.
    #[serde(default)]
    pub input: Value,
    /// What missed slots do: `latest` (the default), `skip` or `all(N)`.
    pub catch_up: Option<String>,
}

fn parse_catch_up(text: &str) -> Result<CatchUp, Problem> {
    let catch_up = match text.trim() {
        "latest" => CatchUp::Latest,
        "skip" => CatchUp::Skip,
        other => other
            .strip_prefix("all(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|max| max.trim().parse::<u32>().ok())
            .map(|max| CatchUp::All { max })
            .ok_or_else(|| {
                Problem::invalid_request(format!(
                    "catch_up {other:?} is not latest, skip or all(N)"
                ))
            })?,
    };
    catch_up.check()?;
    Ok(catch_up)
}

/// Every schedule of the namespace, by name.
#[utoipa::path(
    operation_id = "list_schedules",get, path = "/v1/namespaces/{namespace}/schedules", tag = "schedules",
    params(("namespace" = String, Path)),
    responses((status = 200, body = Vec<ScheduleInfo>), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn list(scope: Scope) -> Result<Json<Vec<ScheduleInfo>>, Problem> {
    let schedules = scope.client.list_schedules().await?;
    Ok(Json(
        StatusCode::OK,
        schedules.into_iter().map(Into::into).collect(),
    ))
}

/// Creates a schedule; the cron expression, the timezone and the input are checked first.
#[utoipa::path(
    operation_id = "create_schedule",post, path = "/v1/namespaces/{namespace}/schedules", tag = "schedules",
    params(("namespace" = String, Path)),
    request_body = CreateSchedule,
    responses((status = 201, body = ScheduleInfo), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn create(
    scope: Scope,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScheduleInfo>, Problem> {
    let client = scope.operator()?;
    let request: CreateSchedule = json_body(body)?;
    let catch_up = match request.catch_up.as_deref() {
        Some(text) => parse_catch_up(text)?,
        None => CatchUp::default(),
    };
    let schedule = NewSchedule {
        name: request.name,
        workflow_name: request.workflow,
        version: request.version,
        cron: request.cron,
        timezone: request.timezone.unwrap_or_else(|| "UTC".to_owned()),
        input: request.input,
        catch_up,
    };
    let created = client.create_schedule(schedule).await?;
    Ok(Json(StatusCode::CREATED, created.into()))
}

/// Pauses a schedule.
#[utoipa::path(
    operation_id = "pause_schedule",post, path = "/v1/namespaces/{namespace}/schedules/{name}/pause", tag = "schedules",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = ScheduleInfo), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn pause(scope: Scope) -> Result<Json<ScheduleInfo>, Problem> {
    let paused = scope
        .operator()?
        .pause_schedule(scope.param("name")?)
        .await?;
    Ok(Json(StatusCode::OK, paused.into()))
}

/// Resumes a schedule; the slots missed while it was paused go to its catch-up policy.
#[utoipa::path(
    operation_id = "resume_schedule",post, path = "/v1/namespaces/{namespace}/schedules/{name}/resume", tag = "schedules",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = ScheduleInfo), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn resume(scope: Scope) -> Result<Json<ScheduleInfo>, Problem> {
    let resumed = scope
        .operator()?
        .resume_schedule(scope.param("name")?)
        .await?;
    Ok(Json(StatusCode::OK, resumed.into()))
}

/// Deletes a schedule; the runs it started are kept.
#[utoipa::path(
    operation_id = "delete_schedule",delete, path = "/v1/namespaces/{namespace}/schedules/{name}", tag = "schedules",
    params(("namespace" = String, Path), ("name" = String, Path)),
    responses((status = 204, description = "Deleted"), (status = "4XX", body = super::problem::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub(super) async fn delete(scope: Scope) -> Result<Response, Problem> {
    scope
        .operator()?
        .delete_schedule(scope.param("name")?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
