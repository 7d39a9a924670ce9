//! The overview, the queues and the workers pages, and the throughput chart (inline SVG,
//! drawn here: no script, no charting library).

use super::{Base, query_value, status_badge};
use crate::RunStatus;
use crate::chrono::{DateTime, Utc};
use crate::display::{duration, time};
use crate::store::overview::{FinishedRuns, QueueBacklog, WorkerInfo};
use maud::{Markup, html};

/// The figures of the overview, each as read or the reason it could not be.
pub(in crate::dashboard) struct Overview {
    pub(in crate::dashboard) counts: Result<Vec<(RunStatus, u64)>, String>,
    pub(in crate::dashboard) finished: Result<FinishedRuns, String>,
    pub(in crate::dashboard) queues: Result<Vec<QueueBacklog>, String>,
    /// The live workers.
    pub(in crate::dashboard) workers: Result<Vec<WorkerInfo>, String>,
    /// The schedules due next (`None` without the `schedules` feature).
    pub(in crate::dashboard) schedules: Option<Result<Vec<crate::Schedule>, String>>,
    pub(in crate::dashboard) now: DateTime<Utc>,
    pub(in crate::dashboard) refresh_ms: u128,
}

/// The figures of the queues and workers pages.
pub(in crate::dashboard) struct Fleet {
    pub(in crate::dashboard) backlogs: Result<Vec<QueueBacklog>, String>,
    pub(in crate::dashboard) configured: Result<Vec<crate::Queue>, String>,
    pub(in crate::dashboard) workers: Result<Vec<WorkerInfo>, String>,
    pub(in crate::dashboard) now: DateTime<Utc>,
    pub(in crate::dashboard) refresh_ms: u128,
}

/// A panel's reason for having no figures.
fn unavailable(reason: &str) -> Markup {
    html! { p.error.unavailable { "Not available: " (reason) } }
}

/// `3m04s ago`, or `in 3m04s` for an instant after `now`.
fn ago(now: DateTime<Utc>, at: DateTime<Utc>) -> String {
    if at <= now {
        format!("{} ago", duration(now - at))
    } else {
        format!("in {}", duration(at - now))
    }
}

/// The overview page.
pub(in crate::dashboard) fn overview(base: &Base, overview: &Overview) -> Markup {
    let runs = |query: &str| base.link(&format!("runs?{query}"));
    html! {
        h1 { "Overview" }
        label.live.right { input type="checkbox" id="live-toggle" checked; " live" }
        div #live data-refresh-ms=(overview.refresh_ms) {
            section.panel #runs-by-status {
                h2 { "Runs by status" }
                @match &overview.counts {
                    Ok(counts) => {
                        div.figures {
                            @for (status, count) in counts {
                                a.figure id=(format!("count-{status}")) href=(runs(&format!("status={status}"))) {
                                    span.number { (count) }
                                    span.label { (status_badge(status.as_str())) }
                                }
                            }
                            @if let Ok(finished) = &overview.finished {
                                @let (completed, failed, canceled) = finished.totals();
                                @for (status, count) in [("completed", completed), ("failed", failed), ("canceled", canceled)] {
                                    a.figure id=(format!("finished-{status}")) href=(runs(&format!("status={status}"))) {
                                        span.number { (count) }
                                        span.label { (status_badge(status)) " last hour" }
                                    }
                                }
                            }
                        }
                    }
                    Err(reason) => { (unavailable(reason)) }
                }
            }
            section.panel #throughput-panel {
                h2 { "Throughput and failures, last hour" }
                @match &overview.finished {
                    Ok(finished) => { (chart(finished)) }
                    Err(reason) => { (unavailable(reason)) }
                }
            }
            div.columns {
                section.panel #queues-panel {
                    h2 { a href=(base.link("queues")) { "Queues" } }
                    @match &overview.queues {
                        Ok(queues) => { (backlog_table(base, queues, overview.now)) }
                        Err(reason) => { (unavailable(reason)) }
                    }
                }
                section.panel #workers-panel {
                    h2 { a href=(base.link("workers")) { "Live workers" } }
                    @match &overview.workers {
                        Ok(workers) => { (worker_table(workers, overview.now)) }
                        Err(reason) => { (unavailable(reason)) }
                    }
                }
            }
            @if let Some(schedules) = &overview.schedules {
                section.panel #schedules-panel {
                    h2 { a href=(base.link("schedules")) { "Schedules due next" } }
                    @match schedules {
                        Ok(schedules) if schedules.is_empty() => { p.empty { "No active schedules." } }
                        Ok(schedules) => {
                            table #next-schedules {
                                thead { tr { th { "Schedule" } th { "Workflow" } th { "Next slot" } th { "" } } }
                                tbody {
                                    @for schedule in schedules {
                                        tr data-schedule=(schedule.name) {
                                            td { (schedule.name) }
                                            td { (schedule.workflow_name) }
                                            td { (schedule.next_slot.map(time).unwrap_or_default()) }
                                            td.hint { (schedule.next_slot.map(|at| ago(overview.now, at)).unwrap_or_default()) }
                                        }
                                    }
                                }
                            }
                        }
                        Err(reason) => { (unavailable(reason)) }
                    }
                }
            }
        }
    }
}

/// The queues page.
pub(in crate::dashboard) fn queues(base: &Base, fleet: &Fleet) -> Markup {
    html! {
        h1 { "Queues" }
        label.live.right { input type="checkbox" id="live-toggle" checked; " live" }
        div #live data-refresh-ms=(fleet.refresh_ms) {
            h2 { "Backlog" }
            @match &fleet.backlogs {
                Ok(backlogs) => { (backlog_table(base, backlogs, fleet.now)) }
                Err(reason) => { (unavailable(reason)) }
            }
            h2 { "Configured limits" }
            @match &fleet.configured {
                Ok(queues) if queues.is_empty() => { p.empty { "No queue has limits: every run is claimed as workers have room." } }
                Ok(queues) => {
                    table #queue-limits {
                        thead { tr { th { "Queue" } th { "Concurrency" } th { "Rate" } th { "Rate per key" } th { "Concurrency per key" } } }
                        tbody {
                            @for queue in queues {
                                tr data-queue=(queue.name) {
                                    td { a href=(base.link(&format!("runs?queue={}", query_value(&queue.name)))) { (queue.name) } }
                                    td.num { (queue.concurrency.map_or_else(|| "-".to_owned(), |n| n.to_string())) }
                                    td { (rate(queue.rate_limit)) }
                                    td { (rate(queue.key_rate_limit)) }
                                    td.num { (queue.key_concurrency.map_or_else(|| "-".to_owned(), |n| n.to_string())) }
                                }
                            }
                        }
                    }
                }
                Err(reason) => { (unavailable(reason)) }
            }
        }
    }
}

fn rate(limit: Option<crate::RateLimit>) -> String {
    limit.map_or_else(
        || "-".to_owned(),
        |limit| format!("{} per {:?}", limit.starts, limit.period),
    )
}

/// The workers page.
pub(in crate::dashboard) fn workers(_base: &Base, fleet: &Fleet) -> Markup {
    html! {
        h1 { "Workers" }
        label.live.right { input type="checkbox" id="live-toggle" checked; " live" }
        div #live data-refresh-ms=(fleet.refresh_ms) {
            @match &fleet.workers {
                Ok(workers) => { (worker_table(workers, fleet.now)) }
                Err(reason) => { (unavailable(reason)) }
            }
            p.hint { "A worker beats about once a second; one whose heartbeat went stale is presumed dead, and the runs it held are claimed by others at once." }
        }
    }
}

fn backlog_table(base: &Base, queues: &[QueueBacklog], now: DateTime<Utc>) -> Markup {
    html! {
        @if queues.is_empty() {
            p.empty { "No queue has pending or running runs." }
        } @else {
            table.backlog {
                thead { tr { th { "Queue" } th { "Ready" } th { "Delayed" } th { "Running" } th { "Oldest ready run waits" } } }
                tbody {
                    @for queue in queues {
                        tr data-queue=(queue.queue) {
                            td { a href=(base.link(&format!("runs?queue={}&status=pending&status=running", query_value(&queue.queue)))) { (queue.queue) } }
                            td.num.ready { (queue.ready) }
                            td.num.delayed { (queue.delayed) }
                            td.num.running { (queue.running) }
                            td.age { (queue.oldest_ready_at.map(|at| duration(now - at)).unwrap_or_else(|| "-".to_owned())) }
                        }
                    }
                }
            }
        }
    }
}

fn worker_table(workers: &[WorkerInfo], now: DateTime<Utc>) -> Markup {
    html! {
        @if workers.is_empty() {
            p.empty { "No worker has a heartbeat in this namespace." }
        } @else {
            table.workers {
                thead { tr { th { "Worker" } th { "State" } th { "Last heartbeat" } th { "Running runs" } } }
                tbody {
                    @for worker in workers {
                        tr data-worker=(worker.worker_id) {
                            td.mono { (worker.worker_id) }
                            td { (status_badge(if worker.live { "live" } else { "stale" })) }
                            td title=(time(worker.beat_at)) { (ago(now, worker.beat_at)) }
                            td.num.running { (worker.running) }
                        }
                    }
                }
            }
        }
    }
}

/// The chart's drawing area, in SVG user units.
const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 120.0;

/// Runs finished per bucket as stacked bars: completed, then failed, then canceled. Each
/// bar has a `<title>` (its tooltip) with its figures.
fn chart(finished: &FinishedRuns) -> Markup {
    let (completed, failed, canceled) = finished.totals();
    let most = finished
        .buckets
        .iter()
        .map(|bucket| bucket.completed + bucket.failed + bucket.canceled)
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = WIDTH / finished.buckets.len().max(1) as f64;
    let bar = (slot - 2.0).max(1.0);
    let scale = |count: u64| count as f64 / most as f64 * HEIGHT;
    html! {
        p.legend {
            span.key.completed {} (completed) " completed · "
            span.key.failed {} (failed) " failed · "
            span.key.canceled {} (canceled) " canceled · per " (duration(crate::chrono::TimeDelta::from_std(finished.bucket).unwrap_or_default()))
        }
        svg.chart #throughput viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 18.0)) role="img"
            data-completed=(completed) data-failed=(failed) data-canceled=(canceled)
            aria-label=(format!("{completed} completed, {failed} failed, {canceled} canceled in the last hour")) {
            line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
            @for (index, bucket) in finished.buckets.iter().enumerate() {
                @let x = index as f64 * slot + 1.0;
                @let total = bucket.completed + bucket.failed + bucket.canceled;
                @if total > 0 {
                    g.bucket {
                        title { (time(bucket.start)) ": " (bucket.completed) " completed, " (bucket.failed) " failed, " (bucket.canceled) " canceled" }
                        @for (class, y, height) in stack(bucket, scale) {
                            rect class=(class) x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{bar:.1}")) height=(format!("{height:.1}")) {}
                        }
                    }
                }
            }
            text.tick x="0" y=(HEIGHT + 14.0) { "-" (duration(crate::chrono::TimeDelta::from_std(finished.bucket * finished.buckets.len() as u32).unwrap_or_default())) }
            text.tick x=(WIDTH) y=(HEIGHT + 14.0) text-anchor="end" { "now" }
            text.tick x="2" y="10" { (most) " max" }
        }
    }
}

/// The bars of one bucket, stacked from the axis up: `(class, y, height)` of each status
/// with runs.
fn stack(
    bucket: &crate::store::overview::FinishedBucket,
    scale: impl Fn(u64) -> f64,
) -> Vec<(&'static str, f64, f64)> {
    let mut top = HEIGHT;
    [
        ("completed", bucket.completed),
        ("failed", bucket.failed),
        ("canceled", bucket.canceled),
    ]
    .into_iter()
    .filter(|(_, count)| *count > 0)
    .map(|(class, count)| {
        let height = scale(count);
        top -= height;
        (class, top, height)
    })
    .collect()
}
