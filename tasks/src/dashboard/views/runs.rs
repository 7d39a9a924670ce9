//! The list of runs and its filters.

use super::{Base, query_value, status_badge};
use crate::display::{time, workflow_of};
use crate::{RunStatus, WorkflowRun};
use maud::{Markup, html};

/// The filters of the runs page, as given.
pub(in crate::dashboard) struct RunFilters {
    pub(in crate::dashboard) statuses: Vec<RunStatus>,
    pub(in crate::dashboard) workflow: Option<String>,
    pub(in crate::dashboard) version: Option<String>,
    pub(in crate::dashboard) queue: Option<String>,
    pub(in crate::dashboard) key: Option<String>,
    pub(in crate::dashboard) search: Option<String>,
    pub(in crate::dashboard) limit: u32,
    pub(in crate::dashboard) oldest_first: bool,
}

impl RunFilters {
    /// The filters as a query string (without cursors), `&`-terminated when not empty.
    fn query(&self) -> String {
        let mut query = String::new();
        for status in &self.statuses {
            query.push_str(&format!("status={status}&"));
        }
        for (key, value) in [
            ("workflow", &self.workflow),
            ("version", &self.version),
            ("queue", &self.queue),
            ("key", &self.key),
            ("q", &self.search),
        ] {
            if let Some(value) = value {
                query.push_str(&format!("{key}={}&", query_value(value)));
            }
        }
        query.push_str(&format!("limit={}&", self.limit));
        if self.oldest_first {
            query.push_str("oldest=1&");
        }
        query
    }
}

/// The runs page.
pub(in crate::dashboard) fn runs(
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
        form.filters method="get" action=(base.link("runs")) {
            label { "Search " input #search type="search" name="q" size="38" placeholder="run id or idempotency key" value=[filters.search.as_deref()]; }
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
            label { "Version " input #filter-version type="text" name="version" size="6" value=[filters.version.as_deref()]; }
            label { "Queue " input #filter-queue type="text" name="queue" size="10" value=[filters.queue.as_deref()]; }
            label { "Concurrency key " input #filter-key type="text" name="key" size="12" value=[filters.key.as_deref()]; }
            label { "Per page " input type="number" name="limit" min="1" max="500" value=(filters.limit); }
            label { input type="checkbox" name="oldest" value="1" checked[filters.oldest_first]; " oldest first" }
            button #filter-runs type="submit" { "Filter" }
            label.live { input type="checkbox" id="live-toggle" checked; " live" }
        }
        div #live data-refresh-ms=(refresh_ms) {
            @if runs.is_empty() {
                p.empty { "No runs." }
            } @else {
                table.runs {
                    thead { tr { th { "Run" } th { "Workflow" } th { "Status" } th { "Queue" } th { "Attempts" } th { "Created" } th { "Updated" } } }
                    tbody {
                        @for run in runs {
                            tr data-run-id=(run.id) {
                                td { a.mono href=(base.link(&format!("run?id={}", run.id))) { (run.id) } }
                                td { (workflow_of(run)) }
                                td { (status_badge(run.status.as_str())) }
                                td.queue { (run.queue) }
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
                    a #prev-page href=(format!("{}?{}before={}", base.link("runs"), filters.query(), query_value(prev))) { "← newer" }
                }
                @if let Some(next) = &next {
                    a #next-page href=(format!("{}?{}after={}", base.link("runs"), filters.query(), query_value(next))) { "older →" }
                }
            }
        }
    }
}
