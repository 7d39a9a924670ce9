//! The registered workflows and the start form.

use super::{Base, json_block, query_value, violation_list};
use crate::{Violation, WorkflowDefinition};
use maud::{Markup, html};

/// The workflows page.
pub(in crate::dashboard) fn workflows(base: &Base, definitions: &[&WorkflowDefinition]) -> Markup {
    html! {
        h1 { "Workflows" }
        @if definitions.is_empty() {
            p.empty { "No workflows are linked into this binary." }
        } @else {
            table.workflows {
                thead { tr { th { "Name" } th { "Version" } th { "Description" } } }
                tbody {
                    @for definition in definitions {
                        tr {
                            td {
                                a href=(base.link(&workflow_link(definition))) { (definition.name) }
                            }
                            td { (definition.version.unwrap_or("-")) }
                            td { (definition.description.and_then(|text| text.lines().map(str::trim).find(|l| !l.is_empty())).unwrap_or("")) }
                        }
                    }
                }
            }
        }
    }
}

fn workflow_link(definition: &WorkflowDefinition) -> String {
    match definition.version {
        Some(version) => format!(
            "workflow?name={}&version={}",
            query_value(definition.name),
            query_value(version)
        ),
        None => format!("workflow?name={}", query_value(definition.name)),
    }
}

/// What the start form shows again after a refusal.
#[derive(Default)]
pub(in crate::dashboard) struct StartForm {
    pub(in crate::dashboard) input: String,
    pub(in crate::dashboard) idempotency_key: String,
    pub(in crate::dashboard) error: Option<String>,
    pub(in crate::dashboard) violations: Vec<Violation>,
}

/// A workflow's page: its schemas and the start form.
pub(in crate::dashboard) fn workflow(
    base: &Base,
    definition: &WorkflowDefinition,
    csrf: &str,
    form: &StartForm,
) -> Markup {
    let input_schema = (definition.input_schema)();
    let output_schema = (definition.output_schema)();
    html! {
        h1 { "Workflow " (definition.display_name()) }
        @if let Some(description) = definition.description { p.description { (description) } }
        h2 { "Start a run" }
        @if let Some(error) = &form.error {
            div.error #start-error {
                p { (error) }
                (violation_list("violations", &form.violations))
            }
        }
        form.start method="post" action=(base.link("start")) {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="name" value=(definition.name);
            input type="hidden" name="version" value=(definition.version.unwrap_or(""));
            label for="input" { "Input (JSON, checked against the schema below)" }
            textarea #input name="input" rows="8" spellcheck="false" { (form.input) }
            label { "Idempotency key (optional) " input #idempotency-key type="text" name="idempotency_key" value=(form.idempotency_key); }
            button #start-run type="submit" { "Start" }
        }
        h2 { "Input schema" }
        (json_block(&input_schema))
        h2 { "Output schema" }
        (json_block(&output_schema))
    }
}
