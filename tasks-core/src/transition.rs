//! The state machine of runs and step attempts, defined once for every store.
//!
//! Every durable change of a run is a [`Transition`]: a constant that says which statuses it
//! may start from, whether the caller must hold the run's lease, which statuses mean "already
//! done" (an idempotent repeat), where it leaves the run ([`Landing`]: the target status,
//! the columns it clears and those it stamps with the store's clock), and what it announces
//! once committed: a wake-up for workers or a finish ([`Announce`]), and the status it
//! leaves the run in for waiters ([`Transition::announce_status`], [`WAITABLE`]). A store
//! renders each transition as one fenced statement in its own SQL dialect, with the fence
//! built by [`Transition::fence`] and the `SET` list by [`Landing::set_sql`], and hands a miss
//! to [`Transition::settle`], which is the only place that decides between
//! [`StoreError::RunNotFound`], [`StoreError::LeaseLost`], [`StoreError::WrongState`] and
//! "already done"; a store that writes in code applies the same landing
//! ([`Landing::apply`]). Step attempts whose run was paused or canceled while they ran are
//! classified by [`interrupted`] and [`explain_step_miss`]; the retry decision of a failed
//! run is [`retry_after`] and [`gives_up`], the attempt counting [`claimed_attempts`] and
//! [`released_attempts`], the claim's admission [`Admission`]: the stores only execute
//! them.
//!
//! # The fence is the claim
//!
//! A leased transition (a worker's write) is fenced by the claim its execution began with,
//! not by its worker id: every claim increments the run's claim epoch ([`claimed_epoch`],
//! in the claim's own statement), and the write carries a [`Holder`] (the worker id and
//! that epoch). [`Transition::fence`] renders `worker_id = $w AND claim_epoch = $e` beside
//! the statuses, [`Transition::admits`] checks the same in code, and a running run held by
//! any other claim (another worker's, or a later claim of the same worker) is
//! [`StoreError::LeaseLost`]. So an execution whose run was claimed again has every late
//! write refused by the store itself, whatever its process remembers.
//!
//! Statuses are the crate's own constants ([`RunStatus::as_str`]): they are rendered into the
//! statement text once, which keeps the partial claim indexes usable. Every value a caller
//! supplies is a bound parameter.
//!
//! # Adding a transition
//!
//! 1. Add its [`Operation`] (a description for errors and a verb for
//!    [`StoreError::WrongState`]).
//! 2. Define a `const` [`Transition`] in the submodule of its kind (see below): `from`,
//!    `leased`, `done`, `lands`, `announce`, `announce_status`; define its [`Landing`] in
//!    `landing` when none fits; name both in this module's re-exports. A unit test holds
//!    the announcements to the landings (a finish iff it may end the run, a status iff it
//!    may leave one a caller waits for).
//! 3. Add the method to the [`Store`](crate::Store) contract, documented with its errors.
//! 4. In each SQL store, render the statement's `SET` list with [`Landing::set_sql`] (the
//!    values of [`Landing::sets`] are the store's placeholders) and run it through the
//!    store's generic transition helper (`PgStore::transition` / `SqliteStore::transition`),
//!    which applies [`Transition::fence`], [`Transition::settle`] and
//!    [`Transition::announcements`]; in `tasks-memory`, apply it with [`Landing::apply`]
//!    in `MemoryStore::transition`.
//! 5. Add conformance cases to `tasks-conformance` (the `rules` cases check every landing
//!    with [`Landing::differs`]); the three stores run them.
//!
//! # Where the rules live
//!
//! This module holds the [`Transition`] type, its fence, the explanation of a miss and its
//! announcements; every rule below is named here too, so `transition::NAME` is the one path.
//!
//! - `runs`: the transitions of a run's life, from its claim to its end (and an operator's
//!   cancel, pause, resume, retry, fork and purge), with the retry decision [`retry_after`],
//!   the fork's boundary [`fork_boundary`], what a purge keeps ([`purgeable_family`],
//!   [`purgeable_with_parent`]) and unlinks ([`unlink_purged_run`], [`unlink_purged_step`]),
//!   and the heartbeat rows a heartbeat forgets ([`forgettable_worker`]).
//! - `landing`: where each transition leaves a run ([`Landing`], [`Column`]).
//! - `attempts`: how claims and releases count attempts ([`claimed_attempts`],
//!   [`released_attempts`], [`first_execution`]) and the deadline's give-up ([`gives_up`]),
//!   with their SQL.
//! - `claim`: which runs a claim takes, in SQL: [`PENDING_ORDER`], the slots of keys and
//!   queues, [`RateWindow`].
//! - `admission`: the same in plain Rust: the claim order and the admission walk
//!   ([`claimable`], [`Candidate`], [`Admission`], [`admit_in_order`]), which the in-memory
//!   store runs and
//!   the conformance suite holds the SQL claims to.
//! - `primitives`: events, published state, child runs (the parent's countdown
//!   [`parent_countdown`]) and schedules.
//! - `steps`: step attempts, [`interrupted`] and [`explain_step_miss`].
//!
//! The rules of the records themselves live beside them: the event wait
//! ([`events::wait_step`](crate::events::wait_step)), state versions
//! ([`state::next_version`](crate::state::next_version)), the schedule put and fence
//! ([`schedule::keeps_slot`](crate::schedule::keeps_slot),
//! [`schedule::fires`](crate::schedule::fires)), an idempotency key's lapse
//! ([`idempotency::KeyHold`](crate::idempotency::KeyHold)) and the retention turn
//! ([`retention::next_turn`](crate::retention::next_turn)).

use uuid::Uuid;

use crate::error::{Operation, StoreError, StoreResult};
use crate::holder::Holder;
use crate::model::{RunStatus, StepStatus, WorkflowRun};
use crate::store::notify::Notification;

use RunStatus::{Paused, Pending, Running, Sleeping};

mod admission;
mod attempts;
mod claim;
mod landing;
mod primitives;
mod runs;
mod steps;

pub use admission::{Admission, Candidate, ClaimOrder, admit_in_order, claimable, key_slots};
pub use attempts::{
    RELEASED_ATTEMPTS_SQL, claimed_attempts, claimed_attempts_sql, claimed_epoch,
    claimed_epoch_sql, claimed_started_at, claimed_started_at_sql, first_execution,
    first_execution_sql, gives_up, gives_up_sql, released_attempts,
};
pub use claim::{
    HOLDS_QUEUE_SLOT, HOLDS_SLOT, PENDING_ORDER, RateWindow, TAKES_QUEUE_SLOT, TAKES_SLOT,
    admitted, is_start, key_limit, keyed_candidates, pending_order, queue_slots_held,
    rate_starts_left_sql, rate_window_set_sql, slots_held,
};
pub use landing::{
    BACKED_OFF, CANCELED, CLAIMED, COMPLETED, CONTINUED, CREATED, Column, EXPIRED, FAILED_FOR_GOOD,
    Landing, PARKED_IN_SELECT, PARKED_ON_CHILDREN, PARKED_ON_EVENT, PAUSED, QUARANTINED, RELEASED,
    RESUMED, RETRIED, SLEEPING, either_set_sql,
};
pub use primitives::{
    CASCADE_FROM, FINISHED, SEND_EVENT, SET_STATE, START_CHILD, WAIT_ANY, WAIT_CHILDREN,
    WAIT_EVENT, WAKE_ON_EVENT, WAKE_PARENT, parent_countdown, schedule_fence, waits_on_topic,
    waits_on_topic_sql, wake_parent_set,
};
pub use runs::{
    CANCEL, CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, COMPLETE, CONTINUE, EXPIRE,
    EXTEND_LEASE, FAIL, FORK, JSON_COLUMNS, PAUSE, PURGE, QUARANTINE, RELEASE, RESUME, RETRY,
    SLEEP, deadline_error, forgettable_worker, forgettable_workers, fork_boundary,
    purgeable_family, purgeable_with_parent, quarantine_error, retry_after, stale_workers,
    unlink_purged_run, unlink_purged_step,
};
pub use steps::{
    COMPLETE_STEP, CREATE_STEP, MARKABLE_STEP, RECORD_STEP, explain_step_miss, interrupted,
    stored_again,
};

/// What a transition tells the subscribers of its namespace once it committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// Nothing: the run is not claimable now and did not finish.
    Nothing,
    /// The run is claimable now ([`Notification::RunAvailable`]).
    Available,
    /// The run finished, if the transition left it in a terminal status
    /// ([`Notification::RunFinished`]).
    Finished,
}

/// One change of a run's state.
#[derive(Debug)]
pub struct Transition {
    /// What it is, for errors.
    pub operation: Operation,
    /// The statuses the run may be in for the transition to apply.
    pub from: &'static [RunStatus],
    /// The caller must hold the run's lease: the run is running under the caller's claim
    /// ([`Holder`]: its worker id and its claim epoch).
    pub leased: bool,
    /// Statuses in which a repeat of the transition is already done: the run is returned as
    /// it is instead of an error.
    pub done: &'static [RunStatus],
    /// Where it may leave the run ([`Landing`]: status, cleared and stamped columns); empty
    /// when the run's status does not change. Two for a transition that decides in its
    /// statement ([`FAIL`]: [`FAILED_FOR_GOOD`] or [`BACKED_OFF`]).
    pub lands: &'static [Landing],
    /// What it announces after committing.
    pub announce: Announce,
    /// Whether it also announces the status it leaves the run in
    /// ([`Notification::StatusChanged`]), when that status is one a caller may wait for
    /// ([`WAITABLE`]).
    pub announce_status: bool,
}

/// The statuses announced by [`Notification::StatusChanged`], which a caller may wait for
/// (`RunHandle::wait_for_status`): every live status. Terminal statuses are announced by
/// [`Notification::RunFinished`].
pub const WAITABLE: &[RunStatus] = &[Pending, Running, Sleeping, Paused];

impl Transition {
    /// Whether the transition may end a run, and so must wake its parent ([`WAKE_PARENT`]) in
    /// the same statement or transaction when the run is a child that it left in one of the
    /// [`FINISHED`] statuses: every transition that announces a finish. This is the single
    /// rule every store applies (a completion, a failure for good, a cancel, a claim's
    /// deadline sweep [`EXPIRE`], a poison row's [`QUARANTINE`]); a parent parked in a join
    /// can rely on every way a child ends.
    pub fn wakes_parent(&self) -> bool {
        self.announce == Announce::Finished
    }

    /// A transition of a running run by the worker that holds its lease.
    const fn leased(operation: Operation) -> Self {
        Transition {
            operation,
            from: &[Running],
            leased: true,
            done: &[],
            lands: &[],
            announce: Announce::Nothing,
            announce_status: false,
        }
    }

    /// The statement condition on the run's status, and on its lease holder for a leased
    /// transition: `{alias}status IN ('running') AND {alias}worker_id = {worker_param}
    /// AND {alias}claim_epoch = {epoch_param}`. `alias` is a table alias with its dot (or
    /// empty), `worker_param` and `epoch_param` the placeholders (or column references) the
    /// caller binds the [`Holder`]'s worker id and claim epoch to; a transition that is not
    /// leased references neither. Statuses are rendered from [`RunStatus::as_str`].
    ///
    /// The claim epoch is what makes the fence a fence of the claim, not of the worker: a
    /// worker whose run was claimed again (even by itself) has the writes of its earlier
    /// execution refused.
    pub fn fence(&self, alias: &str, worker_param: &str, epoch_param: &str) -> String {
        let mut fence = status_in(alias, self.from);
        if self.leased {
            fence.push_str(&format!(
                " AND {alias}worker_id = {worker_param} AND {alias}claim_epoch = {epoch_param}"
            ));
        }
        fence
    }

    /// Whether the fence holds for `run` (for a store that checks it in code, under its
    /// write lock): its status, and for a leased transition its holder ([`Holder::holds`]).
    pub fn admits(&self, run: &WorkflowRun, holder: Option<&Holder>) -> bool {
        self.from.contains(&run.status)
            && (!self.leased || holder.is_some_and(|holder| holder.holds(run)))
    }

    /// The outcome of a transition whose fence matched no row, given the run as it is now
    /// (`None`: it does not exist in the namespace): the run itself when the transition is
    /// already done, otherwise why it cannot apply.
    pub fn settle(
        &self,
        run_id: Uuid,
        holder: Option<&Holder>,
        current: Option<WorkflowRun>,
    ) -> StoreResult<WorkflowRun> {
        match current {
            Some(run) if self.done.contains(&run.status) => Ok(run),
            current => Err(self.miss(run_id, holder, current.as_ref())),
        }
    }

    /// Why the transition did not apply, given the run as it is now (`None`: it does not
    /// exist in the namespace). For a transition that may be already done, use
    /// [`Transition::settle`].
    pub fn miss(
        &self,
        run_id: Uuid,
        holder: Option<&Holder>,
        current: Option<&WorkflowRun>,
    ) -> StoreError {
        match current {
            None => StoreError::RunNotFound { id: run_id },
            Some(run) => self.refusal(run_id, holder, run),
        }
    }

    /// Why the transition does not apply to `run`, which the fence refused: a running run
    /// that another claim holds (another worker's, or a later claim of the same worker) is
    /// [`StoreError::LeaseLost`]; any other status is [`StoreError::WrongState`].
    fn refusal(&self, run_id: Uuid, holder: Option<&Holder>, run: &WorkflowRun) -> StoreError {
        match holder {
            Some(holder) if self.leased && run.status == Running && !holder.holds(run) => {
                StoreError::LeaseLost {
                    id: run_id,
                    worker_id: holder.worker_id.clone(),
                    claim_epoch: holder.claim_epoch,
                }
            }
            _ => StoreError::WrongState {
                id: run_id,
                operation: self.operation,
                status: run.status,
            },
        }
    }

    /// The notifications to send once the transition that produced `run` committed: its
    /// wake-up or finish ([`Announce`]), then the status it left the run in when
    /// [`Transition::announce_status`] is set and the status is [`WAITABLE`].
    pub fn announcements(&self, run: &WorkflowRun) -> impl Iterator<Item = Notification> + use<> {
        let namespace = || run.namespace.clone();
        let wake_or_finish = match self.announce {
            Announce::Nothing => None,
            Announce::Available => Some(Notification::RunAvailable {
                namespace: namespace(),
            }),
            Announce::Finished if run.status.is_terminal() => Some(Notification::RunFinished {
                namespace: namespace(),
                run_id: run.id,
            }),
            Announce::Finished => None,
        };
        let status = (self.announce_status && WAITABLE.contains(&run.status)).then(|| {
            Notification::StatusChanged {
                namespace: namespace(),
                run_id: run.id,
                status: run.status,
            }
        });
        [wake_or_finish, status].into_iter().flatten()
    }
}

/// `{alias}status IN ('a', 'b')` for our own run statuses.
pub fn status_in(alias: &str, statuses: &[RunStatus]) -> String {
    names_in(alias, statuses.iter().map(|status| status.as_str()))
}

/// `{alias}status IN ('a', 'b')` for our own step statuses.
pub fn step_status_in(alias: &str, statuses: &[StepStatus]) -> String {
    names_in(alias, statuses.iter().map(|status| status.as_str()))
}

/// `{alias}status IN (..)` of status names, which are the crate's own constants.
fn names_in<'a>(alias: &str, names: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = names.map(|name| format!("'{name}'")).collect();
    format!("{alias}status IN ({})", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunStatus::Canceled;

    fn run(status: RunStatus, worker: Option<&str>) -> WorkflowRun {
        WorkflowRun::for_tests(status, worker.map(str::to_owned))
    }

    /// A run held by `worker` by the claim that left it at `epoch`.
    fn held(worker: &str, epoch: i64) -> WorkflowRun {
        let mut run = run(Running, Some(worker));
        run.claim_epoch = epoch;
        run
    }

    fn w(epoch: i64) -> Holder {
        Holder::new("w", epoch)
    }

    #[test]
    fn fences_render_statuses_and_the_lease_holder() {
        assert_eq!(
            COMPLETE.fence("wr.", "$3", "$4"),
            "wr.status IN ('running') AND wr.worker_id = $3 AND wr.claim_epoch = $4"
        );
        assert_eq!(
            CANCEL.fence("", "?3", "?4"),
            "status IN ('pending', 'running', 'sleeping', 'paused')"
        );
    }

    #[test]
    fn a_miss_is_explained_once_for_every_store() {
        let id = Uuid::now_v7();
        assert!(matches!(
            COMPLETE.settle(id, Some(&w(1)), None),
            Err(StoreError::RunNotFound { .. })
        ));
        assert!(matches!(
            COMPLETE.settle(id, Some(&w(1)), Some(held("other", 1))),
            Err(StoreError::LeaseLost { .. })
        ));
        // The same worker, by a later claim: the earlier claim's write is refused.
        assert!(matches!(
            COMPLETE.settle(id, Some(&w(1)), Some(held("w", 2))),
            Err(StoreError::LeaseLost { worker_id, claim_epoch: 1, .. }) if worker_id == "w"
        ));
        assert!(matches!(
            COMPLETE.settle(id, Some(&w(1)), Some(run(Paused, None))),
            Err(StoreError::WrongState {
                operation: Operation::CompleteRun,
                status: Paused,
                ..
            })
        ));
        // Operator transitions: a repeat is done, a terminal run is the wrong state.
        assert!(CANCEL.settle(id, None, Some(run(Canceled, None))).is_ok());
        assert!(
            RESUME
                .settle(id, None, Some(run(Running, Some("w"))))
                .is_ok()
        );
        assert!(matches!(
            PAUSE.settle(id, None, Some(run(RunStatus::Completed, None))),
            Err(StoreError::WrongState { .. })
        ));
    }

    #[test]
    fn admits_matches_the_fence() {
        assert!(COMPLETE.admits(&held("w", 3), Some(&w(3))));
        assert!(!COMPLETE.admits(&held("x", 3), Some(&w(3))));
        assert!(
            !COMPLETE.admits(&held("w", 4), Some(&w(3))),
            "a later claim"
        );
        assert!(!COMPLETE.admits(&held("w", 3), None));
        assert!(!COMPLETE.admits(&run(Sleeping, None), Some(&w(3))));
        assert!(CANCEL.admits(&run(Sleeping, None), None));
    }

    fn announced(transition: &Transition, run: &WorkflowRun) -> Vec<Notification> {
        transition.announcements(run).collect()
    }

    fn status_changed(run: &WorkflowRun) -> Notification {
        Notification::StatusChanged {
            namespace: run.namespace.clone(),
            run_id: run.id,
            status: run.status,
        }
    }

    #[test]
    fn announcements_follow_the_outcome() {
        let finished = run(RunStatus::Failed, None);
        assert_eq!(
            announced(&FAIL, &finished),
            [Notification::RunFinished {
                namespace: finished.namespace.clone(),
                run_id: finished.id,
            }],
            "a terminal status is announced as a finish only"
        );
        let retried = run(Pending, None);
        assert_eq!(announced(&FAIL, &retried), [status_changed(&retried)]);
        let resumed = run(Pending, None);
        assert_eq!(
            announced(&RESUME, &resumed),
            [
                Notification::RunAvailable {
                    namespace: resumed.namespace.clone()
                },
                status_changed(&resumed)
            ]
        );
    }

    #[test]
    fn every_waitable_status_is_announced_by_the_transitions_that_leave_it() {
        for (transition, status) in [
            (&SLEEP, Sleeping),
            (&WAIT_EVENT, Sleeping),
            (&WAIT_ANY, Sleeping),
            (&PAUSE, Paused),
            (&RESUME, Pending),
            (&RETRY, Pending),
            (&FAIL, Pending),
            (&RELEASE, Pending),
            (&CLAIM_PENDING, Running),
            (&CLAIM_EXPIRED, Running),
            (&CLAIM_DUE, Running),
            (&CLAIM_ORPHANED, Running),
        ] {
            let left = run(status, None);
            assert!(
                announced(transition, &left).contains(&status_changed(&left)),
                "{:?} leaving the run {status:?}",
                transition.operation
            );
        }
        // Not a status change a waiter could see, or announced as a finish.
        for (transition, status) in [
            (&EXTEND_LEASE, Running),
            (&WAKE_ON_EVENT, Sleeping),
            (&FORK, Pending),
            (&CANCEL, Canceled),
            (&COMPLETE, RunStatus::Completed),
        ] {
            let left = run(status, None);
            assert!(
                !announced(transition, &left)
                    .iter()
                    .any(|n| matches!(n, Notification::StatusChanged { .. })),
                "{:?}",
                transition.operation
            );
        }
    }

    #[test]
    fn every_way_a_run_ends_wakes_its_parent_and_is_announced() {
        for transition in [&COMPLETE, &FAIL, &CANCEL, &EXPIRE, &QUARANTINE] {
            assert!(transition.wakes_parent(), "{:?}", transition.operation);
            let ended = run(RunStatus::Failed, None);
            assert_eq!(
                announced(transition, &ended),
                [Notification::RunFinished {
                    namespace: ended.namespace.clone(),
                    run_id: ended.id,
                }],
                "{:?}",
                transition.operation
            );
        }
        for transition in [
            &SLEEP,
            &RELEASE,
            &PAUSE,
            &WAIT_CHILDREN,
            &WAIT_EVENT,
            &WAIT_ANY,
            &RETRY,
        ] {
            assert!(!transition.wakes_parent(), "{:?}", transition.operation);
        }
    }
}
