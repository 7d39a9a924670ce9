//! Claims: the deadline sweep, the candidates of a claim and their admission, and whether a
//! worker still holds a running run (what lets a claim take the runs of a dead worker).

use crate::children::wake_parent;
use crate::tables::{Row, Space, Tx};
use chrono::{DateTime, Utc};
use tasks_core::queue::ClaimFilter;
use tasks_core::store::{ClaimedRun, Notification};
use tasks_core::transition::{
    Admission, CLAIM_ORPHANED, CLAIMED, Candidate, EXPIRE, EXPIRED, admit_in_order, claimable,
    claimed_attempts, claimed_epoch, claimed_started_at, deadline_error, first_execution,
};
use uuid::Uuid;

/// Fails the runs whose deadline passed ([`EXPIRE`]), waking their parents, and announces
/// their finish.
pub(crate) fn expire(tx: &mut Tx<'_>) {
    let now = tx.now;
    let expired: Vec<Uuid> = tx
        .space
        .runs
        .values()
        .filter(|row| EXPIRE.from.contains(&row.run.status))
        .filter(|row| row.run.deadline_at.is_some_and(|deadline| deadline <= now))
        .map(|row| row.run.id)
        .collect();
    for id in expired {
        let Some(row) = tx.space.runs.get_mut(&id) else {
            continue;
        };
        let run = &mut row.run;
        EXPIRED.apply(run, now);
        run.error = Some(deadline_error());
        run.updated_at = now;
        let parent = run.parent_run_id;
        tx.notes.push(Notification::RunFinished {
            namespace: tx.namespace.to_owned(),
            run_id: id,
        });
        if let Some(parent) = parent.filter(|_| EXPIRE.wakes_parent()) {
            let woken = wake_parent(tx.space, parent, now, tx.namespace);
            tx.notes.push(woken);
        }
    }
}

/// The runs a claim takes, in claim order: the candidates that fit their keys' and queues'
/// slots and rate windows, up to `limit`. Counts their starts in the rate windows.
pub(crate) fn admit(
    space: &mut Space,
    worker_id: &str,
    now: DateTime<Utc>,
    limit: u32,
    filter: &ClaimFilter,
) -> Vec<Uuid> {
    let candidates = candidates(space, worker_id, now, filter);
    let holders = space
        .runs
        .values()
        .map(|row| (row.run.status, row.key(), row.run.queue.as_str()));
    let mut admission = Admission::new(now, space.queues.values(), holders, &space.key_windows);
    let taken = admit_in_order(candidates, &mut admission, limit);
    let (queue_windows, key_windows) = admission.into_windows();
    for (name, window) in queue_windows {
        if let Some(queue) = space.queues.get_mut(&name) {
            queue.window_start = window.start;
            queue.window_starts = window.starts;
        }
    }
    space.key_windows = key_windows;
    taken
}

/// Claims `row` for `worker_id` until `lease_end`, by a new claim epoch: a claim counts an
/// attempt, except waking from a sleep, which continues the attempt; the first claim sets
/// `started_at`.
pub(crate) fn start(
    row: &mut Row,
    worker_id: &str,
    lease_end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ClaimedRun {
    let run = &mut row.run;
    let attempts = claimed_attempts(run.status, run.attempts);
    CLAIMED.apply(run, now);
    run.worker_id = Some(worker_id.to_owned());
    run.claim_epoch = claimed_epoch(run.claim_epoch);
    run.available_at = Some(lease_end);
    run.attempts = attempts;
    run.started_at = claimed_started_at(run.started_at, now);
    run.updated_at = now;
    ClaimedRun {
        run: run.clone(),
        first_execution: first_execution(run, now),
    }
}

/// The runs a claim by `worker_id` at `now` may take ([`claimable`]), in no order, of the
/// queues and workflows `filter` admits.
fn candidates(
    space: &Space,
    worker_id: &str,
    now: DateTime<Utc>,
    filter: &ClaimFilter,
) -> Vec<Candidate> {
    let stale = |worker: &str| {
        space
            .workers
            .get(worker)
            .is_some_and(|heartbeat| heartbeat.stale_at <= now)
    };
    space
        .runs
        .values()
        .filter(|row| {
            claimable(&row.run, worker_id, stale, now)
                && filter.admits(&row.run.queue, &row.run.workflow_name)
        })
        .map(|row| {
            let key = row
                .concurrency
                .as_ref()
                .map(|concurrency| (concurrency.key().to_owned(), concurrency.limit()));
            Candidate::of(&row.run, row.priority, key)
        })
        .collect()
}

/// Whether `worker` holds a running run (`transition::forgettable_workers`).
pub(crate) fn holds_running(runs: &std::collections::BTreeMap<Uuid, Row>, worker: &str) -> bool {
    runs.values().any(|row| {
        CLAIM_ORPHANED.from.contains(&row.run.status)
            && row.run.worker_id.as_deref() == Some(worker)
    })
}
