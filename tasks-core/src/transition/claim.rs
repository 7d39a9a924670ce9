//! The claim's rules: the order in which a claim takes pending runs, the slots of
//! concurrency keys and of queues, and queues' rate windows.

use std::time::Duration;

use super::status_in;
use crate::model::RunStatus;

use RunStatus::{Pending, Running, Sleeping};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transition::{CLAIM_DUE, CLAIM_EXPIRED, CLAIM_PENDING};

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
}
