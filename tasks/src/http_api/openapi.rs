//! The OpenAPI 3.1 document: derived by `utoipa` from the handlers' annotations and the
//! types they take and return, then given one typed start path per workflow of the
//! registry (its input schema in place of the free-form `input`) and one typed keyed-event
//! path (its declared topics and payload schemas), so that a generated client is typed per
//! workflow. Also the workflows endpoint, which serves the same schemas.

use axum::http::StatusCode;
use serde_json::{Value, json};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::auth::Authenticated;
use super::problem::{Problem, ProblemViolation};
use super::types::{
    ConcurrencyKey, Event, EventInfo, ForkBody, Run, RunPage, SendEventBody, SignalWithStartBody,
    Signalled, StartRun, State, Status, Step, StepPage, WorkflowInfo,
};
use super::{Json, events, runs};
use crate::{Registry, WorkflowDefinition};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tasks HTTP API",
        version = "1",
        description = "Start, read, wait for and operate on durable workflow runs. Every error is an RFC 9457 problem document (application/problem+json) with a stable `type` URI."
    ),
    paths(
        runs::start, runs::get, runs::steps, runs::result, runs::list,
        runs::cancel, runs::pause, runs::resume, runs::retry, runs::fork,
        events::send_to_run, events::send_by_key, events::signal_with_start,
        events::list_state, events::get_state, events::wait_state,
        workflows,
    ),
    components(schemas(
        Problem, ProblemViolation, Run, Status, Step, RunPage, StepPage, StartRun,
        ConcurrencyKey, SendEventBody, SignalWithStartBody, Signalled, Event, State, ForkBody,
        WorkflowInfo, EventInfo,
    )),
    modifiers(&BearerAuth),
)]
struct ApiDoc;

#[cfg(feature = "schedules")]
#[derive(OpenApi)]
#[openapi(
    paths(
        super::schedules::list,
        super::schedules::create,
        super::schedules::pause,
        super::schedules::resume,
        super::schedules::delete,
    ),
    components(schemas(super::schedules::ScheduleInfo, super::schedules::CreateSchedule))
)]
struct SchedulesDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The OpenAPI 3.1 document of the API, with a typed start path and keyed-event path for
/// each workflow of `registry` (its latest version).
pub fn openapi(registry: &Registry) -> Value {
    #[allow(unused_mut)]
    let mut doc = ApiDoc::openapi();
    #[cfg(feature = "schedules")]
    doc.merge(SchedulesDoc::openapi());
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    let mut latest: Vec<&'static WorkflowDefinition> = registry
        .iter()
        .filter(|definition| {
            registry
                .latest(definition.name)
                .is_some_and(|latest| std::ptr::eq(latest, *definition))
        })
        .collect();
    latest.sort_by_key(|definition| definition.name);
    for definition in latest {
        add_workflow(&mut doc, definition);
    }
    doc
}

/// A name usable as a component key (`^[a-zA-Z0-9._-]+$`).
fn component_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Puts `schema` into the document's components as `name`, its `$defs` beside it as
/// `name.Def`, every `#/$defs/...` reference rewritten to them; returns a reference to it.
fn add_component(doc: &mut Value, name: &str, mut schema: Value) -> Value {
    let defs = schema
        .as_object_mut()
        .and_then(|object| {
            object.remove("$schema");
            object.remove("$defs")
        })
        .and_then(|defs| match defs {
            Value::Object(defs) => Some(defs),
            _ => None,
        })
        .unwrap_or_default();
    let rename = |def: &str| format!("#/components/schemas/{name}.{}", component_name(def));
    let mut entries = vec![(name.to_owned(), schema)];
    for (def, schema) in defs {
        entries.push((format!("{name}.{}", component_name(&def)), schema));
    }
    for (key, mut schema) in entries {
        rewrite_refs(&mut schema, &rename);
        doc["components"]["schemas"][key] = schema;
    }
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn rewrite_refs(value: &mut Value, rename: &impl Fn(&str) -> String) {
    match value {
        Value::Object(object) => {
            for (key, value) in object.iter_mut() {
                match value {
                    Value::String(target) if key == "$ref" => {
                        if let Some(def) = target.strip_prefix("#/$defs/") {
                            *target = rename(def);
                        } else if target == "#" {
                            // A recursive schema refers to its root.
                            *target = rename("").trim_end_matches('.').to_owned();
                        }
                    }
                    _ => rewrite_refs(value, rename),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rewrite_refs(item, rename)),
        _ => {}
    }
}

fn add_workflow(doc: &mut Value, definition: &'static WorkflowDefinition) {
    let base = component_name(definition.name);
    let input = add_component(doc, &format!("{base}.Input"), (definition.input_schema)());
    let output = add_component(doc, &format!("{base}.Output"), (definition.output_schema)());
    let problem = json!({
        "description": "See the problem's type",
        "content": { "application/problem+json": { "schema": { "$ref": "#/components/schemas/Problem" } } }
    });
    let namespace = json!({ "name": "namespace", "in": "path", "required": true, "schema": { "type": "string" } });
    let traceparent = json!({ "name": "traceparent", "in": "header", "required": false, "description": "W3C trace context: the trace the run's executions join (an invalid one is ignored)", "schema": { "type": "string" } });
    let tracestate = json!({ "name": "tracestate", "in": "header", "required": false, "description": "W3C trace state, with `traceparent`", "schema": { "type": "string" } });
    let start_body = json!({
        "allOf": [
            { "$ref": "#/components/schemas/StartRun" },
            { "type": "object", "properties": { "input": input } }
        ]
    });
    let run_with_output = json!({
        "allOf": [
            { "$ref": "#/components/schemas/Run" },
            { "type": "object", "properties": { "output": { "oneOf": [output, { "type": "null" }] } } }
        ]
    });
    let description = definition.description.unwrap_or_default();
    doc["paths"][format!(
        "/v1/namespaces/{{namespace}}/workflows/{}/runs",
        definition.name
    )] = json!({
        "post": {
            "tags": ["workflows"],
            "summary": format!("Starts a run of {}", definition.display_name()),
            "description": description,
            "operationId": format!("start_workflow_{}", base.replace(['.', '-'], "_")),
            "parameters": [namespace, traceparent, tracestate],
            "requestBody": { "required": true, "content": { "application/json": { "schema": start_body } } },
            "responses": {
                "201": { "description": "The run was started", "content": { "application/json": { "schema": run_with_output } } },
                "200": { "description": "A run held the idempotency key already: that run (nothing new was started)", "content": { "application/json": { "schema": run_with_output } } },
                "4XX": problem,
            },
            "security": [{ "bearer": [] }]
        }
    });
    let mut topics = Vec::new();
    for (topic, schema) in declared_events(definition.name, definition.version) {
        let payload = add_component(
            doc,
            &format!("{base}.Event.{}", component_name(topic)),
            schema,
        );
        topics.push(json!({
            "type": "object",
            "required": ["topic", "payload"],
            "properties": {
                "topic": { "const": topic },
                "payload": payload,
                "dedup_key": { "type": ["string", "null"] }
            }
        }));
    }
    if topics.is_empty() {
        return;
    }
    let key =
        json!({ "name": "key", "in": "path", "required": true, "schema": { "type": "string" } });
    doc["paths"][format!(
        "/v1/namespaces/{{namespace}}/workflows/{}/keys/{{key}}/events",
        definition.name
    )] = json!({
        "post": {
            "tags": ["workflows"],
            "summary": format!("Sends an event to the run of {} with this idempotency key", definition.name),
            "operationId": format!("send_event_to_workflow_{}", base.replace(['.', '-'], "_")),
            "parameters": [namespace, key],
            "requestBody": { "required": true, "content": { "application/json": { "schema": { "oneOf": topics } } } },
            "responses": {
                "201": { "description": "The stored event", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Event" } } } },
                "4XX": problem,
            },
            "security": [{ "bearer": [] }]
        }
    });
}

/// The topics `workflow` at `version` declares, with their payloads' schemas, by topic.
fn declared_events(workflow: &str, version: Option<&str>) -> Vec<(&'static str, Value)> {
    let mut events: Vec<_> =
        crate::__private::inventory::iter::<crate::__private::EventRegistration>
            .into_iter()
            .map(|registration| registration.0)
            .filter(|declared| declared.workflow == workflow && declared.version == version)
            .collect();
    events.sort_by_key(|declared| declared.topic);
    events.dedup_by_key(|declared| declared.topic);
    events
        .into_iter()
        .map(|declared| (declared.topic, (declared.schema)()))
        .collect()
}

/// Every workflow this binary knows (each version), with its input, output and event
/// schemas.
#[utoipa::path(
    operation_id = "list_workflows",
    get,
    path = "/v1/workflows",
    tag = "workflows",
    responses(
        (status = 200, body = Vec<WorkflowInfo>),
        (status = 401, body = super::problem::Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub(super) async fn workflows(
    _: Authenticated,
    axum::extract::State(state): axum::extract::State<std::sync::Arc<super::ApiState>>,
) -> Json<Vec<WorkflowInfo>> {
    let mut workflows: Vec<WorkflowInfo> = state
        .registry
        .iter()
        .map(|definition| WorkflowInfo {
            name: definition.name.to_owned(),
            version: definition.version.map(str::to_owned),
            description: definition.description.map(str::to_owned),
            input_schema: (definition.input_schema)(),
            output_schema: (definition.output_schema)(),
            events: declared_events(definition.name, definition.version)
                .into_iter()
                .map(|(topic, payload_schema)| EventInfo {
                    topic: topic.to_owned(),
                    payload_schema,
                })
                .collect(),
        })
        .collect();
    workflows.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    Json(StatusCode::OK, workflows)
}
