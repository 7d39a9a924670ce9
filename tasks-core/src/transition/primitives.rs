//! The transitions of the durable primitives: events sent to a run and its waits for them,
//! published state, child runs and their joins, and the fence of a schedule's firing.

#[cfg(doc)]
use crate::store::notify::Notification;

use super::landing::{PARKED_IN_SELECT, PARKED_ON_CHILDREN, PARKED_ON_EVENT};
use super::runs::CANCEL;
use super::{Announce, Transition, status_in};
use crate::error::Operation;
use crate::model::RunStatus;

use RunStatus::{Canceled, Paused, Pending, Running, Sleeping};

// ---- Events sent to a run ----

/// Sends an event to a live run. The run is locked first; a terminal run refuses it and
/// nothing is stored. What it announces is [`WAKE_ON_EVENT`]'s.
pub const SEND_EVENT: Transition = Transition {
    operation: Operation::SendEvent,
    from: &[Pending, Running, Sleeping, Paused],
    leased: false,
    done: &[],
    lands: &[],
    announce: Announce::Nothing,
    announce_status: false,
};

/// The half of a send that wakes the run: a run sleeping with `wait_topic` equal to the
/// event's topic becomes available now (`available_at` = the store's clock), and the wake-up
/// is announced so that an idle worker claims it without polling. A run sleeping for another
/// reason (a durable sleep, a retry backoff, a wait on another topic) is left alone. The run
/// stays sleeping until a worker claims it, so no status change is announced.
pub const WAKE_ON_EVENT: Transition = Transition {
    operation: Operation::SendEvent,
    from: &[Sleeping],
    leased: false,
    done: &[],
    lands: &[],
    announce: Announce::Available,
    announce_status: false,
};

/// [`WAKE_ON_EVENT`]'s condition on the run's `wait_topic`, in SQL, with `topic` the
/// placeholder bound to the event's topic: the run waits on that topic, or it is parked in
/// a select over several topics ([`ANY_TOPIC`](crate::select::ANY_TOPIC)).
pub fn waits_on_topic_sql(topic: &str) -> String {
    format!(
        "wait_topic IN ({topic}, '{any}')",
        any = crate::select::ANY_TOPIC
    )
}

/// [`waits_on_topic_sql`] in code: whether a run whose `wait_topic` is `wait_topic` is
/// woken by an event on `topic`.
pub fn waits_on_topic(wait_topic: Option<&str>, topic: &str) -> bool {
    wait_topic.is_some_and(|waits| waits == topic || waits == crate::select::ANY_TOPIC)
}

/// An event wait of a running run by its worker: consumes an event, times out, or parks the
/// run (`status` sleeping until the timeout, `worker_id` cleared, `wait_topic` set). Every
/// outcome that ends the wait clears `wait_topic`, so a later durable sleep is not woken by
/// a send. Only the parking write announces (the run sleeping); the others leave the run
/// running and announce nothing.
pub const WAIT_EVENT: Transition = Transition {
    lands: &[PARKED_ON_EVENT],
    announce_status: true,
    ..Transition::leased(Operation::WaitForEvent)
};

// ---- Published state ----

/// A publication of state by a running run's worker: the step attempt (kind state,
/// completed) and the new value of (run, key), its version one more than before, in one
/// transaction that first locks the run, fenced on the lease. A repeat of the same step
/// (a replay) writes nothing. The run's status does not change, so it announces no status;
/// the store announces the new version itself ([`Notification::StateChanged`]).
pub const SET_STATE: Transition = Transition::leased(Operation::SetState);

// ---- Child workflows ----

/// Starts a child run from a step of a running run, by its worker: the step attempt (kind
/// child) and the child run (pending, announced) in one transaction fenced on the parent's
/// lease. A repeat of the same step returns the first child.
pub const START_CHILD: Transition = Transition {
    announce: Announce::Available,
    ..Transition::leased(Operation::StartChild)
};

/// A wait of a running run for some of its children, by its worker: completes the steps of
/// the children that finished, and parks the run (sleeping until [`limits::LATEST`], no
/// worker, `awaiting_children` set to the number still live) while any is live.
///
/// [`limits::LATEST`]: crate::limits::LATEST
/// A parked run is announced sleeping, like a durable sleep.
pub const WAIT_CHILDREN: Transition = Transition {
    lands: &[PARKED_ON_CHILDREN],
    announce_status: true,
    ..Transition::leased(Operation::WaitForChildren)
};

// ---- Selects ----

/// The look of a select of a running run by its worker
/// ([`SelectStore::wait_for_any`](crate::SelectStore::wait_for_any)): leaves the run running
/// when something is ready (clearing `wait_topic` and `awaiting_children`), or parks it
/// (sleeping until the earliest timer, no worker, on its topics and children). Only the
/// parking write announces (the run sleeping), like an event wait's.
pub const WAIT_ANY: Transition = Transition {
    lands: &[PARKED_IN_SELECT],
    announce_status: true,
    ..Transition::leased(Operation::WaitForAny)
};

/// The half of a child's completion, failure for good or cancel that wakes its parent, in
/// the child's own statement or transaction: the parent's `awaiting_children` goes down by
/// one, and when that brings it to zero while the parent is parked (sleeping), the parent
/// becomes available now and is announced. The parent row is written (and locked) whatever
/// its state, so that a parent parking at the same moment serializes with the child.
pub const WAKE_PARENT: Transition = Transition {
    operation: Operation::WaitForChildren,
    from: &[Sleeping],
    leased: false,
    done: &[],
    lands: &[],
    announce: Announce::Available,
    // The parent stays sleeping, claimable now, as when a sleep ends.
    announce_status: false,
};

/// The `SET` list of [`WAKE_PARENT`] on the parent row (table alias `alias`, with its dot,
/// or empty), with `now` the SQL expression of the store's clock and `ended` the SQL
/// expression of how many of its children just ended (`1` for a single child's
/// transition; a claim may expire several children of one parent at once). The countdown
/// stops at zero; the parent is woken when it reaches zero from above while parked.
pub fn wake_parent_set(alias: &str, now: &str, ended: &str) -> String {
    format!(
        "awaiting_children = CASE WHEN {alias}awaiting_children > {ended}
                                  THEN {alias}awaiting_children - {ended} ELSE 0 END,
         available_at = CASE WHEN {alias}awaiting_children BETWEEN 1 AND {ended} AND {parked}
                             THEN {now} ELSE {alias}available_at END",
        parked = status_in(alias, WAKE_PARENT.from),
    )
}

/// The statuses of a child whose end wakes its parent: the terminal ones.
pub const FINISHED: &[RunStatus] = &[RunStatus::Completed, RunStatus::Failed, Canceled];

/// The live statuses a parent's cancel takes its cascading descendants from ([`CANCEL`]'s).
pub const CASCADE_FROM: &[RunStatus] = CANCEL.from;

// Schedules.

/// The fence of a schedule's firing, in SQL: the schedule is not paused and its `next_slot`
/// is still `slot` (a placeholder bound to the slot the firer read). A firing moves
/// `next_slot` past the slots it fires and creates their runs in the same transaction, so of
/// the firers that read one slot, exactly one passes this fence; the others create nothing
/// ([`ScheduleStore::fire_schedule`](crate::ScheduleStore::fire_schedule) returns `None`). Which slots fire
/// is decided before, in Rust, by the schedule's catch-up policy (`schedule::plan`); the
/// runs a firing creates are pending now, like any created run.
pub fn schedule_fence(slot: &str) -> String {
    format!("NOT paused AND next_slot = {slot}")
}

/// [`WAKE_PARENT`] (the rule [`wake_parent_set`] renders) on a parent that waits for
/// `awaiting` children and is in `status`, when `ended` of its children just ended: the
/// children it still waits for (stopping at zero), and whether it wakes, which it does when
/// the count reaches zero from above while it is parked.
pub fn parent_countdown(awaiting: u32, status: RunStatus, ended: u32) -> (u32, bool) {
    let parked = WAKE_PARENT.from.contains(&status);
    let wakes = (1..=ended).contains(&awaiting) && parked;
    (awaiting.saturating_sub(ended), wakes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkflowRun;
    use crate::store::notify::Notification;

    fn run(status: RunStatus, worker: Option<&str>) -> WorkflowRun {
        WorkflowRun::for_tests(status, worker.map(str::to_owned))
    }

    #[test]
    fn a_send_wakes_a_wait_on_its_topic_or_on_any() {
        assert!(waits_on_topic(Some("a"), "a"));
        assert!(waits_on_topic(Some(""), "a"));
        assert!(!waits_on_topic(Some("b"), "a"));
        assert!(!waits_on_topic(None, "a"));
        assert_eq!(waits_on_topic_sql("$3"), "wait_topic IN ($3, '')");
    }

    #[test]
    fn the_parent_wake_renders_once() {
        let set = wake_parent_set("p.", "now()", "1");
        assert!(set.contains("p.awaiting_children BETWEEN 1 AND 1 AND p.status IN ('sleeping')"));
        assert!(set.contains("THEN p.awaiting_children - 1 ELSE 0 END"));
        assert!(set.contains("THEN now() ELSE p.available_at END"));
        let holder = crate::Holder::new("w", 0);
        assert!(START_CHILD.admits(&run(Running, Some("w")), Some(&holder)));
        assert!(!WAIT_CHILDREN.admits(&run(Sleeping, None), Some(&holder)));
        let woken: Vec<_> = WAKE_PARENT.announcements(&run(Sleeping, None)).collect();
        assert!(
            matches!(woken[..], [Notification::RunAvailable { .. }]),
            "{woken:?}"
        );
        let parked: Vec<_> = WAIT_CHILDREN.announcements(&run(Sleeping, None)).collect();
        assert!(
            matches!(
                parked[..],
                [Notification::StatusChanged {
                    status: Sleeping,
                    ..
                }]
            ),
            "{parked:?}"
        );
        for status in FINISHED {
            assert!(status.is_terminal());
        }
    }

    #[test]
    fn the_schedule_fence_renders_once() {
        assert_eq!(schedule_fence("$3"), "NOT paused AND next_slot = $3");
    }

    #[test]
    fn a_parked_parent_wakes_with_its_last_child() {
        assert_eq!(parent_countdown(2, Sleeping, 1), (1, false));
        assert_eq!(parent_countdown(1, Sleeping, 1), (0, true));
        assert_eq!(parent_countdown(2, Sleeping, 3), (0, true));
        // Not parked (still running, say): counted down, not woken.
        assert_eq!(parent_countdown(1, Running, 1), (0, false));
        // Waiting for none: stays at zero, not woken again.
        assert_eq!(parent_countdown(0, Sleeping, 1), (0, false));
    }
}
