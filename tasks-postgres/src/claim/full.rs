//! The full claim: the plain claim's groups of runs plus the queues' concurrency limits,
//! their rate windows and their limits per key.

use super::{KEY_ROWS, claimed_tail, plain_keyed_scans, recovered, replace_shared};
use tasks_core::model::RunStatus;
use tasks_core::transition::{
    TAKES_QUEUE_SLOT, TAKES_SLOT, admitted, is_start, key_limit, queue_slots_held,
    rate_starts_left_sql, rate_window_set_sql, slots_held, status_in,
};

/// The statuses whose claim takes a slot of a key ([`TAKES_SLOT`]) or of a queue
/// ([`TAKES_QUEUE_SLOT`]).
fn takes_key_or_queue_slot() -> Vec<RunStatus> {
    let mut statuses = TAKES_SLOT.to_vec();
    statuses.extend(TAKES_QUEUE_SLOT.iter().filter(|s| !TAKES_SLOT.contains(s)));
    statuses
}

pub(super) fn render_claim_runs_sql(by_queue: bool) -> String {
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
