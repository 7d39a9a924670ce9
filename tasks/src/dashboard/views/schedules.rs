//! The schedules page.

use super::{Base, query_value, status_badge};
use crate::display::maybe_time;
use maud::{Markup, html};

/// The schedules page.
pub(in crate::dashboard) fn schedules(
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
