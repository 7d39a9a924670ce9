//! Errors as RFC 9457 problem details (`application/problem+json`): one stable `type` URI
//! per kind of error, its status code, and for a value that breaks a JSON Schema every
//! violation with its JSON Pointer.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::{ClientError, StoreError, Violation, WaitError};

/// The media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// What went wrong, as a kind: each has a stable `type` URI (`urn:tasks:problem:<slug>`)
/// and one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 401: no token, or not one of the API's.
    Unauthorized,
    /// 403: the token may read this namespace but not operate on it.
    Forbidden,
    /// 404: no such run, workflow, schedule, step or state key in a namespace the token may
    /// reach. A namespace the token may not reach answers exactly this, too.
    NotFound,
    /// 400: the request is malformed: a body that is not JSON or not the expected shape, a
    /// query parameter that does not parse, a cursor that is not one.
    InvalidRequest,
    /// 422: the input does not match the workflow's JSON Schema (every violation in
    /// `errors`); nothing was stored.
    InvalidInput,
    /// 422: the event payload does not match the payload's JSON Schema (every violation in
    /// `errors`), or the workflow declares no such topic; nothing was stored.
    InvalidEvent,
    /// 422: a value past the store's limits (a name or key too long, a payload too large or
    /// too deep, an instant out of range); nothing was stored.
    LimitExceeded,
    /// 409: the run's (or schedule's) state refuses the operation: resuming a completed run,
    /// sending to a finished one, creating a schedule whose name is taken, waiting for state
    /// of a run that finished without publishing it.
    Conflict,
    /// 405: the path exists, not with this method.
    MethodNotAllowed,
    /// 413: the request body is larger than the API accepts.
    PayloadTooLarge,
    /// 501: the store does not implement this capability.
    Unsupported,
    /// 503: the store failed or could not be reached; the request may be retried.
    StoreUnavailable,
}

impl ProblemKind {
    /// Every kind, for the documentation and the OpenAPI document.
    pub const ALL: [ProblemKind; 12] = [
        ProblemKind::Unauthorized,
        ProblemKind::Forbidden,
        ProblemKind::NotFound,
        ProblemKind::InvalidRequest,
        ProblemKind::InvalidInput,
        ProblemKind::InvalidEvent,
        ProblemKind::LimitExceeded,
        ProblemKind::Conflict,
        ProblemKind::MethodNotAllowed,
        ProblemKind::PayloadTooLarge,
        ProblemKind::Unsupported,
        ProblemKind::StoreUnavailable,
    ];

    /// The stable `type` URI.
    pub const fn type_uri(self) -> &'static str {
        match self {
            ProblemKind::Unauthorized => "urn:tasks:problem:unauthorized",
            ProblemKind::Forbidden => "urn:tasks:problem:forbidden",
            ProblemKind::NotFound => "urn:tasks:problem:not-found",
            ProblemKind::InvalidRequest => "urn:tasks:problem:invalid-request",
            ProblemKind::InvalidInput => "urn:tasks:problem:invalid-input",
            ProblemKind::InvalidEvent => "urn:tasks:problem:invalid-event",
            ProblemKind::LimitExceeded => "urn:tasks:problem:limit-exceeded",
            ProblemKind::Conflict => "urn:tasks:problem:conflict",
            ProblemKind::MethodNotAllowed => "urn:tasks:problem:method-not-allowed",
            ProblemKind::PayloadTooLarge => "urn:tasks:problem:payload-too-large",
            ProblemKind::Unsupported => "urn:tasks:problem:unsupported",
            ProblemKind::StoreUnavailable => "urn:tasks:problem:store-unavailable",
        }
    }

    /// The status code.
    pub const fn status(self) -> StatusCode {
        match self {
            ProblemKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ProblemKind::Forbidden => StatusCode::FORBIDDEN,
            ProblemKind::NotFound => StatusCode::NOT_FOUND,
            ProblemKind::InvalidRequest => StatusCode::BAD_REQUEST,
            ProblemKind::InvalidInput | ProblemKind::InvalidEvent | ProblemKind::LimitExceeded => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ProblemKind::Conflict => StatusCode::CONFLICT,
            ProblemKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProblemKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
            ProblemKind::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The short, fixed summary (`title`).
    pub const fn title(self) -> &'static str {
        match self {
            ProblemKind::Unauthorized => "Authentication required",
            ProblemKind::Forbidden => "The token may not operate on this namespace",
            ProblemKind::NotFound => "Not found",
            ProblemKind::InvalidRequest => "Malformed request",
            ProblemKind::InvalidInput => "The input does not match the workflow's schema",
            ProblemKind::InvalidEvent => "The event is not one the run accepts",
            ProblemKind::LimitExceeded => "A value exceeds the store's limits",
            ProblemKind::Conflict => "The current state refuses the operation",
            ProblemKind::MethodNotAllowed => "The path does not take this method",
            ProblemKind::PayloadTooLarge => "The request body is too large",
            ProblemKind::Unsupported => "The store does not support this",
            ProblemKind::StoreUnavailable => "The store failed",
        }
    }
}

/// One violation of a JSON Schema: where (a JSON Pointer into the value sent; `""` is the
/// whole value) and what.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProblemViolation {
    /// JSON Pointer to the offending value inside the input or payload.
    pub pointer: String,
    /// What is wrong with it.
    pub detail: String,
}

/// An RFC 9457 problem document, the body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    /// The kind of error: a stable URI (`urn:tasks:problem:not-found`, ...).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// A fixed summary of the kind.
    pub title: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// What happened in this case.
    pub detail: String,
    /// Every schema violation, for `invalid-input` and `invalid-event`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProblemViolation>,
}

impl Problem {
    /// A problem of `kind` saying `detail`.
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Problem {
            kind: kind.type_uri(),
            title: kind.title(),
            status: kind.status().as_u16(),
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    fn with_violations(mut self, violations: &[Violation]) -> Self {
        self.errors = violations
            .iter()
            .map(|violation| ProblemViolation {
                pointer: violation.path.clone(),
                detail: violation.message.clone(),
            })
            .collect();
        self
    }

    /// The 404 of anything the token may not see, or that does not exist.
    pub(super) fn not_found(what: impl std::fmt::Display) -> Self {
        Problem::new(ProblemKind::NotFound, format!("{what} does not exist"))
    }

    pub(super) fn invalid_request(detail: impl Into<String>) -> Self {
        Problem::new(ProblemKind::InvalidRequest, detail)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tasks\""),
            );
        }
        response
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        let kind = match &error {
            StoreError::RunNotFound { .. }
            | StoreError::StepNotFound { .. }
            | StoreError::RunKeyNotFound { .. }
            | StoreError::UnknownStep { .. }
            | StoreError::ScheduleNotFound { .. }
            | StoreError::QueueNotFound { .. } => ProblemKind::NotFound,
            StoreError::WrongState { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::ScheduleExists { .. } => ProblemKind::Conflict,
            StoreError::InvalidCursor { .. }
            | StoreError::InvalidArgument(_)
            | StoreError::NotTerminal { .. } => ProblemKind::InvalidRequest,
            StoreError::Limit(_) => ProblemKind::LimitExceeded,
            StoreError::Unsupported { .. } => ProblemKind::Unsupported,
            _ => ProblemKind::StoreUnavailable,
        };
        if kind == ProblemKind::StoreUnavailable {
            // The cause stays in the server's log: a caller learns nothing of the database.
            tracing::warn!(%error, "the HTTP API's store call failed");
            return Problem::new(kind, "the store failed; try again later");
        }
        Problem::new(kind, error.to_string())
    }
}

impl From<ClientError> for Problem {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::UnknownWorkflow { .. } => {
                Problem::new(ProblemKind::NotFound, error.to_string())
            }
            ClientError::InvalidInput(invalid) => {
                Problem::new(ProblemKind::InvalidInput, invalid.to_string())
                    .with_violations(&invalid.violations)
            }
            ClientError::InvalidEvent { ref violations, .. } => {
                let violations = violations.clone();
                Problem::new(ProblemKind::InvalidEvent, error.to_string())
                    .with_violations(&violations)
            }
            ClientError::UndeclaredEvent { .. } => {
                Problem::new(ProblemKind::InvalidEvent, error.to_string())
            }
            ClientError::Limit(limit) => {
                Problem::new(ProblemKind::LimitExceeded, limit.to_string())
            }
            ClientError::Json(_) | ClientError::ConcurrencyKey(_) => {
                Problem::new(ProblemKind::InvalidInput, error.to_string())
            }
            #[cfg(feature = "schedules")]
            ClientError::InvalidSchedule(_) => {
                Problem::new(ProblemKind::InvalidRequest, error.to_string())
            }
            ClientError::Store(store) => Problem::from(store),
            other => {
                tracing::warn!(error = %other, "the HTTP API's client call failed");
                Problem::new(ProblemKind::StoreUnavailable, other.to_string())
            }
        }
    }
}

impl From<WaitError> for Problem {
    fn from(error: WaitError) -> Self {
        match error {
            WaitError::NotFound { run_id } => Problem::not_found(format_args!("run {run_id}")),
            WaitError::Finished { .. } => Problem::new(ProblemKind::Conflict, error.to_string()),
            WaitError::Limit(limit) => Problem::new(ProblemKind::LimitExceeded, limit.to_string()),
            WaitError::Store(store) => Problem::from(store),
            other => Problem::new(ProblemKind::InvalidRequest, other.to_string()),
        }
    }
}

impl From<crate::LimitError> for Problem {
    fn from(error: crate::LimitError) -> Self {
        Problem::new(ProblemKind::LimitExceeded, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_type_and_an_error_status() {
        let mut types: Vec<_> = ProblemKind::ALL
            .iter()
            .map(|kind| kind.type_uri())
            .collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), ProblemKind::ALL.len());
        for kind in ProblemKind::ALL {
            assert!(kind.status().is_client_error() || kind.status().is_server_error());
        }
    }

    #[test]
    fn violations_keep_their_pointers() {
        let problem = Problem::from(ClientError::InvalidInput(crate::InvalidInput {
            workflow: "w".into(),
            violations: vec![Violation {
                path: "/quantity".into(),
                message: "11 is greater than the maximum of 10".into(),
            }],
        }));
        let json = serde_json::to_value(&problem).unwrap();
        assert_eq!(json["type"], "urn:tasks:problem:invalid-input");
        assert_eq!(json["status"], 422);
        assert_eq!(json["errors"][0]["pointer"], "/quantity");
    }
}
