//! The dashboard's HTML, as `maud` templates: every `(value)` is escaped.

use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use crate::chrono::{DateTime, TimeDelta, Utc};
use crate::display::{
    argument_texts, attempt_numbers, duration, error_text, maybe_time, step_duration, time,
    workflow_of,
};
use crate::{
    PublishedState, RunStatus, StepAttempt, StepKind, Violation, WorkflowDefinition, WorkflowRun,
};

/// Where the dashboard is mounted: `""` at the root, `/tasks` when nested there. Links are
/// absolute from it, so they work with and without a trailing slash on the mount point.
pub(super) struct Base(pub(super) String);

impl Base {
    /// The runs page.
    pub(super) fn root(&self) -> String {
        if self.0.is_empty() {
            "/".to_owned()
        } else {
            self.0.clone()
        }
    }

    /// A page or asset under the mount point (`path` without a leading `/`).
    pub(super) fn link(&self, path: &str) -> String {
        format!("{}/{path}", self.0)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path();
        let original = parts
            .extensions
            .get::<axum::extract::OriginalUri>()
            .map_or(inner, |uri| uri.0.path());
        let base = if inner == "/" {
            original.trim_end_matches('/')
        } else {
            original.strip_suffix(inner).unwrap_or("")
        };
        Ok(Base(base.to_owned()))
    }
}

/// A whole page around `body`.
pub(super) fn page(base: &Base, title: &str, nav: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · tasks" }
                link rel="stylesheet" href=(base.link("assets/style.css"));
                script src=(base.link("assets/dashboard.js")) defer {}
            }
            body {
                header {
                    span.brand { "tasks" }
                    nav {
                        a href=(base.root()) class=(if nav == "runs" { "current" } else { "" }) { "Runs" }
                        a href=(base.link("workflows")) class=(if nav == "workflows" { "current" } else { "" }) { "Workflows" }
                        @if cfg!(feature = "schedules") {
                            a #nav-schedules href=(base.link("schedules")) class=(if nav == "schedules" { "current" } else { "" }) { "Schedules" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// An error page's body.
pub(super) fn message(base: &Base, heading: &str, text: &str) -> Markup {
    html! {
        h1 { (heading) }
        p.error { (text) }
        p { a href=(base.root()) { "Back to the runs" } }
    }
}

/// Percent-encodes a query-string value.
pub(super) fn query_value(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn status_badge(status: &str) -> Markup {
    html! { span class=(format!("badge status-{status}")) { (status) } }
}

/// The filters of the runs page, as given.
pub(super) struct RunFilters {
    pub(super) statuses: Vec<RunStatus>,
    pub(super) workflow: Option<String>,
    pub(super) limit: u32,
    pub(super) oldest_first: bool,
}

impl RunFilters {
    /// The filters as a query string (without cursors), `&`-terminated when not empty.
    fn query(&self) -> String {
        let mut query = String::new();
        for status in &self.statuses {
            query.push_str(&format!("status={status}&"));
        }
        if let Some(workflow) = &self.workflow {
            query.push_str(&format!("workflow={}&", query_value(workflow)));
        }
        query.push_str(&format!("limit={}&", self.limit));
        if self.oldest_first {
            query.push_str("oldest=1&");
        }
        query
    }
}

/// The runs page.
pub(super) fn runs(
    base: &Base,
    filters: &RunFilters,
    workflows: &[String],
    runs: &[WorkflowRun],
    next: Option<String>,
    prev: Option<String>,
    refresh_ms: u128,
) -> Markup {
    html! {
        h1 { "Runs" }
        form.filters method="get" action=(base.root()) {
            fieldset {
                legend { "Status" }
                @for status in RunStatus::ALL {
                    label {
                        input type="checkbox" name="status" value=(status) checked[filters.statuses.contains(&status)];
                        " " (status)
                    }
                }
            }
            label {
                "Workflow "
                select name="workflow" {
                    option value="" { "any" }
                    @for name in workflows {
                        option value=(name) selected[filters.workflow.as_deref() == Some(name.as_str())] { (name) }
                    }
                }
            }
            label { "Per page " input type="number" name="limit" min="1" max="500" value=(filters.limit); }
            label { input type="checkbox" name="oldest" value="1" checked[filters.oldest_first]; " oldest first" }
            button type="submit" { "Filter" }
            label.live { input type="checkbox" id="live-toggle" checked; " live" }
        }
        div #live data-refresh-ms=(refresh_ms) {
            @if runs.is_empty() {
                p.empty { "No runs." }
            } @else {
                table.runs {
                    thead { tr { th { "Run" } th { "Workflow" } th { "Status" } th { "Attempts" } th { "Created" } th { "Updated" } } }
                    tbody {
                        @for run in runs {
                            tr data-run-id=(run.id) {
                                td { a.mono href=(base.link(&format!("run?id={}", run.id))) { (run.id) } }
                                td { (workflow_of(run)) }
                                td { (status_badge(run.status.as_str())) }
                                td.num { (run.attempts) }
                                td { (time(run.created_at)) }
                                td { (time(run.updated_at)) }
                            }
                        }
                    }
                }
            }
            p.pages {
                @if let Some(prev) = &prev {
                    a #prev-page href=(format!("{}?{}before={}", base.root(), filters.query(), query_value(prev))) { "← newer" }
                }
                @if let Some(next) = &next {
                    a #next-page href=(format!("{}?{}after={}", base.root(), filters.query(), query_value(next))) { "older →" }
                }
            }
        }
    }
}

/// A JSON value, pretty-printed.
fn json_block(value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
}

/// When a sleep attempt wakes: its start plus its stored duration.
fn sleep_until(step: &StepAttempt) -> Option<DateTime<Utc>> {
    let millis = step.config.get("durationMs")?.as_u64()?;
    let millis = i64::try_from(millis).ok()?;
    step.created_at
        .checked_add_signed(TimeDelta::try_milliseconds(millis)?)
}

/// What the event form shows again after a refusal.
#[derive(Default)]
pub(super) struct EventForm {
    pub(super) topic: String,
    pub(super) payload: String,
    pub(super) error: Option<String>,
    pub(super) violations: Vec<Violation>,
}

/// A list of violations, each with its JSON path.
fn violation_list(id: &str, violations: &[Violation]) -> Markup {
    html! {
        @if !violations.is_empty() {
            ul id=(id) {
                @for violation in violations {
                    li { code { (if violation.path.is_empty() { "/" } else { violation.path.as_str() }) } ": " (violation.message) }
                }
            }
        }
    }
}

/// What the run page needs besides the run and its steps.
pub(super) struct RunPage<'a> {
    pub(super) csrf: &'a str,
    /// The state the run published (`ctx.set_state`), by key.
    pub(super) published: Vec<PublishedState>,
    /// The notice of an action just done.
    pub(super) done: Option<&'static str>,
    pub(super) refresh_ms: u128,
    /// The events the run's workflow declares (topic and payload schema), by topic.
    pub(super) events: Vec<(&'static str, Value)>,
    pub(super) event_form: EventForm,
    /// Why the run's steps cannot be shown: a stored step row that does not decode (the
    /// timeline is then empty, and this says which row and column).
    pub(super) steps_unreadable: Option<String>,
}

/// The run page.
pub(super) fn run(
    base: &Base,
    run: &WorkflowRun,
    steps: &[StepAttempt],
    page: &RunPage<'_>,
) -> Markup {
    let (csrf, done, refresh_ms) = (page.csrf, page.done, page.refresh_ms);
    // Fork from a step: offered once per step name (on its first attempt), on a finished run.
    let mut seen = std::collections::HashSet::new();
    let forkable: Vec<bool> = steps
        .iter()
        .map(|step| run.status.is_terminal() && seen.insert(step.step_name.as_str()))
        .collect();
    let now = Utc::now();
    let start = steps
        .iter()
        .map(|step| step.started_at.unwrap_or(step.created_at))
        .chain([run.created_at])
        .min()
        .unwrap_or(run.created_at);
    let end_of = |step: &StepAttempt| {
        step.finished_at.unwrap_or_else(|| match step.kind {
            StepKind::Sleep => sleep_until(step).unwrap_or(now).max(now),
            // A step still running, a wait for an event that has not come yet, or a child
            // that has not finished.
            _ => now,
        })
    };
    let end = steps
        .iter()
        .map(end_of)
        .chain([run.finished_at.unwrap_or(now)])
        .max()
        .unwrap_or(now);
    let span = (end - start).num_microseconds().unwrap_or(i64::MAX).max(1) as f64;
    let scale = |at: DateTime<Utc>| {
        ((at - start).num_microseconds().unwrap_or(0) as f64 / span * 1000.0).clamp(0.0, 1000.0)
    };
    let numbers = attempt_numbers(steps);
    let live = !run.status.is_terminal();
    html! {
        h1 { "Run " span.mono { (run.id) } }
        @if let Some(done) = done {
            p.notice #notice { (done) }
        }
        div #live data-refresh-ms=(if live { refresh_ms } else { 0 }) {
            dl.fields {
                dt { "Workflow" } dd { a href=(base.link(&format!("workflow?name={}", query_value(&run.workflow_name)))) { (workflow_of(run)) } }
                dt { "Status" } dd #run-status { (status_badge(run.status.as_str())) }
                dt { "Namespace" } dd { (run.namespace) }
                dt { "Attempts" } dd { (run.attempts) }
                @if let Some(key) = &run.idempotency_key { dt { "Idempotency key" } dd { (key) } }
                dt { "Created" } dd { (time(run.created_at)) }
                dt { "Started" } dd { (maybe_time(run.started_at)) }
                dt { "Finished" } dd { (maybe_time(run.finished_at)) }
                @if !run.status.is_terminal() {
                    @if let Some(at) = run.available_at { dt { "Available at" } dd { (time(at)) } }
                }
                @if let Some(at) = run.deadline_at { dt { "Deadline" } dd { (time(at)) } }
                @if let Some(worker) = &run.worker_id { dt { "Worker" } dd.mono { (worker) } }
                @if let Some(trace) = &run.trace_context {
                    dt { "Trace" }
                    dd.mono #traceparent title="The W3C traceparent of whoever started the run; its spans join that trace" { (trace.traceparent()) }
                }
                @if let Some(parent) = run.parent_run_id {
                    dt { "Parent" } dd { a.mono href=(base.link(&format!("run?id={parent}"))) { (parent) } }
                }
                @if let Some(origin) = run.forked_from_run_id {
                    dt { "Forked from" }
                    dd #forked-from {
                        a.mono href=(base.link(&format!("run?id={origin}"))) { (origin) }
                        @if let Some(step) = &run.forked_from_step { " at step " code { (step) } }
                    }
                }
            }
            @if matches!(run.status, RunStatus::Failed | RunStatus::Canceled) {
                div.actions {
                    form method="post" action=(base.link("action")) {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="hidden" name="id" value=(run.id);
                        input type="hidden" name="action" value="retry";
                        button type="submit" #retry-run.retry title="Run it again from its first unfinished step" { "Retry" }
                    }
                }
            }
            @if !run.status.is_terminal() {
                div.actions {
                    @for (action, label, enabled) in [
                        ("pause", "Pause", !matches!(run.status, RunStatus::Paused)),
                        ("resume", "Resume", matches!(run.status, RunStatus::Paused)),
                        ("cancel", "Cancel", true),
                    ] {
                        @if enabled {
                            form method="post" action=(base.link("action")) {
                                input type="hidden" name="csrf" value=(csrf);
                                input type="hidden" name="id" value=(run.id);
                                input type="hidden" name="action" value=(action);
                                button type="submit" id=(format!("{action}-run")) class=(action) { (label) }
                            }
                        }
                    }
                }
            }
            h2 { "Timeline" }
            @if let Some(unreadable) = &page.steps_unreadable {
                div.error #steps-unreadable {
                    strong { "The steps of this run cannot be shown: a stored row does not decode." }
                    br;
                    (unreadable)
                }
            } @else if steps.is_empty() {
                p.empty { "No steps yet." }
            } @else {
                p.scale { "0 — " (duration(end - start)) " from " (time(start)) }
                table.timeline #timeline {
                    thead { tr { th { "#" } th { "Step" } th { "Attempt" } th { "Status" } th { "Start" } th { "Duration" } th.bar-cell { "Timeline" } @if run.status.is_terminal() { th { "Fork" } } } }
                    tbody {
                        @for (index, ((step, attempt), fork)) in steps.iter().zip(&numbers).zip(&forkable).enumerate() {
                            @let began = step.started_at.unwrap_or(step.created_at);
                            @let x = scale(began);
                            @let width = (scale(end_of(step)) - x).max(2.0);
                            tr class=(format!("step kind-{}", step.kind)) data-step=(step.step_name) {
                                td.num { (index + 1) }
                                td {
                                    span.step-name { (step.step_name) }
                                    @if step.kind == StepKind::Sleep {
                                        " " span.kind { "sleep" }
                                        @if let Some(until) = sleep_until(step) { div.detail { "until " (time(until)) } }
                                    }
                                    @if step.kind == StepKind::Event {
                                        " " span.kind { "event" }
                                    }
                                    @if step.kind == StepKind::Child {
                                        " " span.kind { "child" }
                                        @if let Some(child) = step.child_workflow_run_id {
                                            div.detail { "run " a.mono href=(base.link(&format!("run?id={child}"))) { (child) } }
                                        }
                                    }
                                    @if let Some(error) = &step.error { div.error { (error_text(error)) } }
                                    @if let Some(args) = &step.args {
                                        details.args {
                                            summary { "arguments" }
                                            dl {
                                                @for (name, text) in argument_texts(args) {
                                                    dt.mono { (name) } dd.mono { (text) }
                                                }
                                            }
                                        }
                                    }
                                    // A function step's output, or the event a wait consumed.
                                    @if let Some(output) = step.output.as_ref().filter(|_| step.kind != StepKind::Sleep) {
                                        details { summary { "output" } (json_block(output)) }
                                    }
                                }
                                td.num { (attempt) }
                                td { (status_badge(step.status.as_str())) }
                                td { "+" (duration(began - start)) }
                                td { (step_duration(step)) }
                                td.bar-cell {
                                    svg.bar viewBox="0 0 1000 10" preserveAspectRatio="none" role="img" aria-label=(format!("{} from +{}", step.step_name, duration(began - start))) {
                                        rect class=(format!("status-{}", step.status)) x=(format!("{x:.1}")) y="0" width=(format!("{width:.1}")) height="10" {}
                                    }
                                }
                                @if run.status.is_terminal() {
                                    td.fork-cell {
                                        @if *fork {
                                            form method="post" action=(base.link("fork")) {
                                                input type="hidden" name="csrf" value=(csrf);
                                                input type="hidden" name="id" value=(run.id);
                                                input type="hidden" name="step" value=(step.step_name);
                                                button.fork type="submit" title="Start a new run that replays the steps before this one and runs this one and the rest again" { "Fork from here" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !page.published.is_empty() {
                h2 { "Published state" }
                table #published-state {
                    thead { tr { th { "Key" } th { "Version" } th { "Updated" } th { "Value" } } }
                    tbody {
                        @for state in &page.published {
                            tr data-key=(state.key) {
                                td.mono { (state.key) }
                                td.num { (state.version) }
                                td { (time(state.updated_at)) }
                                td { (json_block(&state.value)) }
                            }
                        }
                    }
                }
            }
            h2 { "Input" }
            (json_block(run.input.as_ref().unwrap_or(&Value::Null)))
            @if let Some(output) = &run.output { h2 { "Output" } (json_block(output)) }
            @if let Some(error) = &run.error {
                h2 { "Error" }
                p.error #run-error { (error_text(error)) }
            }
        }
        // Outside the live part, so that a refresh does not wipe what is being typed.
        @if !run.status.is_terminal() && !page.events.is_empty() {
            (event_form(base, run, page))
        }
    }
}

/// The form sending an event the run's workflow declares.
fn event_form(base: &Base, run: &WorkflowRun, page: &RunPage<'_>) -> Markup {
    let form = &page.event_form;
    html! {
        section.send-event {
            h2 { "Send an event" }
            @if let Some(error) = &form.error {
                div.error #event-error {
                    p { (error) }
                    (violation_list("event-violations", &form.violations))
                }
            }
            form.start method="post" action=(base.link("event")) {
                input type="hidden" name="csrf" value=(page.csrf);
                input type="hidden" name="id" value=(run.id);
                label {
                    "Event "
                    select #event-topic name="topic" {
                        @for (topic, _) in &page.events {
                            option value=(topic) selected[form.topic == *topic] { (topic) }
                        }
                    }
                }
                label for="event-payload" { "Payload (JSON, checked against the event's schema below)" }
                textarea #event-payload name="payload" rows="5" spellcheck="false" { (form.payload) }
                button #send-event type="submit" { "Send" }
            }
            @for (topic, schema) in &page.events {
                details.event-schema {
                    summary { "Payload schema of " code { (topic) } }
                    (json_block(schema))
                }
            }
        }
    }
}

/// The workflows page.
pub(super) fn workflows(base: &Base, definitions: &[&WorkflowDefinition]) -> Markup {
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
pub(super) struct StartForm {
    pub(super) input: String,
    pub(super) idempotency_key: String,
    pub(super) error: Option<String>,
    pub(super) violations: Vec<Violation>,
}

/// A workflow's page: its schemas and the start form.
pub(super) fn workflow(
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

/// The schedules page.
#[cfg(feature = "schedules")]
pub(super) fn schedules(
    base: &Base,
    schedules: &[crate::Schedule],
    csrf: &str,
    done: Option<&'static str>,
) -> Markup {
    html! {
        h1 { "Schedules" }
        @if let Some(done) = done {
            p.notice #notice { (done) }
        }
        @if schedules.is_empty() {
            p.empty { "No schedules in this namespace." }
        } @else {
            table.schedules #schedules {
                thead { tr { th { "Name" } th { "Workflow" } th { "Cron" } th { "Timezone" } th { "Next slot" } th { "State" } th { "Actions" } } }
                tbody {
                    @for schedule in schedules {
                        tr data-schedule=(schedule.name) {
                            td.name { (schedule.name) }
                            td {
                                a href=(base.link(&format!("workflow?name={}", query_value(&schedule.workflow_name)))) {
                                    (schedule.workflow_name)
                                    @if let Some(version) = &schedule.version { "@" (version) }
                                }
                            }
                            td { code { (schedule.cron) } }
                            td { (schedule.timezone) }
                            td { (maybe_time(schedule.next_slot)) }
                            td.state { (status_badge(if schedule.paused { "paused" } else { "active" })) }
                            td.actions {
                                @for (action, label, enabled) in [
                                    ("pause", "Pause", !schedule.paused),
                                    ("resume", "Resume", schedule.paused),
                                    ("delete", "Delete", true),
                                ] {
                                    @if enabled {
                                        form method="post" action=(base.link("schedule")) data-confirm=[(action == "delete").then(|| format!("Delete the schedule {:?}? The runs it started are kept.", schedule.name))] {
                                            input type="hidden" name="csrf" value=(csrf);
                                            input type="hidden" name="name" value=(schedule.name);
                                            input type="hidden" name="action" value=(action);
                                            button type="submit" class=(action) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        p.hint { "Create schedules in code (" code { "#[workflow(schedule = ...)]" } ", " code { "Client::create_schedule" } ") or with " code { "tasks schedules create" } "." }
    }
}
