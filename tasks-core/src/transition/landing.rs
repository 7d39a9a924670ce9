//! Where a transition leaves a run: its target status, the columns it clears, the columns
//! it stamps with the store's clock and the columns whose values the store supplies
//! ([`Landing`]).
//!
//! A SQL store renders a landing's `SET` list with [`Landing::set_sql`] (or
//! [`either_set_sql`] for a transition that decides between two landings in its
//! statement); a store that writes in code applies it with [`Landing::apply`]. Statuses are
//! the crate's constants; every value a caller supplies is the store's bound parameter.

use chrono::{DateTime, Utc};

use crate::model::{RunStatus, WorkflowRun};

use RunStatus::{Canceled, Completed, Failed, Paused, Pending, Running, Sleeping};

/// A column of a run's row that a transition writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// The lease holder.
    WorkerId,
    /// The claim epoch: every claim increments it, nothing else writes it (see
    /// [`claimed_epoch`](super::claimed_epoch)).
    ClaimEpoch,
    /// When the run is claimable next (or its lease ends, while it runs).
    AvailableAt,
    /// The run's output.
    Output,
    /// The run's last error.
    Error,
    /// The run's attempt counter: cleared to zero, not to `NULL`.
    Attempts,
    /// When its current execution started.
    StartedAt,
    /// When it finished.
    FinishedAt,
    /// When an operator last retried it.
    RetriedAt,
    /// The topic a parked event wait waits on (a row column, not a field of
    /// [`WorkflowRun`]).
    WaitTopic,
    /// How many children a parked parent still waits for (a row column, not a field of
    /// [`WorkflowRun`]).
    AwaitingChildren,
    /// The run's idempotency key.
    IdempotencyKey,
    /// The run it continued as ([`crate::continuation`]).
    ContinuedAs,
}

impl Column {
    /// The column's name in every store's schema.
    pub const fn name(self) -> &'static str {
        match self {
            Column::WorkerId => "worker_id",
            Column::ClaimEpoch => "claim_epoch",
            Column::AvailableAt => "available_at",
            Column::Output => "output",
            Column::Error => "error",
            Column::Attempts => "attempts",
            Column::StartedAt => "started_at",
            Column::FinishedAt => "finished_at",
            Column::RetriedAt => "retried_at",
            Column::WaitTopic => "wait_topic",
            Column::AwaitingChildren => "awaiting_children",
            Column::IdempotencyKey => "idempotency_key",
            Column::ContinuedAs => "continued_as_run_id",
        }
    }

    /// The value a clear writes, in SQL.
    const fn cleared_sql(self) -> &'static str {
        match self {
            Column::Attempts | Column::AwaitingChildren | Column::ClaimEpoch => "0",
            _ => "NULL",
        }
    }

    /// Clears the column in `run` (row columns that are not fields of [`WorkflowRun`] are
    /// the caller's).
    fn clear(self, run: &mut WorkflowRun) {
        match self {
            Column::WorkerId => run.worker_id = None,
            Column::AvailableAt => run.available_at = None,
            Column::Output => run.output = None,
            Column::Error => run.error = None,
            Column::Attempts => run.attempts = 0,
            Column::ClaimEpoch => run.claim_epoch = 0,
            Column::StartedAt => run.started_at = None,
            Column::FinishedAt => run.finished_at = None,
            Column::RetriedAt => run.retried_at = None,
            Column::IdempotencyKey => run.idempotency_key = None,
            Column::ContinuedAs => run.continued_as_run_id = None,
            Column::WaitTopic | Column::AwaitingChildren => {}
        }
    }

    /// Stamps the column of `run` with `now` (a timestamp column).
    fn stamp(self, run: &mut WorkflowRun, now: DateTime<Utc>) {
        match self {
            Column::AvailableAt => run.available_at = Some(now),
            Column::StartedAt => run.started_at = Some(now),
            Column::FinishedAt => run.finished_at = Some(now),
            Column::RetriedAt => run.retried_at = Some(now),
            _ => {}
        }
    }
}

use Column::{
    Attempts, AvailableAt, AwaitingChildren, ClaimEpoch, ContinuedAs, Error, FinishedAt,
    IdempotencyKey, Output, RetriedAt, StartedAt, WaitTopic, WorkerId,
};

/// Where a transition leaves a run: its status, the columns it clears (`NULL`, or zero for
/// counters), the timestamps it sets to the store's clock, and the columns whose values the
/// store supplies (bound parameters, or the store's own expressions). `updated_at` is
/// every write's and is not listed.
#[derive(Debug, PartialEq, Eq)]
pub struct Landing {
    /// The status the run is left in.
    pub status: RunStatus,
    /// The columns cleared.
    pub clears: &'static [Column],
    /// The timestamp columns set to the store's clock.
    pub stamps: &'static [Column],
    /// The columns the store gives a value, in this order.
    pub sets: &'static [Column],
}

/// The status a created run starts in (a start, a child, a schedule's firing, a fork):
/// pending, claimable from its `available_at`, with no attempt counted.
pub const CREATED: RunStatus = Pending;

/// A durable sleep, or a long backoff inside an attempt ([`SLEEP`](super::SLEEP)): sleeping
/// until the store's `available_at`, without a worker.
pub const SLEEPING: Landing = Landing {
    status: Sleeping,
    clears: &[WorkerId],
    stamps: &[],
    sets: &[AvailableAt],
};

/// An event wait that parks ([`WAIT_EVENT`](super::WAIT_EVENT)): sleeping until the wait's
/// timeout, on its topic.
pub const PARKED_ON_EVENT: Landing = Landing {
    sets: &[AvailableAt, WaitTopic],
    ..SLEEPING
};

/// A wait for children that parks ([`WAIT_CHILDREN`](super::WAIT_CHILDREN)): sleeping until
/// [`limits::LATEST`](crate::limits::LATEST), counting the children still live.
pub const PARKED_ON_CHILDREN: Landing = Landing {
    sets: &[AvailableAt, AwaitingChildren],
    ..SLEEPING
};

/// A select that parks ([`WAIT_ANY`](super::WAIT_ANY)): sleeping until its earliest timer,
/// on its topics and its children (see [`crate::select`]).
pub const PARKED_IN_SELECT: Landing = Landing {
    sets: &[AvailableAt, WaitTopic, AwaitingChildren],
    ..SLEEPING
};

/// A completion ([`COMPLETE`](super::COMPLETE)): the output stored, any earlier error
/// cleared. The worker id stays, naming who completed it.
pub const COMPLETED: Landing = Landing {
    status: Completed,
    clears: &[Error, AvailableAt],
    stamps: &[FinishedAt],
    sets: &[Output],
};

/// A run that continued as a new run ([`CONTINUE`](super::CONTINUE)): completed without an
/// output, naming its successor, its idempotency key handed to the successor. The worker id
/// stays, naming who continued it.
pub const CONTINUED: Landing = Landing {
    status: Completed,
    clears: &[Error, AvailableAt, Output, IdempotencyKey],
    stamps: &[FinishedAt],
    sets: &[ContinuedAs],
};

/// A failed attempt that is not retried ([`FAIL`](super::FAIL), [`retry_after`] `None` or
/// past the deadline, see [`gives_up`](super::gives_up)).
///
/// [`retry_after`]: super::retry_after
pub const FAILED_FOR_GOOD: Landing = Landing {
    status: Failed,
    clears: &[WorkerId, StartedAt, AvailableAt],
    stamps: &[FinishedAt],
    sets: &[Error],
};

/// A failed attempt that is retried ([`FAIL`](super::FAIL)): pending again once its backoff
/// is over, its error kept. `started_at` is cleared, so its next claim is a start again.
pub const BACKED_OFF: Landing = Landing {
    status: Pending,
    clears: &[WorkerId, StartedAt, FinishedAt],
    stamps: &[],
    sets: &[Error, AvailableAt],
};

/// A run given back without counting its attempt ([`RELEASE`](super::RELEASE)); the
/// attempt counter is [`released_attempts`](super::released_attempts).
pub const RELEASED: Landing = Landing {
    status: Pending,
    clears: &[WorkerId],
    stamps: &[],
    sets: &[AvailableAt, Error, Attempts],
};

/// A cancel ([`CANCEL`](super::CANCEL)), and a parent's cancel cascading to a child.
pub const CANCELED: Landing = Landing {
    status: Canceled,
    clears: &[WorkerId, AvailableAt],
    stamps: &[FinishedAt],
    sets: &[],
};

/// A pause ([`PAUSE`](super::PAUSE)): claimable again only once resumed.
pub const PAUSED: Landing = Landing {
    status: Paused,
    clears: &[WorkerId, AvailableAt],
    stamps: &[],
    sets: &[],
};

/// A resume ([`RESUME`](super::RESUME)): pending, claimable now.
pub const RESUMED: Landing = Landing {
    status: Pending,
    clears: &[],
    stamps: &[AvailableAt],
    sets: &[],
};

/// An operator's retry ([`RETRY`](super::RETRY)): pending now, as a new execution with its
/// attempt counter at zero. The store keeps `started_at`, or sets it to the run's creation
/// when a failure cleared it, so that the claim sees that the run executed before.
pub const RETRIED: Landing = Landing {
    status: Pending,
    clears: &[WorkerId, Output, Error, FinishedAt, Attempts],
    stamps: &[AvailableAt, RetriedAt],
    sets: &[StartedAt],
};

/// A deadline's expiry at a claim ([`EXPIRE`](super::EXPIRE)), with
/// [`deadline_error`](super::deadline_error).
pub const EXPIRED: Landing = Landing {
    status: Failed,
    clears: &[WorkerId, AvailableAt],
    stamps: &[FinishedAt],
    sets: &[Error],
};

/// A poison row's quarantine ([`QUARANTINE`](super::QUARANTINE)); the store also resets the
/// undecodable JSON columns it moved into the error.
pub const QUARANTINED: Landing = EXPIRED;

/// A claim ([`CLAIM_PENDING`](super::CLAIM_PENDING) and the others): running under the
/// claimer, by a new claim epoch ([`claimed_epoch`](super::claimed_epoch)), until the lease
/// ends. The attempt counter is [`claimed_attempts`](super::claimed_attempts); `started_at`
/// is set by the first claim only ([`claimed_started_at`](super::claimed_started_at)).
pub const CLAIMED: Landing = Landing {
    status: Running,
    clears: &[],
    stamps: &[],
    sets: &[WorkerId, ClaimEpoch, AvailableAt, Attempts, StartedAt],
};

impl Landing {
    /// Applies the status, the clears and the stamps to `run` at `now`; the columns of
    /// [`Landing::sets`] are the caller's.
    pub fn apply(&self, run: &mut WorkflowRun, now: DateTime<Utc>) {
        run.status = self.status;
        for column in self.clears {
            column.clear(run);
        }
        for column in self.stamps {
            column.stamp(run, now);
        }
    }

    /// How `run` differs from this landing, for a check that a store applied it: its status,
    /// a cleared column that holds a value, or a stamped column that holds none (`None`:
    /// no difference). The columns of [`Landing::sets`] are the store's values and are not
    /// checked.
    pub fn differs(&self, run: &WorkflowRun) -> Option<String> {
        if run.status != self.status {
            return Some(format!(
                "the run is {:?}, not {:?}",
                run.status, self.status
            ));
        }
        let is_set = |column: Column| match column {
            Column::WorkerId => Some(run.worker_id.is_some()),
            Column::AvailableAt => Some(run.available_at.is_some()),
            Column::Output => Some(run.output.is_some()),
            Column::Error => Some(run.error.is_some()),
            Column::Attempts => Some(run.attempts != 0),
            Column::ClaimEpoch => Some(run.claim_epoch != 0),
            Column::StartedAt => Some(run.started_at.is_some()),
            Column::FinishedAt => Some(run.finished_at.is_some()),
            Column::RetriedAt => Some(run.retried_at.is_some()),
            Column::IdempotencyKey => Some(run.idempotency_key.is_some()),
            Column::ContinuedAs => Some(run.continued_as_run_id.is_some()),
            Column::WaitTopic | Column::AwaitingChildren => None,
        };
        let cleared = self
            .clears
            .iter()
            .find(|column| is_set(**column) == Some(true))
            .map(|column| format!("{} is not cleared", column.name()));
        let stamped = self
            .stamps
            .iter()
            .find(|column| is_set(**column) == Some(false))
            .map(|column| format!("{} is not set", column.name()));
        cleared.or(stamped)
    }

    /// The `SET` list, in SQL: `status = '..'`, each cleared column, each stamped column
    /// set to `now` (the dialect's clock expression), then each column of
    /// [`Landing::sets`] set to its value from `values` (a placeholder or an expression of
    /// the store), which must name exactly those columns, in that order.
    pub fn set_sql(&self, now: &str, values: &[(Column, &str)]) -> String {
        self.assignments(now, values)
            .into_iter()
            .map(|(column, value)| format!("{column} = {value}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Each column this landing writes with its SQL value, status first.
    fn assignments(&self, now: &str, values: &[(Column, &str)]) -> Vec<(&'static str, String)> {
        debug_assert_eq!(
            values.iter().map(|(column, _)| *column).collect::<Vec<_>>(),
            self.sets,
            "the values of a landing's store-supplied columns"
        );
        let mut assignments = vec![("status", format!("'{}'", self.status.as_str()))];
        assignments.extend(
            self.clears
                .iter()
                .map(|column| (column.name(), column.cleared_sql().to_owned())),
        );
        assignments.extend(
            self.stamps
                .iter()
                .map(|column| (column.name(), now.to_owned())),
        );
        assignments.extend(
            values
                .iter()
                .map(|(column, value)| (column.name(), (*value).to_owned())),
        );
        assignments
    }
}

/// The `SET` list of a transition that decides in its statement between two landings:
/// `then` when `condition` (a SQL boolean) holds, else `otherwise`, each with the values of
/// its [`Landing::sets`] as for [`Landing::set_sql`]. A column written by one landing only
/// keeps its value under the other; a column both write alike is written once.
pub fn either_set_sql(
    condition: &str,
    (then, then_values): (&Landing, &[(Column, &str)]),
    (otherwise, otherwise_values): (&Landing, &[(Column, &str)]),
    now: &str,
) -> String {
    let then = then.assignments(now, then_values);
    let otherwise = otherwise.assignments(now, otherwise_values);
    let mut columns: Vec<&str> = then.iter().map(|(column, _)| *column).collect();
    for (column, _) in &otherwise {
        if !columns.contains(column) {
            columns.push(column);
        }
    }
    let value = |assignments: &[(&str, String)], column: &str| {
        assignments
            .iter()
            .find(|(name, _)| *name == column)
            .map_or_else(|| column.to_owned(), |(_, value)| value.clone())
    };
    columns
        .into_iter()
        .map(|column| {
            let (a, b) = (value(&then, column), value(&otherwise, column));
            if a == b {
                format!("{column} = {a}")
            } else {
                format!("{column} = CASE WHEN {condition} THEN {a} ELSE {b} END")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transition::{
        Announce, CANCEL, CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, COMPLETE,
        CONTINUE, EXPIRE, EXTEND_LEASE, FAIL, FORK, PAUSE, PURGE, QUARANTINE, RELEASE, RESUME,
        RETRY, SEND_EVENT, SET_STATE, SLEEP, START_CHILD, Transition, WAIT_ANY, WAIT_CHILDREN,
        WAIT_EVENT, WAITABLE, WAKE_ON_EVENT, WAKE_PARENT,
    };

    fn run(status: RunStatus) -> WorkflowRun {
        WorkflowRun::for_tests(status, Some("w".into()))
    }

    const ALL: &[&Transition] = &[
        &EXTEND_LEASE,
        &SLEEP,
        &COMPLETE,
        &CONTINUE,
        &FAIL,
        &RELEASE,
        &CANCEL,
        &PAUSE,
        &RESUME,
        &RETRY,
        &FORK,
        &PURGE,
        &CLAIM_PENDING,
        &CLAIM_EXPIRED,
        &CLAIM_DUE,
        &CLAIM_ORPHANED,
        &QUARANTINE,
        &EXPIRE,
        &SEND_EVENT,
        &WAKE_ON_EVENT,
        &WAIT_EVENT,
        &SET_STATE,
        &START_CHILD,
        &WAIT_CHILDREN,
        &WAKE_PARENT,
        &WAIT_ANY,
    ];

    #[test]
    fn a_transition_announces_what_its_landings_say() {
        for transition in ALL {
            let lands = transition.lands.iter().map(|landing| landing.status);
            assert_eq!(
                transition.announce == Announce::Finished,
                lands.clone().any(RunStatus::is_terminal),
                "{:?}: announces a finish iff it may end the run",
                transition.operation
            );
            assert_eq!(
                transition.announce_status,
                lands.clone().any(|status| WAITABLE.contains(&status)),
                "{:?}: announces its status iff it may leave one a caller waits for",
                transition.operation
            );
        }
    }

    #[test]
    fn only_a_claim_writes_the_claim_epoch_and_nothing_clears_it() {
        for landing in [
            &SLEEPING,
            &PARKED_ON_EVENT,
            &PARKED_ON_CHILDREN,
            &PARKED_IN_SELECT,
            &COMPLETED,
            &FAILED_FOR_GOOD,
            &BACKED_OFF,
            &RELEASED,
            &CANCELED,
            &PAUSED,
            &RESUMED,
            &RETRIED,
            &EXPIRED,
        ] {
            let writes = landing
                .clears
                .iter()
                .chain(landing.stamps)
                .chain(landing.sets);
            assert!(
                !writes.clone().any(|column| *column == ClaimEpoch),
                "{landing:?}"
            );
        }
        assert!(CLAIMED.sets.contains(&ClaimEpoch));
    }

    #[test]
    fn a_landing_renders_its_columns_once() {
        assert_eq!(
            SLEEPING.set_sql("now()", &[(AvailableAt, "$4")]),
            "status = 'sleeping', worker_id = NULL, available_at = $4"
        );
        assert_eq!(
            CANCELED.set_sql("?4", &[]),
            "status = 'canceled', worker_id = NULL, available_at = NULL, finished_at = ?4"
        );
        assert_eq!(
            RETRIED.set_sql("now()", &[(StartedAt, "COALESCE(started_at, created_at)")]),
            "status = 'pending', worker_id = NULL, output = NULL, error = NULL, \
             finished_at = NULL, attempts = 0, available_at = now(), retried_at = now(), \
             started_at = COALESCE(started_at, created_at)"
        );
    }

    #[test]
    fn a_failure_decides_between_its_two_landings_in_one_list() {
        let set = either_set_sql(
            "g",
            (&FAILED_FOR_GOOD, &[(Error, "$4")]),
            (&BACKED_OFF, &[(Error, "$4"), (AvailableAt, "$5")]),
            "now()",
        );
        assert_eq!(
            set,
            "status = CASE WHEN g THEN 'failed' ELSE 'pending' END, worker_id = NULL, \
             started_at = NULL, available_at = CASE WHEN g THEN NULL ELSE $5 END, \
             finished_at = CASE WHEN g THEN now() ELSE NULL END, error = $4"
        );
    }

    #[test]
    fn applying_a_landing_matches_its_rendering() {
        let now = Utc::now();
        let mut canceled = run(Running);
        canceled.available_at = Some(now);
        CANCELED.apply(&mut canceled, now);
        assert_eq!(canceled.status, Canceled);
        assert_eq!(canceled.worker_id, None);
        assert_eq!(canceled.available_at, None);
        assert_eq!(canceled.finished_at, Some(now));
        assert_eq!(CANCELED.differs(&canceled), None);
        assert!(PAUSED.differs(&canceled).is_some());
        let mut unfinished = canceled.clone();
        unfinished.finished_at = None;
        assert_eq!(
            CANCELED.differs(&unfinished).as_deref(),
            Some("finished_at is not set")
        );
        unfinished.worker_id = Some("w".into());
        assert_eq!(
            CANCELED.differs(&unfinished).as_deref(),
            Some("worker_id is not cleared")
        );
        let mut retried = run(Failed);
        retried.attempts = 3;
        retried.output = Some(serde_json::json!(1));
        RETRIED.apply(&mut retried, now);
        assert_eq!(
            (
                retried.status,
                retried.attempts,
                retried.output,
                retried.retried_at
            ),
            (Pending, 0, None, Some(now))
        );
        // Only the two row columns that are not run fields go without a clear.
        for landing in [
            &SLEEPING,
            &PARKED_ON_EVENT,
            &PARKED_ON_CHILDREN,
            &PARKED_IN_SELECT,
            &COMPLETED,
            &FAILED_FOR_GOOD,
            &BACKED_OFF,
            &RELEASED,
            &CANCELED,
            &PAUSED,
            &RESUMED,
            &RETRIED,
            &EXPIRED,
            &CLAIMED,
        ] {
            for column in landing.clears.iter().chain(landing.stamps) {
                assert!(!matches!(column, WaitTopic | AwaitingChildren));
                assert!(!landing.sets.contains(column), "{column:?} written twice");
            }
        }
    }
}
