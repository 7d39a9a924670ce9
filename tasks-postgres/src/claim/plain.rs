//! The plain claim, for a namespace where no queue has a limit: runs of dead workers, then
//! pending runs, keyed runs under their key's limit and due runs, each read in its index's
//! order.

use super::{KEY_ROWS, claimed_tail, plain_keyed_scans, recovered, replace_shared};
use tasks_core::transition::{TAKES_SLOT, status_in};

/// The plain claim: the full claim (`full`) without the queues' limits, for a namespace
/// where no queue has one. Every group of runs is gated on that (`config`): in a namespace
/// with such a queue this statement claims nothing, and the store claims with the full one.
/// Binds and returns like the full claim.
pub(super) fn render_plain_claim_sql(by_queue: bool) -> String {
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
