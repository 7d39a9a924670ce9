//! The overview (the landing page), the queues and the workers: what the store's own
//! figures say of the namespace's health. Each panel reads one bounded figure; a panel the
//! store cannot answer shows why, and the others are still shown.

use super::respond;
use crate::dashboard::views::{Base, Fleet, Overview};
use crate::dashboard::{AppState, views};
use crate::store::overview::FinishedWindow;
use crate::{RunStatus, StoreError};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

/// The statuses the overview counts in full: those of live runs, which the partial indexes
/// cover. Finished runs are counted over the last hour only.
const LIVE: [RunStatus; 4] = [
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Sleeping,
    RunStatus::Paused,
];

/// How many queues and workers the overview shows (their pages show up to the store's
/// maximum).
const PANEL_ROWS: u32 = 10;

/// How many schedules the overview shows, soonest first.
#[cfg(feature = "schedules")]
const NEXT_SCHEDULES: usize = 5;

/// The rows the queues and workers pages read.
const PAGE_ROWS: u32 = crate::store::overview::MAX_OVERVIEW_ROWS;

/// The query keys of the runs page: a link made when the runs page was the landing page
/// (`/?status=failed`) is sent on to it.
const RUN_FILTER_KEYS: [&str; 10] = [
    "status", "workflow", "version", "queue", "key", "q", "limit", "oldest", "after", "before",
];

fn text(error: StoreError) -> String {
    error.to_string()
}

/// The landing page: runs by status, throughput and failures over the last hour, the
/// backlog of each queue, the live workers and the schedules due next.
pub(in crate::dashboard) async fn overview(
    base: Base,
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Some(query) = raw.filter(|query| {
        query.split('&').any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(key, _)| key);
            RUN_FILTER_KEYS.contains(&key)
        })
    }) {
        return Redirect::to(&format!("{}?{query}", base.link("runs"))).into_response();
    }
    let store = state.client.store().contract();
    let counts = store.count_runs(&LIVE).await.map_err(text);
    let (finished, queues, workers) = match store.overview() {
        Ok(overview) => (
            overview
                .finished_runs(FinishedWindow::LAST_HOUR)
                .await
                .map_err(text),
            overview.queue_backlogs(PANEL_ROWS).await.map_err(text),
            overview
                .list_workers(PANEL_ROWS)
                .await
                .map(|workers| workers.into_iter().filter(|worker| worker.live).collect())
                .map_err(text),
        ),
        Err(unsupported) => {
            let reason = unsupported.to_string();
            (Err(reason.clone()), Err(reason.clone()), Err(reason))
        }
    };
    #[cfg(feature = "schedules")]
    let schedules = Some(
        state
            .client
            .list_schedules()
            .await
            .map_err(text)
            .map(|mut schedules| {
                schedules.retain(|schedule| !schedule.paused && schedule.next_slot.is_some());
                schedules.sort_by_key(|schedule| schedule.next_slot);
                schedules.truncate(NEXT_SCHEDULES);
                schedules
            }),
    );
    #[cfg(not(feature = "schedules"))]
    let schedules = None;
    // Ages are measured on the store's clock, which stamped the times shown: the end of
    // the window it just read, when it could.
    let now = finished.as_ref().map_or_else(
        |_| crate::chrono::Utc::now(),
        |finished| {
            finished.since
                + crate::chrono::TimeDelta::from_std(FinishedWindow::LAST_HOUR.span)
                    .unwrap_or_default()
        },
    );
    let overview = Overview {
        counts,
        finished,
        queues,
        workers,
        schedules,
        now,
        refresh_ms: state.refresh.as_millis(),
    };
    respond(
        &base,
        StatusCode::OK,
        "Overview",
        "overview",
        views::overview(&base, &overview),
    )
}

/// The queues page: every queue with live runs, its backlog and its configured limits.
pub(in crate::dashboard) async fn queues(base: Base, State(state): State<AppState>) -> Response {
    let store = state.client.store().contract();
    let backlogs = match store.overview() {
        Ok(overview) => overview.queue_backlogs(PAGE_ROWS).await.map_err(text),
        Err(unsupported) => Err(unsupported.to_string()),
    };
    let configured = match store.queues() {
        Ok(queues) => queues.list_queues().await.map_err(text),
        Err(unsupported) => Err(unsupported.to_string()),
    };
    let fleet = Fleet {
        backlogs,
        configured,
        workers: Ok(Vec::new()),
        now: crate::chrono::Utc::now(),
        refresh_ms: state.refresh.as_millis(),
    };
    respond(
        &base,
        StatusCode::OK,
        "Queues",
        "queues",
        views::queues(&base, &fleet),
    )
}

/// The workers page: every worker with a heartbeat row, live ones first.
pub(in crate::dashboard) async fn workers(base: Base, State(state): State<AppState>) -> Response {
    let workers = match state.client.store().contract().overview() {
        Ok(overview) => overview.list_workers(PAGE_ROWS).await.map_err(text),
        Err(unsupported) => Err(unsupported.to_string()),
    };
    let fleet = Fleet {
        backlogs: Ok(Vec::new()),
        configured: Ok(Vec::new()),
        workers,
        now: crate::chrono::Utc::now(),
        refresh_ms: state.refresh.as_millis(),
    };
    respond(
        &base,
        StatusCode::OK,
        "Workers",
        "workers",
        views::workers(&base, &fleet),
    )
}
