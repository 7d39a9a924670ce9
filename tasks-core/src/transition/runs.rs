//! The transitions of a run's life: a worker's writes under its lease, an operator's cancel,
//! pause, resume, retry, fork and purge, the claims (recovery of dead workers' runs
//! included), a poison row's quarantine and a deadline's expiry, and the retry decision of a
//! failed run.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

#[cfg(doc)]
use crate::error::StoreError;

use super::landing::{
    BACKED_OFF, CANCELED, CLAIMED, COMPLETED, CONTINUED, EXPIRED, FAILED_FOR_GOOD, PAUSED,
    QUARANTINED, RELEASED, RESUMED, RETRIED, SLEEPING,
};
use super::{Announce, Transition, WAITABLE, status_in};
use crate::error::Operation;
use crate::model::{RunStatus, StepAttempt, WorkflowRun};
use crate::retry::RetryPolicy;

use RunStatus::{Canceled, Paused, Pending, Running, Sleeping};

/// Extends the lease of a running run.
pub const EXTEND_LEASE: Transition = Transition::leased(Operation::ExtendLease);

/// Parks a running run until a given instant (a durable sleep, a long step backoff).
pub const SLEEP: Transition = Transition {
    lands: &[SLEEPING],
    announce_status: true,
    ..Transition::leased(Operation::SleepRun)
};

/// Completes a running run with its output.
pub const COMPLETE: Transition = Transition {
    lands: &[COMPLETED],
    announce: Announce::Finished,
    ..Transition::leased(Operation::CompleteRun)
};

/// Finishes a running run by continuing it as a new run ([`crate::continuation`]): the
/// successor is created in the same transaction. Refused for a child run (its parent waits
/// for its output), see [`crate::continuation::refusal`].
pub const CONTINUE: Transition = Transition {
    lands: &[CONTINUED],
    announce: Announce::Finished,
    ..Transition::leased(Operation::ContinueRun)
};

/// Fails an attempt of a running run: pending again after [`retry_after`], or failed for good.
pub const FAIL: Transition = Transition {
    lands: &[FAILED_FOR_GOOD, BACKED_OFF],
    announce: Announce::Finished,
    announce_status: true,
    ..Transition::leased(Operation::FailRun)
};

/// Gives a claimed run back without counting its attempt.
pub const RELEASE: Transition = Transition {
    lands: &[RELEASED],
    announce_status: true,
    ..Transition::leased(Operation::ReleaseRun)
};

/// Cancels a live run, for good. Repeating it is harmless.
pub const CANCEL: Transition = Transition {
    operation: Operation::CancelRun,
    from: &[Pending, Running, Sleeping, Paused],
    leased: false,
    done: &[Canceled],
    lands: &[CANCELED],
    announce: Announce::Finished,
    announce_status: false,
};

/// Pauses a live run until it is resumed. Repeating it is harmless.
pub const PAUSE: Transition = Transition {
    operation: Operation::PauseRun,
    from: &[Pending, Running, Sleeping],
    leased: false,
    done: &[Paused],
    lands: &[PAUSED],
    announce: Announce::Nothing,
    announce_status: true,
};

/// Makes a paused run pending again. Resuming a run that is not paused (any more) is
/// harmless while it is live.
pub const RESUME: Transition = Transition {
    operation: Operation::ResumeRun,
    from: &[Paused],
    leased: false,
    done: &[Pending, Running],
    lands: &[RESUMED],
    announce: Announce::Available,
    announce_status: true,
};

/// Runs a failed or canceled run again ([`LifecycleStore::retry_run`](crate::LifecycleStore::retry_run)):
/// pending now, with its output, error, worker and attempt counter cleared and
/// `retried_at` set, so that replay keeps its completed steps and forgets the step
/// failures recorded before. Not idempotent: every retry is a new execution, so a run that
/// is live again refuses a second retry ([`StoreError::WrongState`]).
pub const RETRY: Transition = Transition {
    operation: Operation::RetryRun,
    from: &[RunStatus::Failed, Canceled],
    leased: false,
    done: &[],
    lands: &[RETRIED],
    announce: Announce::Available,
    announce_status: true,
};

/// Forks a finished run ([`LifecycleStore::fork_run`](crate::LifecycleStore::fork_run)): the fence is on the
/// source run, which is only read; the new run is pending at once and announced. A live
/// run is refused: its history is still being written.
pub const FORK: Transition = Transition {
    operation: Operation::ForkRun,
    from: &[RunStatus::Completed, RunStatus::Failed, Canceled],
    leased: false,
    done: &[],
    lands: &[],
    announce: Announce::Available,
    // The new run is pending from its creation, like a started one: nobody waits on it yet.
    announce_status: false,
};

/// Deletes finished runs ([`RetentionStore::purge_runs`](crate::RetentionStore::purge_runs)): the fence of the
/// delete itself, so that a run that became live again (a retry) between a purge's selection
/// and its delete survives. Deleting announces nothing.
pub const PURGE: Transition = Transition {
    operation: Operation::PurgeRuns,
    from: &[RunStatus::Completed, RunStatus::Failed, Canceled],
    leased: false,
    done: &[],
    lands: &[],
    announce: Announce::Nothing,
    announce_status: false,
};

/// The purge's condition on a candidate run `{alias}` of the table `runs`: a child run is
/// kept while its parent is live, whatever its own age, because the parent may still join
/// it (the join reads the child's outcome from its row). Runs without a parent, and
/// children of finished or deleted parents, may go.
pub fn purgeable_family(alias: &str, runs: &str) -> String {
    format!(
        "({alias}parent_run_id IS NULL OR NOT EXISTS (
             SELECT 1 FROM {runs} parent
              WHERE parent.namespace = {alias}namespace AND parent.id = {alias}parent_run_id
                AND {live}))",
        live = status_in("parent.", WAITABLE),
    )
}

/// Claims pending runs whose `available_at` has passed. Claims take these after the runs of
/// dead workers ([`CLAIM_EXPIRED`], [`CLAIM_ORPHANED`]) and before sleeping runs whose
/// sleep is over ([`CLAIM_DUE`]). Every claimed run is announced running (for waiters;
/// workers do not wake on it), in the same batch as the claimer's other announcements.
pub const CLAIM_PENDING: Transition = Transition {
    operation: Operation::ClaimRuns,
    from: &[Pending],
    leased: false,
    done: &[],
    lands: &[CLAIMED],
    announce: Announce::Nothing,
    announce_status: true,
};

/// Claims running runs whose lease expired: their worker died, or stalled past its lease.
/// With [`CLAIM_ORPHANED`] this is recovery, and a claim takes these runs first, ahead of
/// every pending run: a run that was running when its worker died is the oldest work in
/// the system, so a backlog of new runs never delays it. Such a run already holds its key's
/// and its queue's slots, so taking it first never passes a limit.
pub const CLAIM_EXPIRED: Transition = Transition {
    from: &[Running],
    ..CLAIM_PENDING
};

/// Claims sleeping runs whose sleep is over (a durable sleep, an event wait that timed out
/// or was woken, a parent woken by its children). Claims take these after pending runs.
pub const CLAIM_DUE: Transition = Transition {
    from: &[Sleeping],
    ..CLAIM_PENDING
};

/// The second half of recovery ([`CLAIM_EXPIRED`]): running runs held by a worker whose
/// heartbeat row is stale (see [`stale_workers`]), claimable before their lease expires. A
/// worker without a heartbeat row is never stale: its runs wait for their lease. The
/// claiming worker never takes its own runs this way (it is executing them), and the claim
/// writes its own worker id and a new claim epoch, so every later write of the stale worker
/// misses the fence ([`StoreError::LeaseLost`]).
pub const CLAIM_ORPHANED: Transition = Transition {
    from: &[Running],
    ..CLAIM_PENDING
};

/// Fails for good a run the claiming worker just took whose stored row cannot be decoded (a
/// "poison row"): its undecodable JSON columns are moved, as text, into the error record
/// ([`quarantine_error`]), so the row reads again and the claim goes on with the others.
/// Fenced like a worker's own write: only while the run is running under the claimer.
pub const QUARANTINE: Transition = Transition {
    lands: &[QUARANTINED],
    announce: Announce::Finished,
    ..Transition::leased(Operation::ClaimRuns)
};

/// The JSON columns of a run that a quarantine may move into the error record, with what
/// the column is reset to: `config` is required (an empty object), the others become SQL
/// NULL. Our own constants, rendered into statements.
pub const JSON_COLUMNS: &[(&str, &str)] = &[
    ("config", "'{}'"),
    ("context", "NULL"),
    ("input", "NULL"),
    ("output", "NULL"),
    ("error", "NULL"),
];

/// The stale workers of a namespace, in SQL: `SELECT worker_id` of the heartbeat rows in
/// `workers_table` of namespace `namespace` (a placeholder) whose `stale_at` is at or before
/// `now` (a SQL expression: the database clock). Both stores' claims take running runs whose
/// `worker_id` is in this set ([`CLAIM_ORPHANED`]).
///
/// Every heartbeat forgets the stale rows of its namespace whose worker holds no running run
/// any more ([`forgettable_workers`]): a stale row lives only until the dead worker's runs
/// are claimed, so the set stays as small as the number of workers that just died.
pub fn stale_workers(workers_table: &str, namespace: &str, now: &str) -> String {
    format!(
        "SELECT w.worker_id FROM {workers_table} w
          WHERE w.namespace = {namespace} AND w.stale_at <= {now}"
    )
}

/// The condition, in SQL, under which the heartbeat row aliased `w` may be forgotten: it is
/// stale at `now` and its worker holds no running run in `runs_table`.
pub fn forgettable_workers(runs_table: &str, now: &str) -> String {
    format!(
        "w.stale_at <= {now} AND NOT EXISTS (
             SELECT 1 FROM {runs_table} wr
              WHERE wr.namespace = w.namespace AND wr.worker_id = w.worker_id AND {running})",
        running = status_in("wr.", CLAIM_ORPHANED.from),
    )
}

/// The error a quarantine records on a run whose stored row cannot be decoded; the store
/// adds the moved columns under `quarantined`.
pub fn quarantine_error(run_id: Uuid, reason: &str) -> Value {
    serde_json::json!({
        "message": format!("the stored row of workflow run {run_id} cannot be decoded: {reason}"),
        "kind": "corrupt",
        "retryable": false,
        "run_id": run_id,
    })
}

/// Fails runs whose deadline passed before they finished (done by every claim, for the
/// runs of its namespace). Like every finishing transition it wakes the parent of a child
/// it fails ([`Transition::wakes_parent`]) and announces the finish: the claim statements
/// return the runs they expired beside the runs they claimed.
///
/// A claim never waits for a lock to expire a run: a run, or the parent of a child, that
/// another transaction holds is left for a later claim (Postgres `SKIP LOCKED`; SQLite's
/// write lock serializes everything anyway). A child is expired only together with its
/// parent's countdown, so a parent parking at that moment cannot miss the wake-up.
pub const EXPIRE: Transition = Transition {
    operation: Operation::ClaimRuns,
    from: &[Pending, Running, Sleeping],
    leased: false,
    done: &[],
    lands: &[EXPIRED],
    announce: Announce::Finished,
    announce_status: false,
};

/// When a failed attempt of `run` is retried: `None` means fail for good (forced, or the
/// run's retry policy has no attempts left), else the delay from now. The store still gives
/// up when the retry would start at or after the run's deadline, by its own clock.
pub fn retry_after(run: &WorkflowRun, force: bool) -> Option<Duration> {
    if force {
        return None;
    }
    let policy = RetryPolicy::from_run_config(&run.config);
    let attempt = u32::try_from(run.attempts.max(1)).unwrap_or(1);
    policy.delay_after(attempt)
}

/// The error a claim records on runs whose deadline passed.
pub fn deadline_error() -> Value {
    serde_json::json!({
        "message": "Workflow run deadline exceeded",
        "kind": "deadline",
        "retryable": false,
    })
}

/// How many of a run's step attempts (oldest first, by step name) a fork from `from_step`
/// copies: those before the first attempt of `from_step`; `None` when the run has no such
/// attempt ([`StoreError::UnknownStep`]).
pub fn fork_boundary<'a>(
    attempts: impl IntoIterator<Item = &'a str>,
    from_step: &str,
) -> Option<usize> {
    attempts.into_iter().position(|name| name == from_step)
}

/// [`purgeable_family`] for a store that checks it in code: whether a finished run whose
/// parent is in `parent` (`None`: it has none, or its parent is gone) may be purged.
pub fn purgeable_with_parent(parent: Option<RunStatus>) -> bool {
    parent.is_none_or(|status| !WAITABLE.contains(&status))
}

/// What a purge clears in a run it keeps: the links to the runs and step attempts it
/// deletes (`purged_run`, `purged_step`). A fork keeps `forked_from_step` but forgets
/// `forked_from_run_id`; a child started by a step of a purged run forgets that step.
pub fn unlink_purged_run(
    run: &mut WorkflowRun,
    purged_run: impl Fn(Uuid) -> bool,
    purged_step: impl Fn(Uuid) -> bool,
) {
    if run.forked_from_run_id.is_some_and(&purged_run) {
        run.forked_from_run_id = None;
    }
    if run.parent_step_attempt_id.is_some_and(purged_step) {
        run.parent_step_attempt_namespace = None;
        run.parent_step_attempt_id = None;
    }
}

/// What a purge clears in a step attempt it keeps: the child run it started, when the
/// purge deletes that child.
pub fn unlink_purged_step(step: &mut StepAttempt, purged_run: impl Fn(Uuid) -> bool) {
    if step.child_workflow_run_id.is_some_and(purged_run) {
        step.child_workflow_run_namespace = None;
        step.child_workflow_run_id = None;
    }
}

/// [`forgettable_workers`] for a store that checks it in code: whether a heartbeat row
/// stale at `stale_at` may be forgotten at `now`, given whether its worker still holds a
/// running run.
pub fn forgettable_worker(
    stale_at: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
    holds_running: bool,
) -> bool {
    stale_at <= now && !holds_running
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::StoreError;
    use crate::store::notify::Notification;

    fn run(status: RunStatus, worker: Option<&str>) -> WorkflowRun {
        WorkflowRun::for_tests(status, worker.map(str::to_owned))
    }

    #[test]
    fn only_failed_or_canceled_runs_are_retried() {
        let id = Uuid::now_v7();
        assert!(RETRY.admits(&run(RunStatus::Failed, None), None));
        assert!(RETRY.admits(&run(Canceled, None), None));
        for status in [Pending, Running, Sleeping, Paused, RunStatus::Completed] {
            assert!(!RETRY.admits(&run(status, None), None));
            assert!(matches!(
                RETRY.settle(id, None, Some(run(status, None))),
                Err(StoreError::WrongState {
                    operation: Operation::RetryRun,
                    ..
                })
            ));
        }
        assert!(matches!(
            RETRY.announcements(&run(Pending, None)).next(),
            Some(Notification::RunAvailable { .. })
        ));
    }

    #[test]
    fn only_finished_runs_are_forked() {
        let id = Uuid::now_v7();
        for status in [RunStatus::Completed, RunStatus::Failed, Canceled] {
            assert!(FORK.admits(&run(status, None), None));
        }
        for status in [Pending, Running, Sleeping, Paused] {
            assert!(matches!(
                FORK.settle(id, None, Some(run(status, None))),
                Err(StoreError::WrongState {
                    operation: Operation::ForkRun,
                    ..
                })
            ));
        }
        assert!(matches!(
            FORK.settle(id, None, None),
            Err(StoreError::RunNotFound { .. })
        ));
    }

    #[test]
    fn only_terminal_runs_are_purged() {
        for status in RunStatus::ALL {
            assert_eq!(PURGE.from.contains(&status), status.is_terminal());
        }
        assert_eq!(
            PURGE.fence("r.", "NULL", "NULL"),
            "r.status IN ('completed', 'failed', 'canceled')"
        );
        assert_eq!(
            PURGE.announcements(&run(RunStatus::Failed, None)).next(),
            None
        );
    }

    #[test]
    fn retries_follow_the_stored_policy() {
        let mut failing = run(Running, Some("w"));
        failing.config = serde_json::json!({ "retryPolicy": RetryPolicy::new(3)
            .with_initial_interval(Duration::from_millis(250))
            .with_backoff_coefficient(3.0) });
        failing.attempts = 1;
        assert_eq!(
            retry_after(&failing, false),
            Some(Duration::from_millis(250))
        );
        failing.attempts = 2;
        assert_eq!(
            retry_after(&failing, false),
            Some(Duration::from_millis(750))
        );
        failing.attempts = 3;
        assert_eq!(retry_after(&failing, false), None);
        failing.attempts = 1;
        assert_eq!(retry_after(&failing, true), None);
        // No policy stored: the default for runs.
        failing.config = serde_json::json!({});
        assert_eq!(retry_after(&failing, false), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_fork_copies_what_came_before_the_first_attempt_of_its_step() {
        let names = ["a", "b", "c:1", "b", "c"];
        assert_eq!(fork_boundary(names, "b"), Some(1));
        assert_eq!(fork_boundary(names, "a"), Some(0));
        assert_eq!(fork_boundary(names, "c"), Some(4));
        assert_eq!(fork_boundary(names, "d"), None);
    }

    #[test]
    fn a_purge_keeps_children_of_live_parents_and_forgets_links_to_what_it_deletes() {
        assert!(purgeable_with_parent(None));
        for status in RunStatus::ALL {
            assert_eq!(purgeable_with_parent(Some(status)), status.is_terminal());
        }
        let (gone, kept) = (Uuid::now_v7(), Uuid::now_v7());
        let mut fork = run(RunStatus::Completed, None);
        fork.forked_from_run_id = Some(gone);
        fork.forked_from_step = Some("b".into());
        fork.parent_step_attempt_id = Some(kept);
        fork.parent_step_attempt_namespace = Some("n".into());
        unlink_purged_run(&mut fork, |id| id == gone, |id| id == gone);
        assert_eq!(fork.forked_from_run_id, None);
        assert_eq!(fork.forked_from_step.as_deref(), Some("b"));
        assert_eq!(fork.parent_step_attempt_id, Some(kept));
        unlink_purged_run(&mut fork, |_| false, |id| id == kept);
        assert_eq!(
            (
                fork.parent_step_attempt_id,
                fork.parent_step_attempt_namespace
            ),
            (None, None)
        );
    }

    #[test]
    fn only_stale_rows_without_runs_are_forgotten() {
        let now = chrono::Utc::now();
        assert!(forgettable_worker(now, now, false));
        assert!(!forgettable_worker(now, now, true));
        assert!(!forgettable_worker(
            now + chrono::TimeDelta::seconds(1),
            now,
            false
        ));
    }
}
