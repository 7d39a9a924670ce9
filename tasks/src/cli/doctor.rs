//! `doctor`: checks that this binary can work with its store.
//!
//! Checks, in order: the store answers a query; the schema is migrated and not newer than
//! this binary (connecting migrates, and refuses a newer schema); a notification makes the
//! round trip through the store (a probe run is created and canceled in the namespace
//! [`PROBE_NAMESPACE`], which no worker serves); the database clock agrees with this host's
//! (from the probe's creation time); a worker claims runs (from the runs running now, or
//! runs left waiting); and the workflows linked into this binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chrono::{TimeDelta, Utc};
use futures::StreamExt as _;

use super::{Exit, Output, connect_failed, format, one_line};
use crate::store::{CreateRun, Notification, NotificationStream};
use crate::{Client, ConnectError, ListRuns, Order, Registry, RunStatus, SharedStore};

/// The namespace of the probe run `doctor` creates and cancels; no worker should serve it.
pub const PROBE_NAMESPACE: &str = "tasks-doctor";

/// How long a notification may take to come back.
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Beyond this difference between the clocks, `doctor` warns.
const CLOCK_SKEW_WARNING: TimeDelta = TimeDelta::seconds(2);

/// How long a run may wait past its start time before `doctor` asks whether a worker is up.
const UNCLAIMED_WARNING: TimeDelta = TimeDelta::minutes(1);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
    Skip,
}

struct Report<'a, 'b> {
    out: Output<'a>,
    failed: &'b mut bool,
}

impl Report<'_, '_> {
    fn check(&mut self, verdict: Verdict, name: &str, detail: impl std::fmt::Display) {
        let label = match verdict {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
        };
        if verdict == Verdict::Fail {
            *self.failed = true;
        }
        let _ = writeln!(self.out, "{label:<5} {name:<14} {detail}");
        let _ = self.out.flush();
    }
}

/// Connects to `url` (migrating it), then runs every check.
pub(super) async fn doctor_url(
    url: &str,
    namespace: Option<&str>,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let started = Instant::now();
    let store = match crate::connect(url).await {
        Ok(store) => store,
        Err(ConnectError::Migration { backend, source }) => {
            let mut failed = false;
            let mut report = Report {
                out,
                failed: &mut failed,
            };
            report.check(
                Verdict::Ok,
                "connection",
                format!("{backend} store reached"),
            );
            report.check(Verdict::Fail, "schema", one_line(&source));
            return Exit::Failure;
        }
        Err(error @ ConnectError::Connect { .. }) => {
            let _ = writeln!(
                out,
                "{:<5} {:<14} {}",
                "FAIL",
                "connection",
                one_line(&error)
            );
            return connect_failed(&error, err);
        }
        Err(error) => return connect_failed(&error, err),
    };
    let connected_in = started.elapsed();
    let store = match namespace.map(|namespace| store.scoped(namespace)) {
        Some(Ok(scoped)) => scoped,
        Some(Err(error)) => return super::fail(err, Exit::Usage, &error),
        None => store,
    };
    let registry = match Registry::from_inventory() {
        Ok(registry) => registry,
        Err(error) => return super::fail(err, Exit::Failure, &error),
    };
    let client = Client::with_registry(store, Arc::new(registry));
    let schema = format!(
        "migrated on connect ({} ms); the database is not newer than this binary",
        connected_in.as_millis()
    );
    doctor(&client, Some(schema), out).await
}

/// Runs every check on `client`'s store; `schema` is the outcome of the schema check when
/// this command connected (and so migrated) itself.
pub(super) async fn doctor(client: &Client, schema: Option<String>, out: Output<'_>) -> Exit {
    let mut failed = false;
    let mut report = Report {
        out,
        failed: &mut failed,
    };
    let store = client.store();

    let started = Instant::now();
    let probe = ListRuns {
        limit: Some(1),
        ..ListRuns::default()
    };
    match store.contract().list_runs(probe).await {
        Ok(_) => report.check(
            Verdict::Ok,
            "connection",
            format!(
                "a query took {} ms (namespace {:?})",
                started.elapsed().as_millis(),
                store.namespace()
            ),
        ),
        Err(error) => {
            report.check(Verdict::Fail, "connection", one_line(&error));
            return Exit::Store;
        }
    }
    match schema {
        Some(schema) => report.check(Verdict::Ok, "schema", schema),
        None => report.check(
            Verdict::Skip,
            "schema",
            "the application opened the store; `migrate` checks and applies migrations",
        ),
    }

    notifications_and_clock(store, &mut report).await;
    workers(store, &mut report).await;

    let names: Vec<String> = client.registry().iter().map(|d| d.display_name()).collect();
    if names.is_empty() {
        report.check(Verdict::Warn, "workflows", "none linked into this binary");
    } else {
        report.check(
            Verdict::Ok,
            "workflows",
            format!("{} linked: {}", names.len(), names.join(", ")),
        );
    }
    if failed { Exit::Failure } else { Exit::Success }
}

/// The notification round trip and the clock comparison, both on a probe run.
async fn notifications_and_clock(store: &SharedStore, report: &mut Report<'_, '_>) {
    // A constant within the limits.
    let probe_store = match store.scoped(PROBE_NAMESPACE) {
        Ok(probe_store) => probe_store,
        Err(error) => {
            report.check(Verdict::Fail, "notifications", one_line(&error));
            return;
        }
    };
    let mut notifications = match probe_store.contract().subscribe().await {
        Ok(stream) => Some(stream),
        Err(error) => {
            report.check(
                Verdict::Fail,
                "notifications",
                format!("cannot subscribe: {}", one_line(&error)),
            );
            None
        }
    };
    let before = Utc::now();
    let sent = Instant::now();
    let run = match probe_store
        .contract()
        .create_run(CreateRun::new("tasks-doctor-probe"))
        .await
    {
        Ok(run) => run,
        Err(error) => {
            report.check(
                Verdict::Fail,
                "notifications",
                format!("cannot create the probe run: {}", one_line(&error)),
            );
            report.check(
                Verdict::Skip,
                "clock",
                "no probe run to read the database clock from",
            );
            return;
        }
    };
    let after = Utc::now();
    if let Some(stream) = notifications.as_mut() {
        let available = wait_for(stream, |n| matches!(n, Notification::RunAvailable { .. })).await;
        let available_in = sent.elapsed();
        let canceled = match probe_store.contract().lifecycle() {
            Ok(lifecycle) => lifecycle.cancel_run(run.id).await,
            Err(unsupported) => Err(unsupported),
        };
        let finished =
            match canceled {
                Ok(_) => wait_for(
                    stream,
                    |n| matches!(n, Notification::RunFinished { run_id, .. } if *run_id == run.id),
                )
                .await,
                Err(_) => false,
            };
        match (available, finished) {
            (true, true) => report.check(
                Verdict::Ok,
                "notifications",
                format!(
                    "run-available and run-finished received (first in {} ms)",
                    available_in.as_millis()
                ),
            ),
            (true, false) => report.check(
                Verdict::Fail,
                "notifications",
                "run-available received, run-finished not within 5 s",
            ),
            (false, _) => report.check(
                Verdict::Fail,
                "notifications",
                "no run-available notification within 5 s of creating a run",
            ),
        }
    } else {
        if let Ok(lifecycle) = probe_store.contract().lifecycle() {
            let _ = lifecycle.cancel_run(run.id).await;
        }
    }

    // The run's creation time is the database's clock, read between `before` and `after`.
    let midpoint = before + (after - before) / 2;
    let skew = run.created_at - midpoint;
    let uncertainty = (after - before) / 2;
    let detail = format!(
        "database clock {} this host's by {} (± {})",
        if skew < TimeDelta::zero() {
            "behind"
        } else {
            "ahead of"
        },
        format::duration(skew.abs()),
        format::duration(uncertainty)
    );
    let verdict = if skew.abs() > CLOCK_SKEW_WARNING + uncertainty {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    report.check(verdict, "clock", detail);
}

/// Waits up to [`NOTIFICATION_TIMEOUT`] for a notification matching `wanted`.
async fn wait_for(stream: &mut NotificationStream, wanted: impl Fn(&Notification) -> bool) -> bool {
    let wait = async {
        while let Some(notification) = stream.next().await {
            if wanted(&notification) {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(NOTIFICATION_TIMEOUT, wait)
        .await
        .unwrap_or(false)
}

/// Whether a worker serves the namespace, as far as the runs tell.
async fn workers(store: &SharedStore, report: &mut Report<'_, '_>) {
    let running = ListRuns {
        statuses: vec![RunStatus::Running],
        limit: Some(100),
        ..ListRuns::default()
    };
    let running = match store.contract().list_runs(running).await {
        Ok(page) => page.data,
        Err(error) => {
            report.check(Verdict::Fail, "worker", one_line(&error));
            return;
        }
    };
    let now = Utc::now();
    let live: Vec<_> = running
        .iter()
        .filter(|run| run.available_at.is_some_and(|lease| lease > now))
        .collect();
    if !live.is_empty() {
        let mut workers: Vec<&str> = live
            .iter()
            .filter_map(|run| run.worker_id.as_deref())
            .collect();
        workers.sort_unstable();
        workers.dedup();
        report.check(
            Verdict::Ok,
            "worker",
            format!(
                "{} run(s) running under a live lease, worker(s) {}",
                live.len(),
                workers.join(", ")
            ),
        );
        return;
    }
    let waiting = ListRuns {
        statuses: vec![RunStatus::Pending, RunStatus::Sleeping, RunStatus::Running],
        order: Order::Asc,
        limit: Some(100),
        ..ListRuns::default()
    };
    let overdue = match store.contract().list_runs(waiting).await {
        Ok(page) => page
            .data
            .into_iter()
            .filter(|run| {
                run.available_at
                    .is_none_or(|at| now - at > UNCLAIMED_WARNING)
            })
            .count(),
        Err(error) => {
            report.check(Verdict::Fail, "worker", one_line(&error));
            return;
        }
    };
    if overdue > 0 {
        report.check(
            Verdict::Warn,
            "worker",
            format!("{overdue} run(s) have waited over a minute past their start time: is a worker running on this namespace?"),
        );
    } else {
        report.check(
            Verdict::Skip,
            "worker",
            "no run is running or overdue; an idle worker leaves no trace in the store",
        );
    }
}
