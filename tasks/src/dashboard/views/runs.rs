//! The list of runs and its filters.

use super::{Base, query_value, status_badge};
use crate::display::{time, workflow_of};
use crate::{RunStatus, WorkflowRun};
use maud::{Markup, html};

/// The filters of the runs page, as given.
pub(in crate::dashboard) struct RunFilters {
    pub(in crate::dashboard) statuses: Vec<RunStatus>,
    pub(in crate::dashboard) workflow: Option<String>,
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
