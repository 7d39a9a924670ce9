//! The claim statement: the Postgres rendering of [`CLAIM_EXPIRED`], [`CLAIM_ORPHANED`],
//! [`CLAIM_PENDING`] and [`CLAIM_DUE`], in that order (and of [`EXPIRE`] first), in two
//! variants.
//!
//! - The **plain** claim, for a namespace where no queue has a limit (the common case):
//!   runs of dead workers, then pending runs, keyed runs under their key's limit and due
//!   runs, each read in its index's order.
//! - The **full** claim, which adds the queues' concurrency limits, their rate windows and
//!   their limits per key.
//!
//! The full claim is correct in every namespace; the plain one is a smaller statement,
//! which Postgres plans in a fraction of the time (planning was most of a claim's time on a
//! large backlog). Which one a store uses is a cache ([`PgStore::claim_runs_filtered`]),
//! never a risk: the plain claim reads the queues' configuration in its own snapshot and
//! claims nothing at all when a queue of the namespace has a limit, and a claim that took
//! nothing re-reads the configuration ([`limited_queue_exists`]) and, when it changed,
//! claims again with the other statement.
//!
//! `full` and `plain` render the two statements; this module holds what they share (the
//! deadline expiry, the recovered runs, the claiming update and its placeholders) and the
//! rendered texts.
//!
//! [`PgStore::claim_runs_filtered`]: super::PgStore

use crate::rows::RUN_COLUMNS;
use crate::{children, prefixed};
use std::sync::LazyLock;
use tasks_core::model::RunStatus;
use tasks_core::transition::{
    CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, CLAIMED, Column, PENDING_ORDER,
    admitted, claimed_attempts_sql, claimed_epoch_sql, claimed_started_at_sql, first_execution_sql,
    pending_order, slots_held, stale_workers, status_in,
};

#[cfg(doc)]
use tasks_core::transition::{EXPIRE, keyed_candidates};

mod full;
mod plain;

use full::render_claim_runs_sql;
use plain::render_plain_claim_sql;

/// Whether the namespace bound as `$1` has a queue with a limit of any kind: the test both
/// claim statements make (the plain one claims nothing when it holds), and the one a store
/// re-reads after a claim that took nothing.
pub(super) const LIMITED_QUEUE_EXISTS: &str = "EXISTS (
    SELECT 1 FROM tasks.queues
     WHERE namespace = $1
       AND (concurrency IS NOT NULL OR rate_limit IS NOT NULL
            OR key_rate_limit IS NOT NULL OR key_concurrency IS NOT NULL))";

/// The rows of the admitted runs' keys (CTE `admitted`), as the statement's snapshot saw
/// them (`seen`) and locked as they are now (`locked`, skipping rows another claim holds):
/// both claim statements claim a key's runs only where the two agree.
pub(super) const KEY_ROWS: &str = "seen AS (
                SELECT concurrency_key, claims FROM tasks.concurrency_keys
                 WHERE namespace = $1
                   AND concurrency_key = ANY(ARRAY(SELECT DISTINCT concurrency_key FROM admitted))
             ), locked AS (
                SELECT concurrency_key, claims FROM tasks.concurrency_keys
                 WHERE namespace = $1
                   AND concurrency_key = ANY(ARRAY(SELECT DISTINCT concurrency_key FROM admitted))
                 FOR UPDATE SKIP LOCKED
             )";

/// How a claim's transaction begins: with the claim planned once per connection, on the
/// generic plan of its prepared statement (`plan_cache_mode`, for this transaction only).
///
/// Postgres's default (`auto`) plans a prepared statement with its parameters' values
/// (a custom plan) until the generic plan's estimated cost is no higher than theirs. The
/// claim is a large statement whose generic plan is estimated dearer than it is, so
/// `auto` planned it at every execution: most of a claim's time on an idle store, and more
/// than its execution on a backlog. Its generic plan reads the runs through the same
/// indexes, in claim order (`tests/tests/e2e_flow.rs` holds both plans to that on
/// backlogs of 100,000 runs). `SET LOCAL` is transaction state, which also holds behind
/// a pooler in transaction mode; it travels in the `BEGIN`'s own round trip.
pub(super) const GENERIC_PLAN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

/// The statement that reads [`LIMITED_QUEUE_EXISTS`] alone. Binds: namespace.
pub(super) fn limited_queue_exists() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| format!("SELECT {LIMITED_QUEUE_EXISTS}"));
    &SQL
}

/// The claim statement: fails runs past their deadline ([`EXPIRE`], waking the parents of
/// expired children), then claims runs for a worker.
/// Binds: namespace, worker id, lease in ms, most runs to claim, the deadline error (JSON),
/// the most candidates with a concurrency key to look at ([`keyed_candidates`]), the queues
/// the worker serves (`text[]`, NULL: every queue), the workflows it serves (likewise).
/// Returns the run columns, `first_execution` and `expired` of the claimed runs
/// (`expired` false) and of the runs it failed by their deadline (`expired` true).
///
/// `by_queue`: the statement of a worker that serves chosen queues, which reads the pending
/// runs of each through the index by queue; the other reads the pending runs of every queue
/// in one index scan.
///
/// `limited`: the full claim, for a namespace with a queue that has a limit; otherwise the
/// plain claim, which claims nothing (and fails no deadline but those it finds) in such a
/// namespace.
pub(super) fn claim_runs_sql(by_queue: bool, limited: bool) -> &'static str {
    static ALL: LazyLock<String> = LazyLock::new(|| render_claim_runs_sql(false));
    static BY_QUEUE: LazyLock<String> = LazyLock::new(|| render_claim_runs_sql(true));
    static PLAIN_ALL: LazyLock<String> = LazyLock::new(|| render_plain_claim_sql(false));
    static PLAIN_BY_QUEUE: LazyLock<String> = LazyLock::new(|| render_plain_claim_sql(true));
    match (limited, by_queue) {
        (true, false) => &ALL,
        (true, true) => &BY_QUEUE,
        (false, false) => &PLAIN_ALL,
        (false, true) => &PLAIN_BY_QUEUE,
    }
}

/// The placeholders both claim statements have, replaced: the deadline expiry, the
/// statuses each group of runs is claimed from, the claim order, a key's slots held
/// (`{held}`) and its admission, the stale workers and the returned columns.
pub(super) fn replace_shared(template: &str) -> String {
    template
        .replace("{expire}", &children::expire_ctes())
        .replace("{limited_queue_exists}", LIMITED_QUEUE_EXISTS)
        .replace("{pending}", &status_in("", CLAIM_PENDING.from))
        .replace("{pending_r}", &status_in("r.", CLAIM_PENDING.from))
        .replace("{due}", &status_in("", CLAIM_DUE.from))
        .replace("{expired}", &status_in("", CLAIM_EXPIRED.from))
        .replace("{orphaned}", &status_in("", CLAIM_ORPHANED.from))
        .replace("{stale}", &stale_workers("tasks.workers", "$1", "now()"))
        .replace("{returning}", &prefixed("wr", RUN_COLUMNS))
        .replace("{pending_order}", PENDING_ORDER)
        .replace("{keyed_order}", &pending_order("r."))
        .replace("{keyed_pending}", &status_in("r.", CLAIM_PENDING.from))
        .replace("{keyed_due}", &status_in("r.", &[RunStatus::Sleeping]))
        .replace(
            "{held}",
            &slots_held("tasks.workflow_runs", "$1", "r.concurrency_key"),
        )
        .replace("{admitted}", &admitted("held", "n", "concurrency_limit"))
}

/// The keyed runs whose claim takes a slot of their key, in a namespace without a limited
/// queue, as two CTEs: `pending` (pending runs in claim order) and `due` (sleeping runs
/// whose sleep ended), each past the keys without a free slot, with `columns` after the
/// shared ones. Gated on the namespace having no limited queue (`config`). Its placeholders
/// are replaced with the statement's ([`replace_shared`]).
pub(super) fn plain_keyed_scans(pending: &str, due: &str, columns: &str) -> String {
    let scan = |name: &str, grp: u8, status: &str, order: &str| {
        format!(
            "{name} AS (
                SELECT r.ctid, {grp} AS grp, r.priority, r.available_at, r.created_at,
                       r.concurrency_key, r.concurrency_limit, h.held{columns}
                  FROM tasks.workflow_runs r CROSS JOIN LATERAL ({{held}}) h(held)
                 WHERE r.namespace = $1 AND {status} AND r.concurrency_key IS NOT NULL
                   AND NOT (SELECT configured FROM config)
                   AND r.available_at <= now()
                   AND (r.deadline_at IS NULL OR r.deadline_at > now())
                   AND h.held < r.concurrency_limit
                   AND ($7::text[] IS NULL OR r.queue = ANY($7))
                   AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                 ORDER BY {order}
                 LIMIT $6
             )"
        )
    };
    format!(
        "{}, {}",
        scan(pending, 0, "{keyed_pending}", "{keyed_order}"),
        scan(due, 1, "{keyed_due}", "r.available_at, r.created_at"),
    )
}

/// The claim's first group, the same in both statements: the runs of dead workers, ahead
/// of every other run ([`CLAIM_EXPIRED`], [`CLAIM_ORPHANED`]), gated by `gate`. First the
/// running runs whose lease expired, then running runs of other workers whose heartbeat
/// went stale, before their leases expire: found from the (few) stale workers of the
/// namespace through the index on running runs by worker (an array, so the planner probes
/// that index instead of joining every running run of the namespace). Its placeholders are
/// replaced with the statement's.
pub(super) fn recovered(gate: &str) -> String {
    format!(
        "-- Runs of dead workers first: a backlog never delays recovery.
             expired_leases AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND {{expired}}
                   {gate}
                   AND available_at <= now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                   AND ($7::text[] IS NULL OR queue = ANY($7))
                   AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                 ORDER BY available_at, created_at
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED
             ),
             orphaned AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND {{orphaned}} AND worker_id <> $2
                   AND worker_id = ANY(ARRAY({{stale}}))
                   {gate}
                   -- Expired leases are taken above.
                   AND available_at > now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                   AND ($7::text[] IS NULL OR queue = ANY($7))
                   AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                 ORDER BY available_at, created_at
                 LIMIT GREATEST($4 - (SELECT count(*) FROM expired_leases), 0)
                 FOR UPDATE SKIP LOCKED
             ),
             recovered AS (
                SELECT ctid FROM expired_leases UNION ALL SELECT ctid FROM orphaned
             )"
    )
}

/// The claim's last part, the same in both statements: the update that claims the chosen
/// runs, and the rows returned. Its placeholders are replaced with the statement's.
pub(super) fn claimed_tail() -> String {
    format!(
        "claimed AS (
             UPDATE tasks.workflow_runs wr
                SET {claimed}, updated_at = now()
              -- The locked rows by their physical address (stable: we hold their locks), so
              -- the update visits exactly them whatever the planner believes about the
              -- namespace. A join on the key could scan every run of a namespace whose
              -- statistics are stale, once per claimed row. A row a concurrent writer
              -- changed after this statement's snapshot is locked but not updated: it is
              -- simply not claimed this time.
              WHERE wr.ctid = ANY(ARRAY(SELECT ctid FROM recovered UNION ALL SELECT ctid FROM pending
                                        UNION ALL SELECT ctid FROM due))
                -- A parent woken by an expired child is written by `woken` in this
                -- statement: it waits for the next claim.
                AND wr.id <> ALL(ARRAY(SELECT id FROM woken))
          RETURNING {{returning}}, {first_execution} AS first_execution
             )
             SELECT claimed.*, false AS expired FROM claimed
             UNION ALL
             SELECT expired.*, false, true FROM expired",
        // A claim counts an attempt unless it wakes a sleep; the first claim sets
        // `started_at`.
        claimed = CLAIMED.set_sql(
            "now()",
            &[
                (Column::WorkerId, "$2"),
                (Column::ClaimEpoch, &claimed_epoch_sql("wr.")),
                (Column::AvailableAt, "now() + $3 * INTERVAL '1 millisecond'"),
                (Column::Attempts, &claimed_attempts_sql("wr.")),
                (Column::StartedAt, &claimed_started_at_sql("wr.", "now()")),
            ],
        ),
        first_execution = first_execution_sql("wr.", "now()"),
    )
}
