//! The state machine of runs and step attempts, defined once for every store.
//!
//! Every durable change of a run is a [`Transition`]: a constant that says which statuses it
//! may start from, whether the caller must hold the run's lease, which statuses mean "already
//! done" (an idempotent repeat), and what it announces once committed: a wake-up for
//! workers or a finish ([`Announce`]), and the status it leaves the run in for waiters
//! ([`Transition::announce_status`], [`WAITABLE`]). A store renders each
//! transition as one fenced statement in its own SQL dialect, with the fence built by
//! [`Transition::fence`], and hands a miss to [`Transition::settle`], which is the only place
//! that decides between [`StoreError::RunNotFound`], [`StoreError::LeaseLost`],
//! [`StoreError::WrongState`] and "already done". Step attempts whose run was paused or
//! canceled while they ran are classified by [`interrupted`] and [`explain_step_miss`], and
//! the retry decision of a failed run is [`retry_after`]: the stores only execute them.
//!
//! Statuses are the crate's own constants ([`RunStatus::as_str`]): they are rendered into the
//! statement text once, which keeps the partial claim indexes usable. Every value a caller
//! supplies is a bound parameter.
//!
//! # Adding a transition
//!
//! 1. Add its [`Operation`] (a description for errors and a verb for
//!    [`StoreError::WrongState`]).
//! 2. Define a `const` [`Transition`] here: `from`, `leased`, `done`, `announce`,
//!    `announce_status`.
//! 3. Add the method to the [`Store`](crate::Store) contract, documented with its errors.
//! 4. In each store, write the statement's `SET` list in its dialect and run it through the
//!    store's generic transition helper (`PgStore::transition` / `SqliteStore::transition`),
//!    which applies [`Transition::fence`], [`Transition::settle`] and
//!    [`Transition::announcements`].
//! 5. Add conformance cases to `tasks-conformance`; both stores run them.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::error::{Operation, StoreError, StoreResult};
use crate::model::{RunStatus, StepAttempt, StepStatus, WorkflowRun};
use crate::retry::RetryPolicy;
use crate::store::notify::Notification;

use RunStatus::{Canceled, Paused, Pending, Running, Sleeping};

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
    /// The caller must hold the run's lease: the run is running under the caller's worker id.
    pub leased: bool,
    /// Statuses in which a repeat of the transition is already done: the run is returned as
    /// it is instead of an error.
    pub done: &'static [RunStatus],
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

/// Extends the lease of a running run.
pub const EXTEND_LEASE: Transition = Transition::leased(Operation::ExtendLease);

/// Parks a running run until a given instant (a durable sleep, a long step backoff).
pub const SLEEP: Transition = Transition {
    announce_status: true,
    ..Transition::leased(Operation::SleepRun)
};

/// Completes a running run with its output.
pub const COMPLETE: Transition = Transition {
    announce: Announce::Finished,
    ..Transition::leased(Operation::CompleteRun)
};

/// Fails an attempt of a running run: pending again after [`retry_after`], or failed for good.
pub const FAIL: Transition = Transition {
    announce: Announce::Finished,
    announce_status: true,
    ..Transition::leased(Operation::FailRun)
};

/// Gives a claimed run back without counting its attempt.
pub const RELEASE: Transition = Transition {
    announce_status: true,
    ..Transition::leased(Operation::ReleaseRun)
};

/// Cancels a live run, for good. Repeating it is harmless.
pub const CANCEL: Transition = Transition {
    operation: Operation::CancelRun,
    from: &[Pending, Running, Sleeping, Paused],
    leased: false,
    done: &[Canceled],
    announce: Announce::Finished,
    announce_status: false,
};

/// Pauses a live run until it is resumed. Repeating it is harmless.
pub const PAUSE: Transition = Transition {
    operation: Operation::PauseRun,
    from: &[Pending, Running, Sleeping],
    leased: false,
    done: &[Paused],
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
/// writes its own worker id, so every later write of the stale worker misses the fence
/// ([`StoreError::LeaseLost`]).
pub const CLAIM_ORPHANED: Transition = Transition {
    from: &[Running],
    ..CLAIM_PENDING
};

/// Fails for good a run the claiming worker just took whose stored row cannot be decoded (a
/// "poison row"): its undecodable JSON columns are moved, as text, into the error record
/// ([`quarantine_error`]), so the row reads again and the claim goes on with the others.
/// Fenced like a worker's own write: only while the run is running under the claimer.
pub const QUARANTINE: Transition = Transition {
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
    announce: Announce::Finished,
    announce_status: false,
};

// ---- Events sent to a run ----

/// Sends an event to a live run. The run is locked first; a terminal run refuses it and
/// nothing is stored. What it announces is [`WAKE_ON_EVENT`]'s.
pub const SEND_EVENT: Transition = Transition {
    operation: Operation::SendEvent,
    from: &[Pending, Running, Sleeping, Paused],
    leased: false,
    done: &[],
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
    announce: Announce::Available,
    announce_status: false,
};

/// An event wait of a running run by its worker: consumes an event, times out, or parks the
/// run (`status` sleeping until the timeout, `worker_id` cleared, `wait_topic` set). Every
/// outcome that ends the wait clears `wait_topic`, so a later durable sleep is not woken by
/// a send. Only the parking write announces (the run sleeping); the others leave the run
/// running and announce nothing.
pub const WAIT_EVENT: Transition = Transition {
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
    announce_status: true,
    ..Transition::leased(Operation::WaitForChildren)
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

// Flow control: priorities and concurrency keys in the claim.

/// The statuses in which a run holds a slot of its concurrency key: only running. A
/// sleeping, paused or pending run holds none.
pub const HOLDS_SLOT: &[RunStatus] = &[Running];

/// The claimable statuses whose claim takes a slot of the run's key: a claim takes such a run
/// only while its key has a free slot. (A running run a claim takes over, its lease expired
/// or its worker stale, keeps the slot it holds.)
pub const TAKES_SLOT: &[RunStatus] = &[Pending, Sleeping];

/// The order in which a claim takes pending runs: higher priority first, then the order of
/// availability. Strict: a pending run is not claimed while runs of higher priority are
/// claimable (by the same claim).
pub const PENDING_ORDER: &str = "priority DESC, available_at, created_at";

/// `{alias}priority DESC, {alias}available_at, {alias}created_at`: [`PENDING_ORDER`] on a
/// table alias (with its dot).
pub fn pending_order(alias: &str) -> String {
    PENDING_ORDER
        .split(", ")
        .map(|term| format!("{alias}{term}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The slots the key `key` (a SQL expression) holds in namespace `namespace` (a
/// placeholder), in SQL: the count of its runs in `runs_table` in [`HOLDS_SLOT`], read
/// through the index on running runs by key.
pub fn slots_held(runs_table: &str, namespace: &str, key: &str) -> String {
    format!(
        "SELECT count(*) FROM {runs_table} h
          WHERE h.namespace = {namespace} AND h.concurrency_key = {key} AND {holding}",
        holding = status_in("h.", HOLDS_SLOT),
    )
}

/// How many candidate runs that take a slot a claim of `limit` runs looks at, in claim
/// order, among those of keys with a free slot: several per run it may claim, since a claim
/// takes no more runs of one key than the key has free slots.
pub fn keyed_candidates(limit: u32) -> i64 {
    i64::from(limit) * 4 + 16
}

/// Whether the candidate ranked `rank` among the candidates of its key (1 for the first, in
/// claim order) fits in its key's free slots, given `held` slots: `held + rank <= limit`.
pub fn admitted(held: &str, rank: &str, limit: &str) -> String {
    format!("{held} + {rank} <= {limit}")
}

// Named queues: queue filters, queue limits and rate limits in the claim.

/// The statuses in which a run holds a slot of its queue's concurrency limit: those in which
/// it holds its key's slot ([`HOLDS_SLOT`]). A sleeping, paused or pending run holds none.
pub const HOLDS_QUEUE_SLOT: &[RunStatus] = HOLDS_SLOT;

/// The claimable statuses whose claim takes a slot of the run's queue, when its queue has a
/// concurrency limit: those whose claim takes a key's slot ([`TAKES_SLOT`]). A running run a
/// claim takes over keeps the slot it holds.
pub const TAKES_QUEUE_SLOT: &[RunStatus] = TAKES_SLOT;

/// The slots the queue `queue` (a SQL expression) holds in namespace `namespace` (a
/// placeholder), in SQL: the count of its runs in `runs_table` in [`HOLDS_QUEUE_SLOT`], read
/// through the index on running runs by queue.
pub fn queue_slots_held(runs_table: &str, namespace: &str, queue: &str) -> String {
    format!(
        "SELECT count(*) FROM {runs_table} hq
          WHERE hq.namespace = {namespace} AND hq.queue = {queue} AND {holding}",
        holding = status_in("hq.", HOLDS_QUEUE_SLOT),
    )
}

/// The limit a keyed run's key slots are counted against, in SQL: the smaller of the run's
/// own limit `run_limit` and its queue's concurrency limit per key `queue_limit` (`NULL`:
/// the queue has none, and the run's own limit applies). A claim compares the key's held
/// slots ([`slots_held`]) to it wherever it would compare them to the run's own limit, so
/// a changed queue setting applies from the next claim.
pub fn key_limit(run_limit: &str, queue_limit: &str) -> String {
    format!("CASE WHEN {queue_limit} < {run_limit} THEN {queue_limit} ELSE {run_limit} END")
}

/// Whether claiming the run `{alias}` (with its dot, or empty) starts it, in SQL: its first
/// claim, which a queue's rate limit counts. The first claim sets `started_at`, and nothing
/// clears it, so resumes after a sleep, retries and takeovers are not starts.
pub fn is_start(alias: &str) -> String {
    format!("{alias}started_at IS NULL")
}

/// A queue's rate window (see [`crate::queue::RateLimit`]): fixed windows of the limit's
/// period, each opened by the first start after the previous one ended. This is the rule;
/// [`rate_starts_left_sql`] and [`rate_window_set_sql`] render the same for a store that
/// applies it in SQL.
// Postgres applies the rule in SQL only; the SQLite store and the tests use it in Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateWindow {
    /// When the current window opened.
    pub start: Option<chrono::DateTime<chrono::Utc>>,
    /// The starts counted in it.
    pub starts: u32,
}

impl RateWindow {
    /// Whether the window is still open at `now` for a limit of `period`.
    pub fn open(&self, period: Duration, now: chrono::DateTime<chrono::Utc>) -> bool {
        self.start.is_some_and(|start| {
            chrono::Duration::from_std(period).is_ok_and(|period| start + period > now)
        })
    }

    /// How many runs may still start at `now` under `limit`.
    pub fn starts_left(
        &self,
        limit: &crate::queue::RateLimit,
        now: chrono::DateTime<chrono::Utc>,
    ) -> u32 {
        if self.open(limit.period, now) {
            limit.starts.saturating_sub(self.starts)
        } else {
            limit.starts
        }
    }

    /// The window after a claim at `now` started `started` runs: the same window counts
    /// them while it is open; otherwise they open a new one at `now`.
    pub fn after(
        &self,
        limit: &crate::queue::RateLimit,
        now: chrono::DateTime<chrono::Utc>,
        started: u32,
    ) -> RateWindow {
        if started == 0 {
            *self
        } else if self.open(limit.period, now) {
            RateWindow {
                start: self.start,
                starts: self.starts.saturating_add(started),
            }
        } else {
            RateWindow {
                start: Some(now),
                starts: started,
            }
        }
    }
}

/// [`RateWindow::starts_left`] in SQL: `limit` is the limit's number (`NULL`: no rate
/// limit, and the result is `NULL`), `starts` the window's count, `open` the dialect's
/// expression of [`RateWindow::open`] (`NULL` or false when closed).
pub fn rate_starts_left_sql(limit: &str, starts: &str, open: &str) -> String {
    format!(
        "CASE WHEN {limit} IS NULL THEN NULL
              WHEN COALESCE({open}, false)
                   THEN CASE WHEN {limit} > {starts} THEN {limit} - {starts} ELSE 0 END
              ELSE {limit} END"
    )
}

/// [`RateWindow::after`] in SQL: the `SET` list of the window columns (`window_start`,
/// `window_starts`) of the row aliased `row` (with its dot) after a claim at `now` started
/// `started` runs counted in it (SQL expressions), given `limited` (whether a rate limit
/// applies) and `open` as for [`rate_starts_left_sql`]. Without a rate limit the window is
/// kept.
pub fn rate_window_set_sql(
    row: &str,
    limited: &str,
    open: &str,
    now: &str,
    started: &str,
) -> String {
    format!(
        "window_start = CASE WHEN NOT ({limited}) OR {started} = 0 THEN {row}window_start
                             WHEN COALESCE({open}, false) THEN {row}window_start
                             ELSE {now} END,
         window_starts = CASE WHEN NOT ({limited}) OR {started} = 0 THEN {row}window_starts
                              WHEN COALESCE({open}, false) THEN {row}window_starts + {started}
                              ELSE {started} END"
    )
}

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

/// Starts a step attempt of a running run (durable sleeps; function steps are recorded
/// finished).
pub const CREATE_STEP: Transition = Transition::leased(Operation::CreateStepAttempt);

/// Finishes a running step attempt of a running run.
pub const COMPLETE_STEP: Transition = Transition::leased(Operation::CompleteStepAttempt);

/// Records a finished step attempt of a running run.
pub const RECORD_STEP: Transition = Transition::leased(Operation::RecordStepAttempt);

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
            announce: Announce::Nothing,
            announce_status: false,
        }
    }

    /// The statement condition on the run's status, and on its lease holder for a leased
    /// transition: `{alias}status IN ('running') AND {alias}worker_id = {worker_param}`.
    /// `alias` is a table alias with its dot (or empty), `worker_param` the placeholder the
    /// caller binds the worker id to; statuses are rendered from [`RunStatus::as_str`].
    pub fn fence(&self, alias: &str, worker_param: &str) -> String {
        let mut fence = status_in(alias, self.from);
        if self.leased {
            fence.push_str(&format!(" AND {alias}worker_id = {worker_param}"));
        }
        fence
    }

    /// Whether the fence holds for `run` (for a store that checks it in code, under its
    /// write lock).
    pub fn admits(&self, run: &WorkflowRun, worker_id: Option<&str>) -> bool {
        self.from.contains(&run.status)
            && (!self.leased || (run.worker_id.is_some() && run.worker_id.as_deref() == worker_id))
    }

    /// The outcome of a transition whose fence matched no row, given the run as it is now
    /// (`None`: it does not exist in the namespace): the run itself when the transition is
    /// already done, otherwise why it cannot apply.
    pub fn settle(
        &self,
        run_id: Uuid,
        worker_id: Option<&str>,
        current: Option<WorkflowRun>,
    ) -> StoreResult<WorkflowRun> {
        match current {
            Some(run) if self.done.contains(&run.status) => Ok(run),
            current => Err(self.miss(run_id, worker_id, current.as_ref())),
        }
    }

    /// Why the transition did not apply, given the run as it is now (`None`: it does not
    /// exist in the namespace). For a transition that may be already done, use
    /// [`Transition::settle`].
    pub fn miss(
        &self,
        run_id: Uuid,
        worker_id: Option<&str>,
        current: Option<&WorkflowRun>,
    ) -> StoreError {
        match current {
            None => StoreError::RunNotFound { id: run_id },
            Some(run) => self.refusal(run_id, worker_id, run),
        }
    }

    /// Why the transition does not apply to `run`, which the fence refused.
    fn refusal(&self, run_id: Uuid, worker_id: Option<&str>, run: &WorkflowRun) -> StoreError {
        match worker_id {
            Some(worker)
                if self.leased
                    && run.status == Running
                    && run.worker_id.as_deref() != Some(worker) =>
            {
                StoreError::LeaseLost {
                    id: run_id,
                    worker_id: worker.to_owned(),
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

/// The status a step attempt takes when its run was paused or canceled while the step ran:
/// the attempt is kept, marked like its run, without its result. `None` when the run was not
/// interrupted.
pub fn interrupted(run: RunStatus) -> Option<StepStatus> {
    match run {
        Paused => Some(StepStatus::Paused),
        Canceled => Some(StepStatus::Canceled),
        _ => None,
    }
}

/// Step statuses an interruption may still mark: a running attempt, or one a pause marked
/// before a cancel.
pub const MARKABLE_STEP: &[StepStatus] = &[StepStatus::Running, StepStatus::Paused];

/// Why finishing step attempt `step_id` of `run_id` matched nothing, when its run was not
/// interrupted (or the attempt could not be marked): from the run and the attempt as they
/// are now.
pub fn explain_step_miss(
    transition: &Transition,
    run_id: Uuid,
    step_id: Uuid,
    worker_id: &str,
    run: Option<&WorkflowRun>,
    step: Option<&StepAttempt>,
) -> StoreError {
    let Some(run) = run else {
        return transition.miss(run_id, Some(worker_id), None);
    };
    match step {
        Some(step) if step.workflow_run_id == run_id && step.status != StepStatus::Running => {
            StoreError::StepAlreadyFinished {
                id: step_id,
                status: step.status,
            }
        }
        Some(step) if step.workflow_run_id == run_id => {
            transition.miss(run_id, Some(worker_id), Some(run))
        }
        _ => StoreError::StepNotFound { id: step_id },
    }
}

/// What a step write finds when the id it carries is already stored: the rule that makes
/// [`StepStore::record_step_attempt`](crate::StepStore::record_step_attempt) and
/// [`StepStore::create_step_attempt`](crate::StepStore::create_step_attempt) idempotent under retry.
///
/// - An attempt of another run: the id was reused, an [`StoreError::InvalidArgument`].
/// - A finished (completed or failed) attempt of this run, for a record, or any attempt of
///   this run, for a create: the first try committed and its answer was lost; the write is
///   answered with the stored attempt and writes nothing.
/// - A record whose stored attempt was marked paused or canceled (its first try found the
///   run interrupted): `None`, and the write classifies the run as it is now, storing
///   nothing new (its insert finds the id taken).
pub fn stored_again(
    run_id: Uuid,
    stored: Option<StepAttempt>,
    finished_only: bool,
) -> StoreResult<Option<StepAttempt>> {
    match stored {
        None => Ok(None),
        Some(step) if step.workflow_run_id != run_id => Err(StoreError::InvalidArgument(format!(
            "step attempt id {} is already used by another run",
            step.id
        ))),
        Some(step)
            if !finished_only
                || matches!(step.status, StepStatus::Completed | StepStatus::Failed) =>
        {
            Ok(Some(step))
        }
        Some(_) => Ok(None),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: RunStatus, worker: Option<&str>) -> WorkflowRun {
        WorkflowRun::for_tests(status, worker.map(str::to_owned))
    }

    #[test]
    fn fences_render_statuses_and_the_lease_holder() {
        assert_eq!(
            COMPLETE.fence("wr.", "$3"),
            "wr.status IN ('running') AND wr.worker_id = $3"
        );
        assert_eq!(
            CANCEL.fence("", "?3"),
            "status IN ('pending', 'running', 'sleeping', 'paused')"
        );
    }

    #[test]
    fn a_miss_is_explained_once_for_every_store() {
        let id = Uuid::now_v7();
        assert!(matches!(
            COMPLETE.settle(id, Some("w"), None),
            Err(StoreError::RunNotFound { .. })
        ));
        assert!(matches!(
            COMPLETE.settle(id, Some("w"), Some(run(Running, Some("other")))),
            Err(StoreError::LeaseLost { .. })
        ));
        assert!(matches!(
            COMPLETE.settle(id, Some("w"), Some(run(Paused, None))),
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
            PURGE.fence("r.", "NULL"),
            "r.status IN ('completed', 'failed', 'canceled')"
        );
        assert_eq!(
            PURGE.announcements(&run(RunStatus::Failed, None)).next(),
            None
        );
    }

    #[test]
    fn admits_matches_the_fence() {
        assert!(COMPLETE.admits(&run(Running, Some("w")), Some("w")));
        assert!(!COMPLETE.admits(&run(Running, Some("x")), Some("w")));
        assert!(!COMPLETE.admits(&run(Sleeping, None), Some("w")));
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
    fn the_claim_policy_renders_once() {
        assert_eq!(
            pending_order("r."),
            "r.priority DESC, r.available_at, r.created_at"
        );
        assert_eq!(
            slots_held("runs", "$1", "r.concurrency_key"),
            "SELECT count(*) FROM runs h
          WHERE h.namespace = $1 AND h.concurrency_key = r.concurrency_key AND h.status IN ('running')"
        );
        assert_eq!(admitted("a", "b", "c"), "a + b <= c");
        assert!(keyed_candidates(1) > 1);
        assert_eq!(schedule_fence("$3"), "NOT paused AND next_slot = $3");
        // Every claimable status either takes a slot or already holds one.
        for status in CLAIM_PENDING
            .from
            .iter()
            .chain(CLAIM_DUE.from)
            .chain(CLAIM_EXPIRED.from)
        {
            assert!(TAKES_SLOT.contains(status) != HOLDS_SLOT.contains(status));
        }
    }

    #[test]
    fn rate_windows_count_starts_and_reopen() {
        use crate::queue::RateLimit;
        let limit = RateLimit {
            starts: 3,
            period: Duration::from_secs(10),
        };
        let t0 = chrono::Utc::now();
        let fresh = RateWindow {
            start: None,
            starts: 0,
        };
        assert_eq!(fresh.starts_left(&limit, t0), 3);
        let after = fresh.after(&limit, t0, 2);
        assert_eq!(after.start, Some(t0));
        assert_eq!(after.starts_left(&limit, t0), 1);
        let full = after.after(&limit, t0 + chrono::Duration::seconds(5), 1);
        assert_eq!(full.starts, 3);
        assert_eq!(full.start, Some(t0), "the window opened at its first start");
        assert_eq!(
            full.starts_left(&limit, t0 + chrono::Duration::seconds(9)),
            0
        );
        // The window ends a period after it opened.
        let later = t0 + chrono::Duration::seconds(10);
        assert_eq!(full.starts_left(&limit, later), 3);
        let next = full.after(&limit, later, 1);
        assert_eq!((next.start, next.starts), (Some(later), 1));
        assert_eq!(full.after(&limit, later, 0), full);
        assert!(
            rate_starts_left_sql("q.rate_limit", "q.window_starts", "o")
                .contains("THEN q.rate_limit - q.window_starts ELSE 0 END")
        );
        let set = rate_window_set_sql("k.", "p.period IS NOT NULL", "o", "now()", "p.started");
        assert!(set.contains("ELSE now() END"), "{set}");
        assert!(set.contains("THEN k.window_starts + p.started"), "{set}");
        assert_eq!(is_start("r."), "r.started_at IS NULL");
        assert_eq!(HOLDS_QUEUE_SLOT, HOLDS_SLOT);
        assert!(queue_slots_held("runs", "$1", "q.name").contains("hq.queue = q.name"));
    }

    #[test]
    fn a_queue_per_key_limit_caps_the_runs_own() {
        let limit = key_limit("r.concurrency_limit", "l.key_concurrency");
        assert_eq!(
            limit,
            "CASE WHEN l.key_concurrency < r.concurrency_limit THEN l.key_concurrency \
             ELSE r.concurrency_limit END"
        );
    }

    #[test]
    fn the_parent_wake_renders_once() {
        let set = wake_parent_set("p.", "now()", "1");
        assert!(set.contains("p.awaiting_children BETWEEN 1 AND 1 AND p.status IN ('sleeping')"));
        assert!(set.contains("THEN p.awaiting_children - 1 ELSE 0 END"));
        assert!(set.contains("THEN now() ELSE p.available_at END"));
        assert!(START_CHILD.admits(&run(Running, Some("w")), Some("w")));
        assert!(!WAIT_CHILDREN.admits(&run(Sleeping, None), Some("w")));
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
            &RETRY,
        ] {
            assert!(!transition.wakes_parent(), "{:?}", transition.operation);
        }
    }

    #[test]
    fn interrupted_steps_are_marked_like_their_run() {
        assert_eq!(interrupted(Paused), Some(StepStatus::Paused));
        assert_eq!(interrupted(Canceled), Some(StepStatus::Canceled));
        assert_eq!(interrupted(Running), None);
    }
}
