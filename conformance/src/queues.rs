//! Named queues: the queue of a run, the queue store operations, and the claim's
//! queue filter, queue concurrency limit, concurrency limit per key and rate limits.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::limits::Field;
use tasks_core::{
    ClaimFilter, Concurrency, CreateRun, DEFAULT_QUEUE, LimitError, QueueOptions, RunStatus, Store,
    StoreError, WorkflowRun,
};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A pending run of a new workflow in `queue`, with an optional key of `limit`.
async fn create_in<S: Store + ?Sized>(
    store: &S,
    queue: &str,
    key: Option<(&str, u32)>,
) -> WorkflowRun {
    store
        .create_run(CreateRun {
            queue: Some(queue.to_owned()),
            concurrency: key.map(|(key, limit)| Concurrency::new(key, limit)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap()
}

async fn claim_with<S: Store + ?Sized>(
    store: &S,
    limit: u32,
    filter: &ClaimFilter,
) -> Vec<WorkflowRun> {
    claimed_runs(
        store
            .claim_runs_filtered(&new_worker(), LONG_LEASE, limit, filter)
            .await
            .unwrap(),
    )
}

async fn claim<S: Store + ?Sized>(store: &S, limit: u32) -> Vec<WorkflowRun> {
    claim_with(store, limit, &ClaimFilter::ALL).await
}

fn serving(queues: &[&str]) -> ClaimFilter {
    ClaimFilter {
        queues: Some(queues.iter().map(|q| (*q).to_owned()).collect()),
        workflows: None,
    }
}

fn sorted(mut ids: Vec<Uuid>) -> Vec<Uuid> {
    ids.sort();
    ids
}

/// A run is in the queue its creation named, else in the default queue; a queue name that
/// breaks the name rules is refused and nothing is stored.
pub async fn run_queue_is_stored_and_checked(setup: impl Setup) {
    let store = setup.store().await;
    let plain = create_pending(&store).await;
    assert_eq!(plain.queue, DEFAULT_QUEUE);
    let emails = create_in(&store, "emails/eu-1", None).await;
    assert_eq!(emails.queue, "emails/eu-1");
    assert_eq!(
        store.get_run(emails.id).await.unwrap().unwrap().queue,
        "emails/eu-1"
    );
    let claimed = claim(&store, 10).await;
    assert!(claimed.iter().all(|run| !run.queue.is_empty()));
    for (queue, field) in [
        ("", Field::Queue),
        ("e mails", Field::Queue),
        ("a\0b", Field::Queue),
        (&*"q".repeat(256), Field::Queue),
    ] {
        let refused = store
            .create_run(CreateRun {
                queue: Some(queue.to_owned()),
                ..CreateRun::new(unique_name())
            })
            .await;
        assert_err!(refused, StoreError::Limit(error) if error.field() == field);
    }
    let listed = store.list_runs(runs_page(10)).await.unwrap();
    assert_eq!(listed.data.len(), 2, "nothing else was stored");
}

/// Queues are put (created or replaced), read, listed by name and deleted; bad names and
/// limits are refused with nothing written.
pub async fn queue_operations_round_trip(setup: impl Setup) {
    let store = setup.store().await;
    assert_eq!(
        store.queues().unwrap().get_queue("emails").await.unwrap(),
        None
    );
    assert!(
        store
            .queues()
            .unwrap()
            .list_queues()
            .await
            .unwrap()
            .is_empty()
    );
    let put = store
        .queues()
        .unwrap()
        .put_queue(
            &QueueOptions::new("emails")
                .concurrency(10)
                .rate_limit(100, Duration::from_secs(60))
                .rate_limit_per_key(2, Duration::from_secs(30))
                .concurrency_per_key(4),
        )
        .await
        .unwrap();
    assert_eq!(put.name, "emails");
    assert_eq!(put.concurrency, Some(10));
    assert_eq!(put.key_concurrency, Some(4));
    let rate = put.rate_limit.unwrap();
    assert_eq!((rate.starts, rate.period), (100, Duration::from_secs(60)));
    let per_key = put.key_rate_limit.unwrap();
    assert_eq!(
        (per_key.starts, per_key.period),
        (2, Duration::from_secs(30))
    );
    assert_eq!((put.window_start, put.window_starts), (None, 0));
    assert_near_now(Some(put.created_at), "created_at");
    assert_eq!(
        store.queues().unwrap().get_queue("emails").await.unwrap(),
        Some(put.clone())
    );
    // A put replaces the limits; one left out is removed.
    let replaced = store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("emails").concurrency(3))
        .await
        .unwrap();
    assert_eq!(replaced.concurrency, Some(3));
    assert_eq!(replaced.rate_limit, None);
    assert_eq!(replaced.key_rate_limit, None);
    assert_eq!(replaced.key_concurrency, None);
    assert_eq!(replaced.created_at, put.created_at);
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("alerts"))
        .await
        .unwrap();
    let names: Vec<String> = store
        .queues()
        .unwrap()
        .list_queues()
        .await
        .unwrap()
        .into_iter()
        .map(|queue| queue.name)
        .collect();
    assert_eq!(names, ["alerts", "emails"]);
    // Another namespace sees none of them.
    let other = store.scoped(&unique_namespace()).unwrap();
    assert!(
        other
            .contract()
            .queues()
            .unwrap()
            .list_queues()
            .await
            .unwrap()
            .is_empty()
    );
    assert_err!(other.contract().queues().unwrap().delete_queue("emails").await, StoreError::QueueNotFound { name } if name == "emails");

    store
        .queues()
        .unwrap()
        .delete_queue("emails")
        .await
        .unwrap();
    assert_eq!(
        store.queues().unwrap().get_queue("emails").await.unwrap(),
        None
    );
    assert_err!(
        store.queues().unwrap().delete_queue("emails").await,
        StoreError::QueueNotFound { .. }
    );
    for (options, field) in [
        (QueueOptions::new("bad name"), Field::Queue),
        (QueueOptions::new(""), Field::Queue),
        (
            QueueOptions::new("q").concurrency(0),
            Field::QueueConcurrency,
        ),
        (
            QueueOptions::new("q").rate_limit(0, Duration::from_secs(1)),
            Field::RateLimit,
        ),
        (
            QueueOptions::new("q").rate_limit(1, Duration::ZERO),
            Field::RatePeriod,
        ),
        (
            QueueOptions::new("q").rate_limit_per_key(0, Duration::from_secs(1)),
            Field::RateLimit,
        ),
        (
            QueueOptions::new("q").concurrency_per_key(0),
            Field::KeyConcurrency,
        ),
        (
            QueueOptions::new("q").concurrency_per_key(u32::MAX),
            Field::KeyConcurrency,
        ),
    ] {
        assert_err!(store.queues().unwrap().put_queue(&options).await, StoreError::Limit(error) if error.field() == field);
    }
    assert_err!(
        store.queues().unwrap().get_queue("bad name").await,
        StoreError::Limit(LimitError::InvalidName { .. })
    );
    let names: Vec<String> = store
        .queues()
        .unwrap()
        .list_queues()
        .await
        .unwrap()
        .into_iter()
        .map(|queue| queue.name)
        .collect();
    assert_eq!(names, ["alerts"], "nothing was written by the refused puts");
}

/// A claim filtered by queue or workflow takes only the runs the filter admits, in every
/// group (pending runs, and runs whose sleep ended); the others stay for other claims.
pub async fn claim_filters_by_queue_and_workflow(setup: impl Setup) {
    let store = setup.store().await;
    let a = create_in(&store, "a", None).await;
    let a_keyed = create_in(&store, "a", Some(("k", 5))).await;
    let b = create_in(&store, "b", None).await;
    let plain = create_pending(&store).await;
    let only_a = claim_with(&store, 10, &serving(&["a"])).await;
    assert_eq!(sorted(ids(&only_a)), sorted(vec![a.id, a_keyed.id]));
    assert!(claim_with(&store, 10, &serving(&["a"])).await.is_empty());
    // By workflow name, in any queue.
    let by_workflow = ClaimFilter {
        queues: None,
        workflows: Some(vec![plain.workflow_name.clone()]),
    };
    assert_eq!(ids(&claim_with(&store, 10, &by_workflow).await), [plain.id]);
    // Both filters must match.
    let both = ClaimFilter {
        queues: Some(vec!["a".to_owned()]),
        workflows: Some(vec![b.workflow_name.clone()]),
    };
    assert!(claim_with(&store, 10, &both).await.is_empty());
    assert_eq!(
        ids(&claim_with(&store, 10, &serving(&["b", "c"])).await),
        [b.id]
    );

    // A run of b whose sleep ended is not woken by a claim serving a only.
    let wake = Utc::now() + chrono::Duration::milliseconds(200);
    store
        .sleep_run(b.id, &holder(&b_running(&store, b.id).await), wake)
        .await
        .unwrap();
    sleep_past(wake).await;
    assert!(claim_with(&store, 10, &serving(&["a"])).await.is_empty());
    assert_eq!(ids(&claim(&store, 10).await), [b.id]);
    // A bad filter is refused.
    assert_err!(
        store
            .claim_runs_filtered(&new_worker(), LONG_LEASE, 1, &serving(&["bad name"]))
            .await,
        StoreError::Limit(LimitError::InvalidName { .. })
    );
}

/// The run `id`, which is running.
async fn b_running<S: Store + ?Sized>(store: &S, id: Uuid) -> WorkflowRun {
    let run = store.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    run
}

/// No more runs of a queue with a concurrency limit run at once than the limit; runs of
/// other queues are taken past its backlog; a finished run frees its slot.
pub async fn claim_respects_the_queue_limit(setup: impl Setup) {
    let store = setup.store().await;
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("limited").concurrency(2))
        .await
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(create_in(&store, "limited", None).await);
    }
    let other = create_pending(&store).await;
    let first = claim(&store, 10).await;
    assert_eq!(
        sorted(ids(&first)),
        sorted(vec![runs[0].id, runs[1].id, other.id]),
        "two of the limited queue, in order, and the other queue's"
    );
    assert!(claim(&store, 10).await.is_empty(), "the queue is full");
    let later = create_pending(&store).await;
    assert_eq!(
        ids(&claim(&store, 10).await),
        [later.id],
        "the full queue's backlog holds up no other queue"
    );
    let done = first.iter().find(|run| run.id == runs[0].id).unwrap();
    store
        .complete_run(done.id, &holder(done), json!(null))
        .await
        .unwrap();
    assert_eq!(
        ids(&claim(&store, 10).await),
        [runs[2].id],
        "one slot freed"
    );
    assert!(claim(&store, 10).await.is_empty());
    // Raising the limit takes effect at the next claim; removing it lifts it.
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("limited").concurrency(3))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, 10).await), [runs[3].id]);
    store
        .queues()
        .unwrap()
        .delete_queue("limited")
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, 10).await), [runs[4].id]);
}

/// A limit set by another handle on the namespace (another process, say) holds from the
/// next claim of a store that has been claiming without one, and a limit removed elsewhere
/// stops holding (a store may pick its claim statement by what it last saw of the
/// namespace's queues; what it saw must never let a limit be passed).
pub async fn a_limit_set_elsewhere_holds_at_the_next_claim(setup: impl Setup) {
    let store = setup.store().await;
    let elsewhere = store.scoped(store.namespace()).unwrap();
    let before = create_pending(&store).await;
    assert_eq!(
        ids(&claim(&store, 10).await),
        [before.id],
        "no queue has a limit"
    );
    elsewhere
        .contract()
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("limited").concurrency(1))
        .await
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(create_in(&store, "limited", None).await);
    }
    assert_eq!(
        ids(&claim(&store, 10).await),
        [runs[0].id],
        "the limit set elsewhere holds at once"
    );
    assert!(claim(&store, 10).await.is_empty(), "the queue is full");
    elsewhere
        .contract()
        .queues()
        .unwrap()
        .delete_queue("limited")
        .await
        .unwrap();
    assert_eq!(
        sorted(ids(&claim(&store, 10).await)),
        sorted(vec![runs[1].id, runs[2].id]),
        "the limit removed elsewhere holds no more"
    );
    assert!(claim(&store, 10).await.is_empty());
    let after = create_pending(&store).await;
    assert_eq!(ids(&claim(&store, 10).await), [after.id]);
    // And set again: the store that saw none since claims within it again.
    elsewhere
        .contract()
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new(DEFAULT_QUEUE).rate_limit(1, Duration::from_secs(3600)))
        .await
        .unwrap();
    let first = create_pending(&store).await;
    let second = create_pending(&store).await;
    assert_eq!(
        ids(&claim(&store, 10).await),
        [first.id],
        "one start an hour"
    );
    assert!(claim(&store, 10).await.is_empty());
    let waiting = store.get_run(second.id).await.unwrap().unwrap();
    assert_eq!(
        waiting.status,
        RunStatus::Pending,
        "the next start waits its window"
    );
}

/// A sleeping run holds no slot of its queue: the queue's next run runs meanwhile, and the
/// sleeper wakes only when a slot is free again, continuing its attempt. A run with a key
/// in a limited queue needs a free slot of both.
pub async fn queue_slots_follow_the_running_status(setup: impl Setup) {
    let store = setup.store().await;
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("one").concurrency(1))
        .await
        .unwrap();
    let first = create_in(&store, "one", None).await;
    let second = create_in(&store, "one", None).await;
    let claimed = claim(&store, 10).await;
    assert_eq!(ids(&claimed), [first.id]);
    let wake = Utc::now() + chrono::Duration::milliseconds(300);
    store
        .sleep_run(first.id, &holder(&claimed[0]), wake)
        .await
        .unwrap();
    let running = claim(&store, 10).await;
    assert_eq!(ids(&running), [second.id], "the sleeper freed its slot");
    sleep_past(wake).await;
    assert!(
        claim(&store, 10).await.is_empty(),
        "the woken run waits for a free slot"
    );
    store
        .lifecycle()
        .unwrap()
        .pause_run(second.id)
        .await
        .unwrap();
    let woken = claim(&store, 10).await;
    assert_eq!(ids(&woken), [first.id], "a paused run holds no slot");
    assert_eq!(woken[0].attempts, 1, "waking continues the attempt");
    store
        .complete_run(first.id, &holder(&woken[0]), json!(null))
        .await
        .unwrap();

    // Keys in a limited queue: queue limit 2, key limit 1.
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("mixed").concurrency(2))
        .await
        .unwrap();
    let k1 = create_in(&store, "mixed", Some(("k", 1))).await;
    let k2 = create_in(&store, "mixed", Some(("k", 1))).await;
    let j1 = create_in(&store, "mixed", Some(("j", 5))).await;
    let free1 = create_in(&store, "mixed", None).await;
    let taken = claim(&store, 10).await;
    assert_eq!(
        sorted(ids(&taken)),
        sorted(vec![k1.id, j1.id]),
        "one of key k (its limit), then one more of the queue (its limit)"
    );
    assert!(claim(&store, 10).await.is_empty());
    let done = taken.iter().find(|run| run.id == k1.id).unwrap();
    store
        .complete_run(done.id, &holder(done), json!(null))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, 10).await), [k2.id]);
    assert!(claim(&store, 10).await.is_empty());
    let waiting = store.get_run(free1.id).await.unwrap().unwrap();
    assert_eq!(waiting.status, RunStatus::Pending, "the queue is full");
}

/// A queue's rate limit lets at most N runs start per window; the others stay pending and
/// start in later windows. Resumes after a sleep are not starts.
pub async fn rate_limit_spreads_starts_over_windows(setup: impl Setup) {
    let store = setup.store().await;
    const PERIOD: Duration = Duration::from_millis(1_500);
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("rated").rate_limit(2, PERIOD))
        .await
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(create_in(&store, "rated", None).await);
    }
    let other = create_pending(&store).await;
    // The window opens during the first claim, by the database's clock: after
    // `window_opening`, before `window_opened`.
    let window_opening = tokio::time::Instant::now();
    let first = claim(&store, 10).await;
    let window_opened = tokio::time::Instant::now();
    assert_eq!(
        sorted(ids(&first)),
        sorted(vec![runs[0].id, runs[1].id, other.id]),
        "two starts of the rated queue, and the other queue's run"
    );
    let queue = store
        .queues()
        .unwrap()
        .get_queue("rated")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue.window_starts, 2);
    assert_near_now(queue.window_start, "window_start");
    // A resume after a sleep is not a start: it is claimed although no start is left.
    let sleeper = first.iter().find(|run| run.id == runs[0].id).unwrap();
    store
        .sleep_run(sleeper.id, &holder(sleeper), Utc::now())
        .await
        .unwrap();
    let resumed = claim(&store, 10).await;
    if window_opening.elapsed() < PERIOD {
        assert_eq!(ids(&resumed), [runs[0].id], "only the resume, no new start");
        assert!(claim(&store, 10).await.is_empty(), "the window is used up");
    }
    tokio::time::sleep_until(window_opened + PERIOD + Duration::from_millis(100)).await;
    let second: Vec<Uuid> = claim(&store, 10)
        .await
        .iter()
        .map(|run| run.id)
        .filter(|id| *id != runs[0].id)
        .collect();
    assert_eq!(second.len(), 2, "two more starts in the next window");
    assert!(
        second
            .iter()
            .all(|id| runs[2..].iter().any(|run| run.id == *id))
    );
    let queue = store
        .queues()
        .unwrap()
        .get_queue("rated")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue.window_starts, 2, "a new window counts its own starts");
}

/// A queue's rate limit per key lets at most N runs of each key start per window; other
/// keys, runs without a key, and resumes are not held back by a key's used-up window.
pub async fn per_key_rate_limit_spreads_each_keys_starts(setup: impl Setup) {
    let store = setup.store().await;
    const PERIOD: Duration = Duration::from_millis(1_500);
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("per-key").rate_limit_per_key(1, PERIOD))
        .await
        .unwrap();
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(create_in(&store, "per-key", Some(("a", 10))).await);
    }
    let mut b = Vec::new();
    for _ in 0..2 {
        b.push(create_in(&store, "per-key", Some(("b", 10))).await);
    }
    let free = create_in(&store, "per-key", None).await;
    // The same key in a queue without the limit is not held back.
    let elsewhere = create_in(&store, "other", Some(("a", 10))).await;
    // The windows open during the first claim, by the database's clock: after `opening`,
    // before `opened`.
    let opening = tokio::time::Instant::now();
    let first = claim(&store, 10).await;
    let opened = tokio::time::Instant::now();
    assert_eq!(
        sorted(ids(&first)),
        sorted(vec![a[0].id, b[0].id, free.id, elsewhere.id]),
        "one start of each key, the keyless run, and the key's run in another queue"
    );
    let sleeper = first.iter().find(|run| run.id == a[0].id).unwrap();
    store
        .sleep_run(sleeper.id, &holder(sleeper), Utc::now())
        .await
        .unwrap();
    let mut later = ids(&claim(&store, 10).await);
    assert!(
        later.contains(&a[0].id),
        "a resume is not a start: {later:?}"
    );
    if opening.elapsed() < PERIOD {
        assert_eq!(later, [a[0].id], "both keys' windows are used up");
    }
    tokio::time::sleep_until(opened + PERIOD + Duration::from_millis(100)).await;
    later.extend(ids(&claim(&store, 10).await));
    later.retain(|id| *id != a[0].id);
    assert_eq!(
        sorted(later),
        sorted(vec![a[1].id, b[1].id]),
        "one more start of each key in the next window"
    );
    assert!(claim(&store, 10).await.is_empty());
}

/// Concurrent claimers never run more runs of a limited queue at once than its limit, and
/// never start more of a rated queue in a window than its rate.
pub async fn concurrent_claimers_respect_queue_limits(setup: impl Setup) {
    let store = Arc::new(setup.store().await);
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("contended").concurrency(3))
        .await
        .unwrap();
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("rated").rate_limit(4, Duration::from_secs(3600)))
        .await
        .unwrap();
    for _ in 0..12 {
        create_in(&*store, "contended", None).await;
        create_in(&*store, "rated", None).await;
    }
    for _ in 0..4 {
        create_pending(&*store).await;
    }
    const CLAIMERS: usize = 8;
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let mut tasks = Vec::new();
    for _ in 0..CLAIMERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            for _ in 0..5 {
                let claimed = store
                    .claim_runs(&new_worker(), LONG_LEASE, 2)
                    .await
                    .unwrap();
                mine.extend(claimed.into_iter().map(|claimed| claimed.run));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    let unique: HashSet<Uuid> = claimed.iter().map(|run| run.id).collect();
    assert_eq!(unique.len(), claimed.len(), "no run was claimed twice");
    let count = |queue: &str| claimed.iter().filter(|run| run.queue == queue).count();
    assert!(count("contended") <= 3, "{} running", count("contended"));
    assert!(count("rated") <= 4, "{} started", count("rated"));
    assert_eq!(count(DEFAULT_QUEUE), 4);
    // Whatever the races, the limits are reached once the claims are done.
    let rest = claim(&*store, 50).await;
    let total = |queue: &str| count(queue) + rest.iter().filter(|run| run.queue == queue).count();
    assert_eq!(total("contended"), 3);
    assert_eq!(total("rated"), 4);
}

/// A queue's concurrency limit per key caps how many runs of one key run at once: a keyed
/// run of the queue is claimed only while its key's running runs (in every queue of the
/// namespace) are fewer than the smaller of its own limit and the queue's. Runs without a
/// key are not limited by it, a changed setting applies from the next claim, and a
/// sleeping run holds no slot.
pub async fn per_key_concurrency_caps_each_keys_running_runs(setup: impl Setup) {
    let store = setup.store().await;
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("per-key").concurrency_per_key(2))
        .await
        .unwrap();
    let mut a = Vec::new();
    for _ in 0..4 {
        a.push(create_in(&store, "per-key", Some(("a", 10))).await);
    }
    // Its own limit is the smaller: it applies.
    let mut b = Vec::new();
    for _ in 0..2 {
        b.push(create_in(&store, "per-key", Some(("b", 1))).await);
    }
    let mut free = Vec::new();
    for _ in 0..3 {
        free.push(create_in(&store, "per-key", None).await);
    }
    // The same key in a queue without the limit: only its own limit applies to it.
    let elsewhere = create_in(&store, "other", Some(("a", 10))).await;
    let first = claim(&store, 20).await;
    let mut expected = vec![a[0].id, a[1].id, b[0].id, elsewhere.id];
    expected.extend(free.iter().map(|run| run.id));
    assert_eq!(
        sorted(ids(&first)),
        sorted(expected),
        "two of key a (the queue's limit), one of key b (its own), every keyless run, and \
         key a's run of the other queue"
    );
    assert!(claim(&store, 20).await.is_empty(), "key a is full");
    // Key a's slots are counted in every queue: it still holds two after the other
    // queue's run ends.
    let done = first.iter().find(|run| run.id == elsewhere.id).unwrap();
    store
        .complete_run(done.id, &holder(done), json!(null))
        .await
        .unwrap();
    assert!(claim(&store, 20).await.is_empty(), "key a holds two slots");
    let done = first.iter().find(|run| run.id == a[0].id).unwrap();
    store
        .complete_run(done.id, &holder(done), json!(null))
        .await
        .unwrap();
    let next = claim(&store, 20).await;
    assert_eq!(ids(&next), [a[2].id], "one slot of key a freed");
    // Raising the limit takes effect at the next claim.
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("per-key").concurrency_per_key(3))
        .await
        .unwrap();
    assert_eq!(ids(&claim(&store, 20).await), [a[3].id]);
    assert!(claim(&store, 20).await.is_empty());
    // A sleeping run holds no slot: a new run of the key runs meanwhile, and the sleeper
    // wakes only when a slot is free again.
    let sleeper = b_running(&store, a[1].id).await;
    let wake = Utc::now() + chrono::Duration::milliseconds(300);
    store
        .sleep_run(sleeper.id, &holder(&sleeper), wake)
        .await
        .unwrap();
    let a4 = create_in(&store, "per-key", Some(("a", 10))).await;
    assert_eq!(
        ids(&claim(&store, 20).await),
        [a4.id],
        "the sleeper freed its slot"
    );
    sleep_past(wake).await;
    assert!(
        claim(&store, 20).await.is_empty(),
        "the woken run waits for a free slot of its key"
    );
    // Lowering the limit below the running count takes no run away, and claims none.
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("per-key").concurrency_per_key(1))
        .await
        .unwrap();
    let done = b_running(&store, a4.id).await;
    store
        .complete_run(done.id, &holder(&done), json!(null))
        .await
        .unwrap();
    assert!(claim(&store, 20).await.is_empty(), "key a still holds two");
    // Removing the limit lifts it: the run's own limit is left.
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("per-key"))
        .await
        .unwrap();
    let woken = claim(&store, 20).await;
    assert_eq!(ids(&woken), [a[1].id]);
    assert_eq!(woken[0].attempts, 1, "waking continues the attempt");
}

/// Concurrent claimers never run more runs of one key of a queue at once than the queue's
/// limit per key, and leave keyless runs unlimited.
pub async fn concurrent_claimers_respect_the_per_key_limit(setup: impl Setup) {
    let store = Arc::new(setup.store().await);
    store
        .queues()
        .unwrap()
        .put_queue(&QueueOptions::new("keyed").concurrency_per_key(2))
        .await
        .unwrap();
    const KEYS: [&str; 3] = ["k0", "k1", "k2"];
    // The key of each run (the run's row does not carry it).
    let mut key_of = std::collections::HashMap::new();
    for _ in 0..6 {
        for key in KEYS {
            let run = create_in(&*store, "keyed", Some((key, 100))).await;
            key_of.insert(run.id, Some(key));
        }
    }
    for _ in 0..4 {
        let run = create_in(&*store, "keyed", None).await;
        key_of.insert(run.id, None);
    }
    const CLAIMERS: usize = 8;
    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let mut tasks = Vec::new();
    for _ in 0..CLAIMERS {
        let (store, barrier) = (store.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            for _ in 0..5 {
                let claimed = store
                    .claim_runs(&new_worker(), LONG_LEASE, 2)
                    .await
                    .unwrap();
                mine.extend(claimed.into_iter().map(|claimed| claimed.run));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    let unique: HashSet<Uuid> = claimed.iter().map(|run| run.id).collect();
    assert_eq!(unique.len(), claimed.len(), "no run was claimed twice");
    let of = |runs: &[WorkflowRun], key: Option<&str>| {
        runs.iter().filter(|run| key_of[&run.id] == key).count()
    };
    for key in KEYS {
        assert!(
            of(&claimed, Some(key)) <= 2,
            "{key}: {}",
            of(&claimed, Some(key))
        );
    }
    // Whatever the races, every key reaches its limit and every keyless run runs once the
    // claims are done.
    let rest = claim(&*store, 50).await;
    for key in KEYS {
        assert_eq!(of(&claimed, Some(key)) + of(&rest, Some(key)), 2, "{key}");
    }
    assert_eq!(of(&claimed, None) + of(&rest, None), 4);
}
