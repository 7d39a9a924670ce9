//! Which runs a claim takes, as plain Rust: the claim order ([`Candidate::order`]) and the
//! admission of each candidate into the free slots of its concurrency key and of its
//! queue and into the starts left in their rate windows ([`Admission`]); [`admit_in_order`] walks
//! the candidates in claim order.
//!
//! This is the rule the SQL stores write as one claim statement ([`PENDING_ORDER`],
//! [`slots_held`], [`admitted`], [`key_limit`], [`queue_slots_held`], [`is_start`] and the
//! [`RateWindow`] renderings); a store that claims in code runs it as it is, and the
//! conformance suite holds every store's claim to it. The walk admits every run that fits,
//! counting what it took. A store may take fewer runs than the limits allow in one claim,
//! never more; the SQL claims do in two known cases, and the next claim takes the rest:
//!
//! - they look at a bounded number of keyed candidates ([`keyed_candidates`]);
//! - they rank a key's candidates together whatever their limits, so when the runs of one
//!   key have different limits (their own, or their queues' limits per key), a candidate
//!   refused for its smaller limit still takes a rank, and a candidate with a larger limit
//!   ranked after it may be refused too.
//!
//! [`PENDING_ORDER`]: super::PENDING_ORDER
//! [`slots_held`]: super::slots_held
//! [`admitted`]: super::admitted
//! [`key_limit`]: super::key_limit
//! [`queue_slots_held`]: super::queue_slots_held
//! [`is_start`]: super::is_start
//! [`keyed_candidates`]: super::keyed_candidates

use std::cmp::Reverse;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::claim::{HOLDS_QUEUE_SLOT, HOLDS_SLOT, RateWindow, TAKES_QUEUE_SLOT, TAKES_SLOT};
use super::runs::{CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING};
use crate::model::{RunStatus, WorkflowRun};
use crate::queue::{Queue, RateLimit};

/// A run a claim may take, as the admission sees it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The run.
    pub id: Uuid,
    /// Its status (pending, sleeping, or running for a takeover).
    pub status: RunStatus,
    /// Its priority (counted among pending runs only).
    pub priority: i32,
    /// When it became claimable.
    pub available_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// Its concurrency key and the run's own limit.
    pub key: Option<(String, u32)>,
    /// Its queue.
    pub queue: String,
    /// A claim set its `started_at` before: claiming it again is no start.
    pub started: bool,
}

/// Whether a claim by `claimer` at `now` may take `run` (its queue and workflow aside, which
/// the claim's filter decides): a run whose `available_at` passed in a status a claim takes
/// ([`CLAIM_PENDING`], [`CLAIM_DUE`], [`CLAIM_EXPIRED`]), or a running run of *another*
/// worker whose heartbeat row is stale ([`CLAIM_ORPHANED`], `stale`), in either case before
/// its deadline (a run past it is expired, [`EXPIRE`]).
///
/// [`EXPIRE`]: super::EXPIRE
pub fn claimable(
    run: &WorkflowRun,
    claimer: &str,
    stale: impl Fn(&str) -> bool,
    now: DateTime<Utc>,
) -> bool {
    let due = CLAIM_PENDING.from.contains(&run.status)
        || CLAIM_DUE.from.contains(&run.status)
        || CLAIM_EXPIRED.from.contains(&run.status);
    let available = due && run.available_at.is_some_and(|at| at <= now);
    let orphaned = CLAIM_ORPHANED.from.contains(&run.status)
        && run
            .worker_id
            .as_deref()
            .is_some_and(|worker| worker != claimer && stale(worker));
    (available || orphaned) && run.deadline_at.is_none_or(|deadline| deadline > now)
}

/// Where a candidate comes in the claim order, smallest first.
pub type ClaimOrder = (u8, Reverse<i32>, Option<DateTime<Utc>>, DateTime<Utc>, Uuid);

impl Candidate {
    /// `run` as a candidate, with its priority and its concurrency key (the key and the
    /// run's own limit), which a store keeps beside the run.
    pub fn of(run: &WorkflowRun, priority: i32, key: Option<(String, u32)>) -> Self {
        Candidate {
            id: run.id,
            status: run.status,
            priority,
            available_at: run.available_at,
            created_at: run.created_at,
            key,
            queue: run.queue.clone(),
            started: run.started_at.is_some(),
        }
    }

    /// Runs of dead workers first (their lease expired, or their heartbeat went stale: a
    /// backlog never delays recovery), then pending runs by priority, then runs whose
    /// sleep is over; each group by `available_at`, then `created_at` (then id).
    pub fn order(&self) -> ClaimOrder {
        let group = if CLAIM_EXPIRED.from.contains(&self.status) {
            0
        } else if CLAIM_PENDING.from.contains(&self.status) {
            1
        } else {
            2
        };
        let priority = if group == 1 { self.priority } else { 0 };
        (
            group,
            Reverse(priority),
            self.available_at,
            self.created_at,
            self.id,
        )
    }

    /// Its claim is a start, which rate limits count: a pending run never claimed before.
    pub fn starting(&self) -> bool {
        CLAIM_PENDING.from.contains(&self.status) && !self.started
    }
}

/// The limit a keyed run's key slots are counted against: the smaller of its own limit and
/// its queue's limit per key ([`key_limit`](super::key_limit) in SQL).
pub fn key_slots(own: u32, queue: Option<u32>) -> u32 {
    queue.map_or(own, |queue| queue.min(own))
}

/// A configured queue as a claim sees it.
#[derive(Debug, Clone)]
struct Budget {
    concurrency: Option<u32>,
    /// The slots its running runs hold, and those this claim took.
    held: u32,
    rate: Option<RateLimit>,
    window: RateWindow,
    key_rate: Option<RateLimit>,
    key_concurrency: Option<u32>,
}

/// The free slots and starts a claim admits candidates into, counting what it took.
#[derive(Debug)]
pub struct Admission {
    now: DateTime<Utc>,
    queues: HashMap<String, Budget>,
    /// The running runs of each key in the namespace, and those this claim took.
    key_held: HashMap<String, u32>,
    /// The rate window of each key, and the starts this claim counted in it.
    key_windows: HashMap<String, RateWindow>,
}

impl Admission {
    /// The admission of a claim at `now`, given the namespace's configured queues, the
    /// runs that hold slots now (their status, key and queue) and the keys' rate windows.
    pub fn new<'a>(
        now: DateTime<Utc>,
        queues: impl IntoIterator<Item = &'a Queue>,
        runs: impl IntoIterator<Item = (RunStatus, Option<&'a str>, &'a str)>,
        key_windows: &HashMap<String, RateWindow>,
    ) -> Self {
        let mut queues: HashMap<String, Budget> = queues
            .into_iter()
            .map(|queue| {
                let budget = Budget {
                    concurrency: queue.concurrency,
                    held: 0,
                    rate: queue.rate_limit,
                    window: RateWindow {
                        start: queue.window_start,
                        starts: queue.window_starts,
                    },
                    key_rate: queue.key_rate_limit,
                    key_concurrency: queue.key_concurrency,
                };
                (queue.name.clone(), budget)
            })
            .collect();
        let mut key_held = HashMap::new();
        for (status, key, queue) in runs {
            if let Some(key) = key.filter(|_| HOLDS_SLOT.contains(&status)) {
                *key_held.entry(key.to_owned()).or_insert(0) += 1;
            }
            if let Some(budget) = queues.get_mut(queue)
                && HOLDS_QUEUE_SLOT.contains(&status)
            {
                budget.held += 1;
            }
        }
        Admission {
            now,
            queues,
            key_held,
            key_windows: key_windows.clone(),
        }
    }

    /// Admits `candidate` when it fits (a free slot of its key and of its queue, a start
    /// left in its queue's window and in its key's) and counts what it takes.
    pub fn admit(&mut self, candidate: &Candidate) -> bool {
        let now = self.now;
        let budget = self.queues.get(&candidate.queue);
        let takes_key = TAKES_SLOT.contains(&candidate.status);
        let takes_queue = TAKES_QUEUE_SLOT.contains(&candidate.status);
        let starting = candidate.starting();
        if let (Some((key, own)), true) = (&candidate.key, takes_key) {
            let limit = key_slots(*own, budget.and_then(|budget| budget.key_concurrency));
            if self.key_held.get(key).copied().unwrap_or(0) >= limit {
                return false;
            }
        }
        if let Some(budget) = budget {
            if let (Some(limit), true) = (budget.concurrency, takes_queue)
                && budget.held >= limit
            {
                return false;
            }
            if let (Some(rate), true) = (budget.rate, starting)
                && budget.window.starts_left(&rate, now) == 0
            {
                return false;
            }
            if let (Some(rate), Some((key, _)), true) = (budget.key_rate, &candidate.key, starting)
                && self.key_window(key).starts_left(&rate, now) == 0
            {
                return false;
            }
        }
        // It fits: count it.
        if let (Some((key, _)), true) = (&candidate.key, takes_key) {
            *self.key_held.entry(key.clone()).or_insert(0) += 1;
        }
        let Some(budget) = self.queues.get_mut(&candidate.queue) else {
            return true;
        };
        if takes_queue && budget.concurrency.is_some() {
            budget.held += 1;
        }
        if !starting {
            return true;
        }
        if let Some(rate) = budget.rate {
            budget.window = budget.window.after(&rate, now, 1);
        }
        if let (Some(rate), Some((key, _))) = (budget.key_rate, &candidate.key) {
            let window = self.key_window(key).after(&rate, now, 1);
            self.key_windows.insert(key.clone(), window);
        }
        true
    }

    /// The rate window of `key` as this claim counted it.
    fn key_window(&self, key: &str) -> RateWindow {
        self.key_windows.get(key).copied().unwrap_or(RateWindow {
            start: None,
            starts: 0,
        })
    }

    /// The rate windows after the claim: of each configured queue, and of each key.
    pub fn into_windows(
        self,
    ) -> (
        impl Iterator<Item = (String, RateWindow)>,
        HashMap<String, RateWindow>,
    ) {
        let queues = self
            .queues
            .into_iter()
            .map(|(name, budget)| (name, budget.window));
        (queues, self.key_windows)
    }
}

/// The runs a claim of at most `limit` runs takes from `candidates` (in any order): in
/// claim order, each one `admission` admits, until `limit`. The admission counts exactly
/// the runs taken (the walk stops at the limit); its windows are then the claim's
/// ([`Admission::into_windows`]).
pub fn admit_in_order(
    mut candidates: Vec<Candidate>,
    admission: &mut Admission,
    limit: u32,
) -> Vec<Uuid> {
    candidates.sort_by_key(Candidate::order);
    candidates
        .iter()
        .filter(|candidate| admission.admit(candidate))
        .map(|candidate| candidate.id)
        .take(limit as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn candidate(status: RunStatus, key: Option<(&str, u32)>, queue: &str) -> Candidate {
        Candidate {
            id: Uuid::now_v7(),
            status,
            priority: 0,
            available_at: None,
            created_at: Utc::now(),
            key: key.map(|(key, limit)| (key.to_owned(), limit)),
            queue: queue.to_owned(),
            started: false,
        }
    }

    fn queue(name: &str) -> Queue {
        Queue {
            name: name.to_owned(),
            concurrency: None,
            rate_limit: None,
            key_rate_limit: None,
            key_concurrency: None,
            window_start: None,
            window_starts: 0,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    fn admitted(admission: &mut Admission, candidates: &[Candidate]) -> usize {
        candidates.iter().filter(|c| admission.admit(c)).count()
    }

    #[test]
    fn the_order_puts_recovery_first_and_priority_among_pending_only() {
        let mut high = candidate(RunStatus::Pending, None, "q");
        high.priority = 5;
        let mut sleeping = candidate(RunStatus::Sleeping, None, "q");
        sleeping.priority = 9;
        let expired = candidate(RunStatus::Running, None, "q");
        let low = candidate(RunStatus::Pending, None, "q");
        let mut all = [&sleeping, &low, &high, &expired];
        all.sort_by_key(|c| c.order());
        let ids: Vec<Uuid> = all.iter().map(|c| c.id).collect();
        assert_eq!(ids, [expired.id, high.id, low.id, sleeping.id]);
    }

    #[test]
    fn a_key_takes_no_more_than_its_free_slots() {
        let no_queues: [&Queue; 0] = [];
        let running = [(RunStatus::Running, Some("k"), "q")];
        let mut admission = Admission::new(Utc::now(), no_queues, running, &HashMap::new());
        let runs = [
            candidate(RunStatus::Pending, Some(("k", 2)), "q"),
            candidate(RunStatus::Sleeping, Some(("k", 2)), "q"),
            candidate(RunStatus::Pending, Some(("j", 1)), "q"),
            candidate(RunStatus::Pending, None, "q"),
        ];
        assert_eq!(
            admitted(&mut admission, &runs),
            3,
            "one of k, j, the keyless"
        );
        // A takeover keeps its slot: admitted even when the key is full.
        assert!(admission.admit(&candidate(RunStatus::Running, Some(("k", 2)), "q")));
    }

    #[test]
    fn a_queue_caps_its_slots_its_keys_and_its_starts() {
        let mut limited = queue("q");
        limited.concurrency = Some(2);
        limited.key_concurrency = Some(1);
        let mut admission = Admission::new(Utc::now(), [&limited], [], &HashMap::new());
        let runs = [
            candidate(RunStatus::Pending, Some(("k", 5)), "q"),
            candidate(RunStatus::Pending, Some(("k", 5)), "q"),
            candidate(RunStatus::Pending, None, "q"),
            candidate(RunStatus::Pending, None, "q"),
            candidate(RunStatus::Pending, None, "other"),
        ];
        let taken: Vec<bool> = runs.iter().map(|c| admission.admit(c)).collect();
        assert_eq!(taken, [true, false, true, false, true]);
        assert_eq!(key_slots(5, Some(1)), 1);
        assert_eq!(key_slots(1, Some(5)), 1);
        assert_eq!(key_slots(3, None), 3);
    }

    #[test]
    fn rate_windows_count_starts_only() {
        let now = Utc::now();
        let rate = RateLimit {
            starts: 2,
            period: Duration::from_secs(60),
        };
        let mut rated = queue("q");
        rated.rate_limit = Some(rate);
        rated.key_rate_limit = Some(RateLimit { starts: 1, ..rate });
        let mut admission = Admission::new(now, [&rated], [], &HashMap::new());
        let mut resumed = candidate(RunStatus::Pending, None, "q");
        resumed.started = true;
        let runs = [
            candidate(RunStatus::Pending, Some(("a", 9)), "q"),
            candidate(RunStatus::Pending, Some(("a", 9)), "q"),
            resumed,
            candidate(RunStatus::Sleeping, None, "q"),
            candidate(RunStatus::Pending, None, "q"),
            candidate(RunStatus::Pending, None, "q"),
        ];
        let taken: Vec<bool> = runs.iter().map(|c| admission.admit(c)).collect();
        assert_eq!(taken, [true, false, true, true, true, false]);
        let (queues, keys) = admission.into_windows();
        let queues: HashMap<String, RateWindow> = queues.collect();
        assert_eq!(queues["q"].starts, 2);
        assert_eq!(queues["q"].start, Some(now));
        assert_eq!(keys["a"].starts, 1);
    }

    #[test]
    fn the_walk_takes_in_claim_order_and_counts_only_what_it_took() {
        let mut limited = queue("q");
        limited.concurrency = Some(3);
        let mut admission = Admission::new(Utc::now(), [&limited], [], &HashMap::new());
        let mut urgent = candidate(RunStatus::Pending, None, "q");
        urgent.priority = 9;
        let runs = vec![
            candidate(RunStatus::Sleeping, None, "q"),
            candidate(RunStatus::Pending, None, "q"),
            urgent.clone(),
        ];
        let second = runs[1].id;
        assert_eq!(admit_in_order(runs, &mut admission, 2), [urgent.id, second]);
        // Two of the queue's three slots were counted, so one more fits.
        assert!(admission.admit(&candidate(RunStatus::Pending, None, "q")));
        assert!(!admission.admit(&candidate(RunStatus::Pending, None, "q")));
    }

    #[test]
    fn a_claim_takes_due_runs_and_the_runs_of_stale_workers_before_their_deadline() {
        let now = Utc::now();
        let earlier = now - chrono::TimeDelta::seconds(1);
        let later = now + chrono::TimeDelta::seconds(1);
        let fresh = |_: &str| false;
        let run = |status: RunStatus, worker: Option<&str>, at| {
            let mut run = WorkflowRun::for_tests(status, worker.map(str::to_owned));
            run.available_at = Some(at);
            run
        };
        for status in [RunStatus::Pending, RunStatus::Sleeping, RunStatus::Running] {
            assert!(claimable(
                &run(status, Some("w"), earlier),
                "me",
                fresh,
                now
            ));
            assert!(!claimable(&run(status, Some("w"), later), "me", fresh, now));
        }
        assert!(!claimable(
            &run(RunStatus::Paused, None, earlier),
            "me",
            fresh,
            now
        ));
        // A stale worker's run is taken before its lease ends, never by that worker.
        let held = run(RunStatus::Running, Some("dead"), later);
        assert!(claimable(&held, "me", |worker| worker == "dead", now));
        assert!(!claimable(&held, "dead", |worker| worker == "dead", now));
        let mut late = run(RunStatus::Pending, None, earlier);
        late.deadline_at = Some(now);
        assert!(!claimable(&late, "me", fresh, now));
        let candidate = Candidate::of(&late, 3, Some(("k".into(), 2)));
        assert_eq!((candidate.priority, candidate.started), (3, false));
    }
}
