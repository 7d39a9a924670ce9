//! `runs watch`: follows a run until it ends.
//!
//! A finished run and a change of its status are announced by the store
//! ([`Notification::RunFinished`], [`Notification::StatusChanged`]), and the run is shown
//! again at once; finished steps are not announced, so between notifications the run is
//! also refreshed every `interval`.

use std::collections::HashSet;
use std::time::Duration;

use crate::uuid::Uuid;
use futures::StreamExt as _;

use super::runs::{attempt_numbers, error_text, fetch, step_duration, workflow_of};
use super::{Exit, Output};
use crate::store::{Notification, NotificationStream};
use crate::{Client, RunStatus, StepStatus};

pub(super) async fn watch(
    client: &Client,
    id: Uuid,
    interval: Duration,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let interval = interval.max(Duration::from_millis(50));
    // Without notifications the refresh alone still gets there.
    let mut notifications = client.store().contract().subscribe().await.ok();
    let mut printed: HashSet<Uuid> = HashSet::new();
    let mut last_status: Option<RunStatus> = None;
    let mut announced_running: HashSet<Uuid> = HashSet::new();
    loop {
        let (run, steps) = match fetch(client, id, err).await {
            Ok(found) => found,
            Err(exit) => return exit,
        };
        if last_status.is_none() {
            let _ = writeln!(out, "watching run {} of {}", run.id, workflow_of(&run));
        }
        for (step, attempt) in steps.iter().zip(attempt_numbers(&steps)) {
            if step.status == StepStatus::Running {
                if announced_running.insert(step.id) {
                    let _ = writeln!(
                        out,
                        "      … {} running (attempt {attempt})",
                        step.step_name
                    );
                }
                continue;
            }
            if !printed.insert(step.id) {
                continue;
            }
            let mark = match step.status {
                StepStatus::Completed => "✓",
                StepStatus::Failed => "✗",
                _ => "■",
            };
            let error = step
                .error
                .as_ref()
                .map(|error| format!(": {}", error_text(error)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "[{:>3}] {mark} {} {} in {} (attempt {attempt}){error}",
                printed.len(),
                step.step_name,
                step.status,
                step_duration(step),
            );
        }
        if last_status != Some(run.status) {
            let _ = writeln!(out, "run is {}", run.status);
            last_status = Some(run.status);
        }
        let _ = out.flush();
        match run.status {
            RunStatus::Completed => {
                let output = run.output.map(|o| o.to_string()).unwrap_or_default();
                let _ = writeln!(out, "completed after {} step(s): {output}", printed.len());
                return Exit::Success;
            }
            RunStatus::Failed => {
                let error = run.error.as_ref().map(error_text).unwrap_or_default();
                let _ = writeln!(out, "failed: {error}");
                return Exit::Failure;
            }
            RunStatus::Canceled => return Exit::Failure,
            _ => {}
        }
        let _ = tokio::time::timeout(interval, changed(&mut notifications, id)).await;
    }
}

/// Waits for a notification that `id` finished or changed its status, or that
/// notifications were lost.
async fn changed(notifications: &mut Option<NotificationStream>, id: Uuid) {
    let Some(stream) = notifications.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match stream.next().await {
            Some(
                Notification::RunFinished { run_id, .. }
                | Notification::StatusChanged { run_id, .. },
            ) if run_id == id => return,
            Some(Notification::Missed { .. }) => return,
            Some(_) => {}
            None => {
                *notifications = None;
                return std::future::pending().await;
            }
        }
    }
}
