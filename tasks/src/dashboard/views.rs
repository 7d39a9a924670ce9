//! The dashboard's HTML, as `maud` templates: every `(value)` is escaped. One module per
//! page (`runs`, `run`, `workflows`, `schedules`); here, the layout and the pieces they share.

use crate::Violation;
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

mod overview;
mod run;
mod runs;
#[cfg(feature = "schedules")]
mod schedules;
mod workflows;

pub(super) use overview::{Fleet, Overview, overview, queues, workers};
pub(super) use run::{EventForm, RunPage, run};
pub(super) use runs::{RunFilters, runs};
#[cfg(feature = "schedules")]
pub(super) use schedules::schedules;
pub(super) use workflows::{StartForm, workflow, workflows};

/// Where the dashboard is mounted: `""` at the root, `/tasks` when nested there. Links are
/// absolute from it, so they work with and without a trailing slash on the mount point.
pub(super) struct Base(pub(super) String);

impl Base {
    /// The landing page (the overview).
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
                        a #nav-overview href=(base.root()) class=(if nav == "overview" { "current" } else { "" }) { "Overview" }
                        a #nav-runs href=(base.link("runs")) class=(if nav == "runs" { "current" } else { "" }) { "Runs" }
                        a #nav-queues href=(base.link("queues")) class=(if nav == "queues" { "current" } else { "" }) { "Queues" }
                        a #nav-workers href=(base.link("workers")) class=(if nav == "workers" { "current" } else { "" }) { "Workers" }
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
        p { a href=(base.link("runs")) { "Back to the runs" } }
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

/// A JSON value, pretty-printed.
fn json_block(value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
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
