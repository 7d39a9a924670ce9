//! One run: its history, its state, its events and the operator's forms.

use super::{Base, json_block, query_value, status_badge, violation_list};
use crate::chrono::{DateTime, TimeDelta, Utc};
use crate::display::{
    argument_texts, attempt_numbers, duration, error_text, maybe_time, step_duration, time,
    workflow_of,
};
use crate::{PublishedState, RunStatus, StepAttempt, StepKind, Violation, WorkflowRun};
use maud::{Markup, html};
use serde_json::Value;

/// When a sleep attempt wakes: its start plus its stored duration.
fn sleep_until(step: &StepAttempt) -> Option<DateTime<Utc>> {
    let millis = step.config.get("durationMs")?.as_u64()?;
    let millis = i64::try_from(millis).ok()?;
    step.created_at
        .checked_add_signed(TimeDelta::try_milliseconds(millis)?)
}

/// What the event form shows again after a refusal.
#[derive(Default)]
pub(in crate::dashboard) struct EventForm {
    pub(in crate::dashboard) topic: String,
    pub(in crate::dashboard) payload: String,
    pub(in crate::dashboard) error: Option<String>,
    pub(in crate::dashboard) violations: Vec<Violation>,
}

/// What the run page needs besides the run and its steps.
pub(in crate::dashboard) struct RunPage<'a> {
    pub(in crate::dashboard) csrf: &'a str,
    /// The state the run published (`ctx.set_state`), by key.
    pub(in crate::dashboard) published: Vec<PublishedState>,
    /// The notice of an action just done.
    pub(in crate::dashboard) done: Option<&'static str>,
    pub(in crate::dashboard) refresh_ms: u128,
    /// The events the run's workflow declares (topic and payload schema), by topic.
    pub(in crate::dashboard) events: Vec<(&'static str, Value)>,
    pub(in crate::dashboard) event_form: EventForm,
    /// Why the run's steps cannot be shown: a stored step row that does not decode (the
    /// timeline is then empty, and this says which row and column).
    pub(in crate::dashboard) steps_unreadable: Option<String>,
}

/// The run page.
pub(in crate::dashboard) fn run(
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
                @if let Some(previous) = run.continued_from_run_id {
                    dt { "Continued from" } dd #continued-from { a.mono href=(base.link(&format!("run?id={previous}"))) { (previous) } }
                }
                @if let Some(successor) = run.continued_as_run_id {
                    dt { "Continued as" } dd #continued-as { a.mono href=(base.link(&format!("run?id={successor}"))) { (successor) } }
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
