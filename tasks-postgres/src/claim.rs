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
//! [`PgStore::claim_runs_filtered`]: super::PgStore

use crate::rows::RUN_COLUMNS;
use crate::{children, prefixed};
use std::sync::LazyLock;
use tasks_core::model::RunStatus;
use tasks_core::transition::{
    CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, CLAIMED, Column, PENDING_ORDER,
    TAKES_QUEUE_SLOT, TAKES_SLOT, admitted, claimed_attempts_sql, claimed_started_at_sql,
    first_execution_sql, is_start, key_limit, pending_order, queue_slots_held,
    rate_starts_left_sql, rate_window_set_sql, slots_held, stale_workers, status_in,
};

#[cfg(doc)]
use tasks_core::transition::{EXPIRE, keyed_candidates};

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
const KEY_ROWS: &str = "seen AS (
                SELECT concurrency_key, claims FROM tasks.concurrency_keys
                 WHERE namespace = $1
                   AND concurrency_key = ANY(ARRAY(SELECT DISTINCT concurrency_key FROM admitted))
             ), locked AS (
                SELECT concurrency_key, claims FROM tasks.concurrency_keys
                 WHERE namespace = $1
                   AND concurrency_key = ANY(ARRAY(SELECT DISTINCT concurrency_key FROM admitted))
                 FOR UPDATE SKIP LOCKED
             )";

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

/// The statuses whose claim takes a slot of a key ([`TAKES_SLOT`]) or of a queue
/// ([`TAKES_QUEUE_SLOT`]).
fn takes_key_or_queue_slot() -> Vec<RunStatus> {
    let mut statuses = TAKES_SLOT.to_vec();
    statuses.extend(TAKES_QUEUE_SLOT.iter().filter(|s| !TAKES_SLOT.contains(s)));
    statuses
}

fn render_claim_runs_sql(by_queue: bool) -> String {
    // Keyless pending runs of the queues without a limit (those with one are `qpending`'s).
    let free = if by_queue {
        "SELECT f.* FROM (
                SELECT DISTINCT s.queue FROM unnest($7::text[]) s(queue)
                 WHERE s.queue <> ALL(ARRAY(SELECT queue FROM limited))
             ) s CROSS JOIN LATERAL (
                SELECT r.ctid, 0 AS grp, r.priority, r.available_at, r.created_at,
                       NULL::text AS concurrency_key, NULL::text AS queue, false AS starting
                  FROM tasks.workflow_runs r
                 WHERE r.namespace = $1 AND r.queue = s.queue AND {pending_r}
                   AND r.concurrency_key IS NULL AND r.available_at <= now()
                   AND (r.deadline_at IS NULL OR r.deadline_at > now())
                   AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                 ORDER BY {keyed_order}
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED
             ) f
             ), free_configured AS (
             SELECT * FROM free WHERE false"
    } else {
        // Two scans, of which one runs: without a configured queue (the common case) the
        // plain scan of the index in claim order, exactly as before queues existed; with
        // one, the scan that passes over the limited queues' runs. A filter on the queue in
        // the plain case would make the planner, which sees one queue value for every run,
        // expect almost no row to pass it and prefer a sequential scan and a sort.
        "SELECT ctid, 0 AS grp, priority, available_at, created_at,
                    NULL::text AS concurrency_key, NULL::text AS queue, false AS starting
               FROM tasks.workflow_runs
              WHERE namespace = $1 AND {pending} AND concurrency_key IS NULL
                AND available_at <= now()
                AND (deadline_at IS NULL OR deadline_at > now())
                AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                AND NOT (SELECT configured FROM config)
              ORDER BY {pending_order}
              LIMIT $4
              FOR UPDATE SKIP LOCKED
             ), free_configured AS (
             SELECT ctid, 0 AS grp, priority, available_at, created_at,
                    NULL::text AS concurrency_key, NULL::text AS queue, false AS starting
               FROM tasks.workflow_runs
              WHERE namespace = $1 AND {pending} AND concurrency_key IS NULL
                AND available_at <= now()
                AND (deadline_at IS NULL OR deadline_at > now())
                AND queue <> ALL(ARRAY(SELECT queue FROM limited))
                AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                AND (SELECT configured FROM config)
              ORDER BY {pending_order}
              LIMIT $4
              FOR UPDATE SKIP LOCKED"
    };
    let (recovered, tail) = (recovered(""), claimed_tail());
    let keyed_plain = plain_keyed_scans(
        "keyed_pending_plain",
        "keyed_due_plain",
        ", r.queue, false AS starting, NULL::integer AS key_starts_left",
    );
    let template = format!(
        "WITH {{expire}},
             -- The namespace's queues with a limit, as this statement's snapshot sees them:
             -- the slots each holds (its running runs, through the index on running runs by
             -- queue) and the starts its rate window has left (NULL: no rate limit).
             limited AS (
                SELECT q.name AS queue, q.concurrency, q.claims, h.held,
                       {{starts_left}} AS starts_left
                  FROM tasks.queues q CROSS JOIN LATERAL (
                       SELECT CASE WHEN q.concurrency IS NULL THEN 0 ELSE ({{queue_held}}) END
                  ) h(held)
                 WHERE q.namespace = $1 AND (q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL)
             ),
             -- The queues with a rate limit per key.
             key_rated AS (
                SELECT name AS queue, key_rate_limit, key_rate_period_ms FROM tasks.queues
                 WHERE namespace = $1 AND key_rate_limit IS NOT NULL
             ),
             -- The queues with a concurrency limit per key.
             key_limited AS (
                SELECT name AS queue, key_concurrency FROM tasks.queues
                 WHERE namespace = $1 AND key_concurrency IS NOT NULL
             ),
             -- Whether the namespace has a queue with a limit of any kind: without one, the
             -- claim reads its runs with the plain scans (see `free`).
             config AS (SELECT {{limited_queue_exists}} AS configured),
             -- Those this claim may take runs of: served, and not full.
             open_queues AS (
                SELECT * FROM limited
                 WHERE (concurrency IS NULL OR held < concurrency)
                   AND ($7::text[] IS NULL OR queue = ANY($7))
             ),
             {recovered},
             -- Then pending runs, then sleeping runs whose sleep is over; each group in the
             -- order of its index, so a claim reads only the rows it takes. Pending runs
             -- without a concurrency key, of queues without a limit:
             free AS (
                {free}
             ),
             -- Pending runs without a key of the queues with a limit, per queue in claim
             -- order, no more than the queue has free slots.
             qpending AS (
                SELECT c.* FROM open_queues o CROSS JOIN LATERAL (
                    SELECT r.ctid, 0 AS grp, r.priority, r.available_at, r.created_at,
                           NULL::text AS concurrency_key, r.queue, {{start_r}} AS starting
                      FROM tasks.workflow_runs r
                     WHERE r.namespace = $1 AND r.queue = o.queue AND {{pending_r}}
                       AND r.concurrency_key IS NULL AND r.available_at <= now()
                       AND (r.deadline_at IS NULL OR r.deadline_at > now())
                       AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                       -- A queue whose rate window has no start left waits for the next one
                       -- to start runs; a run that started before is no start and goes on.
                       AND NOT ({{start_r}} AND COALESCE(o.starts_left, 1) = 0)
                     ORDER BY {{keyed_order}}
                     LIMIT LEAST(COALESCE(o.concurrency - o.held, $6), $6)
                ) c
             ),
             -- Sleeping runs without a key of the queues with a concurrency limit, whose
             -- sleep ended: waking takes a slot of the queue.
             -- Per queue, so that a namespace without such queues reads nothing here.
             qdue AS (
                SELECT c.* FROM open_queues o CROSS JOIN LATERAL (
                    SELECT r.ctid, 1 AS grp, r.priority, r.available_at, r.created_at,
                           NULL::text AS concurrency_key, r.queue, false AS starting
                      FROM tasks.workflow_runs r
                     WHERE r.namespace = $1 AND {{sleeping_r}} AND r.concurrency_key IS NULL
                       AND r.queue = o.queue AND r.available_at <= now()
                       AND (r.deadline_at IS NULL OR r.deadline_at > now())
                       AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                     ORDER BY r.available_at, r.created_at
                     LIMIT LEAST(o.concurrency - o.held, $6)
                ) c
                 WHERE o.concurrency IS NOT NULL
             ),
             -- Runs with a key whose claim takes a slot of it (pending ones in claim order,
             -- then sleeping ones whose sleep ended), past the keys without a free slot: a
             -- key's running runs are counted through the index on running runs by key, and
             -- compared to the run's limit, capped by its queue's limit per key. In
             -- a queue with a rate limit per key, the key's row gives its window, and starts
             -- of a key whose window is used up are passed over.
             keyed_pending_configured AS (
                SELECT r.ctid, 0 AS grp, r.priority, r.available_at, r.created_at,
                       r.concurrency_key, h.key_limit AS concurrency_limit, h.held, r.queue,
                       {{start_r}} AS starting, kw.key_starts_left
                  FROM tasks.workflow_runs r CROSS JOIN LATERAL ({{held_and_limit}}) h(held, key_limit)
                  -- One value per run, read only for a run of a queue with a rate limit per
                  -- key: a join here would let the planner trade the index order for a
                  -- sequential scan and a sort of every pending run.
                  CROSS JOIN LATERAL (
                       SELECT (SELECT {{key_starts_left}}
                                 FROM key_rated kr
                                 LEFT JOIN tasks.concurrency_keys k
                                        ON k.namespace = $1
                                       AND k.concurrency_key = r.concurrency_key
                                WHERE kr.queue = r.queue)
                  ) kw(key_starts_left)
                 WHERE r.namespace = $1 AND {{keyed_pending}} AND r.concurrency_key IS NOT NULL
                   AND (SELECT configured FROM config)
                   AND r.available_at <= now()
                   AND (r.deadline_at IS NULL OR r.deadline_at > now())
                   AND h.held < h.key_limit
                   AND ($7::text[] IS NULL OR r.queue = ANY($7))
                   AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                   AND r.queue <> ALL(ARRAY(SELECT queue FROM limited
                                             WHERE concurrency IS NOT NULL AND held >= concurrency))
                   AND NOT ({{start_r}} AND r.queue = ANY(ARRAY(SELECT queue FROM limited
                                                                 WHERE starts_left = 0)))
                   AND NOT ({{start_r}} AND COALESCE(kw.key_starts_left, 1) = 0)
                 ORDER BY {{keyed_order}}
                 LIMIT $6
             ), keyed_due_configured AS (
                SELECT r.ctid, 1 AS grp, r.priority, r.available_at, r.created_at,
                       r.concurrency_key, h.key_limit AS concurrency_limit, h.held, r.queue,
                       false AS starting,
                       NULL::integer AS key_starts_left
                  FROM tasks.workflow_runs r CROSS JOIN LATERAL ({{held_and_limit}}) h(held, key_limit)
                 WHERE r.namespace = $1 AND {{keyed_due}} AND r.concurrency_key IS NOT NULL
                   AND (SELECT configured FROM config)
                   AND r.available_at <= now()
                   AND (r.deadline_at IS NULL OR r.deadline_at > now())
                   AND h.held < h.key_limit
                   AND ($7::text[] IS NULL OR r.queue = ANY($7))
                   AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                   AND r.queue <> ALL(ARRAY(SELECT queue FROM limited
                                             WHERE concurrency IS NOT NULL AND held >= concurrency))
                 ORDER BY r.available_at, r.created_at
                 LIMIT $6
             ),
             -- Without a configured queue, the keyed runs as before queues existed.
             {keyed_plain},
             keyed_pending AS (
                SELECT * FROM keyed_pending_plain UNION ALL SELECT * FROM keyed_pending_configured
             ), keyed_due AS (
                SELECT * FROM keyed_due_plain UNION ALL SELECT * FROM keyed_due_configured
             ),
             -- No more starts of a key than its rate window has left...
             key_rated_candidates AS (
                SELECT * FROM (
                    SELECT c.*, row_number() OVER (
                               PARTITION BY c.concurrency_key, c.starting
                               ORDER BY c.grp, c.priority DESC, c.available_at, c.created_at) AS ksn
                      FROM (SELECT * FROM keyed_pending UNION ALL SELECT * FROM keyed_due) c
                ) ranked
                 WHERE NOT starting OR key_starts_left IS NULL OR ksn <= key_starts_left
             ),
             -- ...and no more runs of a key than it has free slots.
             key_admitted AS (
                SELECT ctid, grp, priority, available_at, created_at, concurrency_key, queue, starting
                  FROM (
                    SELECT c.*, row_number() OVER (
                               PARTITION BY c.concurrency_key
                               ORDER BY c.grp, c.priority DESC, c.available_at, c.created_at) AS n
                      FROM key_rated_candidates c
                ) ranked
                 WHERE {{admitted}}
             ),
             -- Then no more starts of a queue than its rate window has left...
             rated AS (
                SELECT ctid, grp, priority, available_at, created_at, concurrency_key, queue, starting
                  FROM (
                    SELECT c.*, l.starts_left, row_number() OVER (
                               PARTITION BY c.queue, c.starting
                               ORDER BY c.grp, c.priority DESC, c.available_at, c.created_at) AS sn
                      FROM (SELECT * FROM key_admitted UNION ALL SELECT * FROM qpending
                            UNION ALL SELECT * FROM qdue) c
                      LEFT JOIN limited l USING (queue)
                ) ranked
                 WHERE NOT starting OR starts_left IS NULL OR sn <= starts_left
             ),
             -- ...and no more runs of a queue than it has free slots.
             admitted AS (
                SELECT ctid, grp, priority, available_at, created_at, concurrency_key, queue
                  FROM (
                    SELECT c.*, l.concurrency, l.held, row_number() OVER (
                               PARTITION BY c.queue
                               ORDER BY c.grp, c.priority DESC, c.available_at, c.created_at) AS qn
                      FROM rated c LEFT JOIN limited l USING (queue)
                ) ranked
                 WHERE concurrency IS NULL OR {{queue_admitted}}
                 -- No more than the claim takes (see the plain claim's `admitted`).
                 ORDER BY grp, priority DESC, available_at, created_at
                 LIMIT $4
             ),
             -- The rows of those keys and of those limited queues as this statement's
             -- snapshot saw them, and locked as they are now. A key or queue whose row
             -- changed since the snapshot was claimed from by a claim this snapshot does not
             -- see: its count may be short, so it waits for the next claim; one whose row
             -- another claim holds is skipped the same way.
             {KEY_ROWS}, qlocked AS (
                SELECT name AS queue, claims FROM tasks.queues
                 WHERE namespace = $1
                   AND name = ANY(ARRAY(SELECT DISTINCT queue FROM admitted
                                         WHERE queue = ANY(ARRAY(SELECT queue FROM limited))))
                 FOR UPDATE SKIP LOCKED
             ), keyed AS (
                SELECT ctid, CASE WHEN {{pending}} THEN 0 ELSE 1 END AS grp, priority,
                       available_at, created_at, concurrency_key, queue, {{start}} AS starting
                  FROM tasks.workflow_runs
                 WHERE ctid = ANY(ARRAY(
                           SELECT a.ctid FROM admitted a
                             LEFT JOIN locked l USING (concurrency_key)
                             LEFT JOIN seen s USING (concurrency_key)
                             LEFT JOIN qlocked ql USING (queue)
                             LEFT JOIN limited lq USING (queue)
                            WHERE (a.concurrency_key IS NULL OR l.claims = s.claims)
                              AND (lq.queue IS NULL OR ql.claims = lq.claims)))
                   AND {{takes}}
                 FOR UPDATE SKIP LOCKED
             ),
             pending AS (
                SELECT ctid, concurrency_key, queue, starting FROM (
                    SELECT * FROM free UNION ALL SELECT * FROM free_configured
                    UNION ALL SELECT * FROM keyed
                ) c
                 ORDER BY grp, priority DESC, available_at, created_at
                 -- What recovery left of the batch.
                 LIMIT GREATEST($4 - (SELECT count(*) FROM recovered), 0)
             ),
             -- Every claim of a key's runs changes the key's row, and every claim of a
             -- limited queue's runs its queue's row (with its rate window), so that
             -- concurrent claims see it (above).
             counted AS (
                UPDATE tasks.concurrency_keys k
                   SET claims = k.claims + 1, {{key_window_set}}
                  FROM (SELECT p.concurrency_key,
                               count(*) FILTER (WHERE p.starting AND kr.queue IS NOT NULL)
                                   AS started,
                               max(kr.key_rate_period_ms) AS period
                          FROM pending p LEFT JOIN key_rated kr USING (queue)
                         WHERE p.concurrency_key IS NOT NULL
                         GROUP BY p.concurrency_key) p
                 WHERE k.namespace = $1 AND k.concurrency_key = p.concurrency_key
             ), qcounted AS (
                UPDATE tasks.queues q
                   SET claims = q.claims + 1, {{window_set}}
                  FROM (SELECT queue, count(*) FILTER (WHERE starting) AS started FROM pending
                         WHERE queue = ANY(ARRAY(SELECT queue FROM limited))
                         GROUP BY queue) p
                 WHERE q.namespace = $1 AND q.name = p.queue
             ), due AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND {{due}}
                   -- Sleeping runs with a key are the keyed group's, those of a queue with a
                   -- concurrency limit the queue's.
                   AND concurrency_key IS NULL
                   AND queue <> ALL(ARRAY(SELECT queue FROM limited WHERE concurrency IS NOT NULL))
                   AND available_at <= now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                   AND ($7::text[] IS NULL OR queue = ANY($7))
                   AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                 ORDER BY available_at, created_at
                 LIMIT GREATEST($4 - (SELECT count(*) FROM recovered) - (SELECT count(*) FROM pending), 0)
                 FOR UPDATE SKIP LOCKED
             ),
             {tail}"
    );
    let open = "q.window_start + q.rate_period_ms * INTERVAL '1 millisecond' > now()";
    let key_open = "k.window_start + kr.key_rate_period_ms * INTERVAL '1 millisecond' > now()";
    let counted_open = "k.window_start + p.period * INTERVAL '1 millisecond' > now()";
    replace_shared(&template)
        .replace("{sleeping_r}", &status_in("r.", &[RunStatus::Sleeping]))
        .replace(
            "{queue_held}",
            &queue_slots_held("tasks.workflow_runs", "$1", "q.name"),
        )
        // A key's slots held and its limit, in one aggregate subquery per run (memoized by
        // the planner per key): the limit evaluated out there, in the keyed runs' filter,
        // made the planner trade their index order for a sequential scan and a sort.
        .replace(
            "{held_and_limit}",
            &slots_held("tasks.workflow_runs", "$1", "r.concurrency_key").replacen(
                "SELECT count(*)",
                &format!(
                    "SELECT count(*), {}",
                    key_limit(
                        "r.concurrency_limit",
                        "(SELECT kl.key_concurrency FROM key_limited kl WHERE kl.queue = r.queue)",
                    )
                ),
                1,
            ),
        )
        .replace("{queue_admitted}", &admitted("held", "qn", "concurrency"))
        .replace(
            "{starts_left}",
            &rate_starts_left_sql("q.rate_limit", "q.window_starts", open),
        )
        .replace(
            "{window_set}",
            &rate_window_set_sql("q.", "q.rate_limit IS NOT NULL", open, "now()", "p.started"),
        )
        .replace(
            "{key_starts_left}",
            &rate_starts_left_sql("kr.key_rate_limit", "k.window_starts", key_open),
        )
        .replace(
            "{key_window_set}",
            &rate_window_set_sql(
                "k.",
                "p.period IS NOT NULL",
                counted_open,
                "now()",
                "p.started",
            ),
        )
        .replace("{start_r}", &is_start("r."))
        .replace("{start}", &is_start(""))
        // The runs of keys and of limited queues: a status that takes a slot of either.
        .replace("{takes}", &status_in("", &takes_key_or_queue_slot()))
}

/// The plain claim: [`render_claim_runs_sql`] without the queues' limits, for a namespace
/// where no queue has one. Every group of runs is gated on that (`config`): in a namespace
/// with such a queue this statement claims nothing, and the store claims with the full one.
/// Binds and returns like the full claim.
fn render_plain_claim_sql(by_queue: bool) -> String {
    // Keyless pending runs: of each served queue through the index by queue, or of every
    // queue in one scan of the index in claim order.
    let free = if by_queue {
        "SELECT f.* FROM (SELECT DISTINCT s.queue FROM unnest($7::text[]) s(queue)) s
             CROSS JOIN LATERAL (
                SELECT r.ctid, 0 AS grp, r.priority, r.available_at, r.created_at,
                       NULL::text AS concurrency_key
                  FROM tasks.workflow_runs r
                 WHERE r.namespace = $1 AND r.queue = s.queue AND {pending_r}
                   AND r.concurrency_key IS NULL AND r.available_at <= now()
                   AND (r.deadline_at IS NULL OR r.deadline_at > now())
                   AND ($8::text[] IS NULL OR r.workflow_name = ANY($8))
                   AND NOT (SELECT configured FROM config)
                 ORDER BY {keyed_order}
                 LIMIT $4
                 FOR UPDATE SKIP LOCKED
             ) f"
    } else {
        "SELECT ctid, 0 AS grp, priority, available_at, created_at,
                NULL::text AS concurrency_key
           FROM tasks.workflow_runs
          WHERE namespace = $1 AND {pending} AND concurrency_key IS NULL
            AND available_at <= now()
            AND (deadline_at IS NULL OR deadline_at > now())
            AND ($8::text[] IS NULL OR workflow_name = ANY($8))
            AND NOT (SELECT configured FROM config)
          ORDER BY {pending_order}
          LIMIT $4
          FOR UPDATE SKIP LOCKED"
    };
    let gate = "AND NOT (SELECT configured FROM config)";
    let (recovered, tail) = (recovered(gate), claimed_tail());
    let keyed_plain = plain_keyed_scans("keyed_pending", "keyed_due", "");
    let template = format!(
        "WITH {{expire}},
             config AS (SELECT {{limited_queue_exists}} AS configured),
             {recovered},
             -- Then pending runs, then sleeping runs whose sleep is over; each group in the
             -- order of its index, so a claim reads only the rows it takes. Pending runs
             -- without a concurrency key:
             free AS (
                {free}
             ),
             -- Runs with a key whose claim takes a slot of it (pending ones in claim order,
             -- then sleeping ones whose sleep ended), past the keys without a free slot: a
             -- key's running runs are counted through the index on running runs by key.
             {keyed_plain},
             -- No more runs of a key than it has free slots, and no more runs than the claim
             -- takes: the first of them in claim order, the only ones whose keys and rows
             -- are locked below (locking every candidate cost a row lock each, most of the
             -- keyed claim's time, and kept other claims off them until this one commits).
             admitted AS (
                SELECT * FROM (
                    SELECT c.*, row_number() OVER (
                               PARTITION BY c.concurrency_key
                               ORDER BY c.grp, c.priority DESC, c.available_at, c.created_at) AS n
                      FROM (SELECT * FROM keyed_pending UNION ALL SELECT * FROM keyed_due) c
                ) ranked
                 WHERE {{admitted}}
                 ORDER BY grp, priority DESC, available_at, created_at
                 LIMIT $4
             ),
             -- The rows of those keys as this statement's snapshot saw them, and locked as
             -- they are now. A key whose row changed since the snapshot was claimed from by
             -- a claim this snapshot does not see: its count may be short, so it waits for
             -- the next claim; a key whose row another claim holds is skipped the same way.
             {KEY_ROWS}, keyed AS (
                SELECT ctid, CASE WHEN {{pending}} THEN 0 ELSE 1 END AS grp, priority,
                       available_at, created_at, concurrency_key
                  FROM tasks.workflow_runs
                 WHERE ctid = ANY(ARRAY(
                           SELECT a.ctid FROM admitted a
                             JOIN locked l USING (concurrency_key)
                             JOIN seen s USING (concurrency_key)
                            WHERE l.claims = s.claims))
                   AND {{takes}}
                 FOR UPDATE SKIP LOCKED
             ),
             pending AS (
                SELECT ctid, concurrency_key FROM (
                    SELECT * FROM free UNION ALL SELECT * FROM keyed
                ) c
                 ORDER BY grp, priority DESC, available_at, created_at
                 -- What recovery left of the batch.
                 LIMIT GREATEST($4 - (SELECT count(*) FROM recovered), 0)
             ),
             -- Every claim of a key's runs changes the key's row, so that concurrent claims
             -- see it (above).
             counted AS (
                UPDATE tasks.concurrency_keys SET claims = claims + 1
                 WHERE namespace = $1
                   AND concurrency_key = ANY(ARRAY(
                           SELECT concurrency_key FROM pending WHERE concurrency_key IS NOT NULL))
             ), due AS (
                SELECT ctid FROM tasks.workflow_runs
                 WHERE namespace = $1 AND {{due}}
                   -- Sleeping runs with a key are the keyed group's.
                   AND concurrency_key IS NULL
                   AND NOT (SELECT configured FROM config)
                   AND available_at <= now()
                   AND (deadline_at IS NULL OR deadline_at > now())
                   AND ($7::text[] IS NULL OR queue = ANY($7))
                   AND ($8::text[] IS NULL OR workflow_name = ANY($8))
                 ORDER BY available_at, created_at
                 LIMIT GREATEST($4 - (SELECT count(*) FROM recovered) - (SELECT count(*) FROM pending), 0)
                 FOR UPDATE SKIP LOCKED
             ),
             {tail}"
    );
    replace_shared(&template).replace("{takes}", &status_in("", TAKES_SLOT))
}

/// The placeholders both claim statements have, replaced: the deadline expiry, the
/// statuses each group of runs is claimed from, the claim order, a key's slots held
/// (`{held}`) and its admission, the stale workers and the returned columns.
fn replace_shared(template: &str) -> String {
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
fn plain_keyed_scans(pending: &str, due: &str, columns: &str) -> String {
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
fn recovered(gate: &str) -> String {
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
fn claimed_tail() -> String {
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
                (Column::AvailableAt, "now() + $3 * INTERVAL '1 millisecond'"),
                (Column::Attempts, &claimed_attempts_sql("wr.")),
                (Column::StartedAt, &claimed_started_at_sql("wr.", "now()")),
            ],
        ),
        first_execution = first_execution_sql("wr.", "now()"),
    )
}
