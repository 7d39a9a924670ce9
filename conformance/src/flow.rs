//! Flow control in the claim: priorities and per-key concurrency limits.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::limits::Field;
use tasks_core::{Concurrency, CreateRun, LimitError, RunStatus, Store, StoreError, WorkflowRun};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A pending run of a new workflow with `priority` and an optional key of `limit`.
async fn create<S: Store + ?Sized>(
    store: &S,
    priority: i32,
    key: Option<(&str, u32)>,
) -> WorkflowRun {
    store
        .create_run(CreateRun {
            priority,
            concurrency: key.map(|(key, limit)| Concurrency::new(key, limit)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap()
}

async fn claim<S: Store + ?Sized>(store: &S, limit: u32) -> Vec<WorkflowRun> {
    claimed_runs(
        store
            .claim_runs(&new_worker(), LONG_LEASE, limit)
            .await
            .unwrap(),
    )
}

/// Pending runs are claimed by priority, higher first, then in creation order.
pub async fn claim_takes_higher_priority_first(setup: impl Setup) {
    let store = setup.store().await;
    let low = create(&store, -5, None).await;
    let default = create(&store, 0, None).await;
    let high = create(&store, 10, None).await;
    let default_later = create(&store, 0, None).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(claim(&store, 1).await[0].id);
    }
    assert_eq!(order, [high.id, default.id, default_later.id, low.id]);
    // Runs with a key take part in the same order.
    let keyed_low = create(&store, 0, Some(("k", 5))).await;
    let free_high = create(&store, 1, None).await;
    let keyed_high = create(&store, 2, Some(("k", 5))).await;
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(claim(&store, 1).await[0].id);
    }
    assert_eq!(order, [keyed_high.id, free_high.id, keyed_low.id]);
}

/// No more runs of a key run at once than its limit; a finished run frees its slot.
pub async fn claim_respects_the_key_limit(setup: impl Setup) {
    let store = setup.store().await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(create(&store, 0, Some(("customer-7", 2))).await);
    }
    let other = create(&store, 0, Some(("customer-8", 2))).await;
    let first = claim(&store, 10).await;
    let first_ids: HashSet<Uuid> = first.iter().map(|run| run.id).collect();
    assert_eq!(first.len(), 3, "two of customer-7 and one of customer-8");
    assert!(first_ids.contains(&runs[0].id) && first_ids.contains(&runs[1].id));
    assert!(first_ids.contains(&other.id));
    assert!(claim(&store, 10).await.is_empty(), "customer-7 is full");

    let done = first.iter().find(|run| run.id == runs[0].id).unwrap();
    store
        .complete_run(done.id, &holder(done), json!(null))
        .await
        .unwrap();
    let next = claim(&store, 10).await;
    assert_eq!(ids(&next), [runs[2].id], "one slot was freed");
    assert!(claim(&store, 10).await.is_empty());
}

/// A key with a backlog does not hold up the runs of other keys, nor runs without a key.
pub async fn hot_key_does_not_starve_other_keys(setup: impl Setup) {
    let store = setup.store().await;
    let mut hot = Vec::new();
    for _ in 0..120 {
        hot.push(create(&store, 0, Some(("hot", 1))).await);
    }
    let cold = create(&store, 0, Some(("cold", 1))).await;
    let free = create(&store, 0, None).await;
    assert_eq!(ids(&claim(&store, 1).await), [hot[0].id]);
    // The hot key is full: the next claims pass its 119 older runs.
    assert_eq!(ids(&claim(&store, 1).await), [cold.id]);
    assert_eq!(ids(&claim(&store, 1).await), [free.id]);
    assert!(claim(&store, 5).await.is_empty());
}

/// A sleeping run holds no slot: its key's next run runs meanwhile, and the sleeper wakes
/// only when a slot is free again.
pub async fn sleeping_run_holds_no_slot(setup: impl Setup) {
    let store = setup.store().await;
    let first = create(&store, 0, Some(("k", 1))).await;
    let second = create(&store, 0, Some(("k", 1))).await;
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
        .complete_run(second.id, &holder(&running[0]), json!(null))
        .await
        .unwrap();
    let woken = claim(&store, 10).await;
    assert_eq!(ids(&woken), [first.id]);
    assert_eq!(woken[0].attempts, 1, "waking continues the attempt");
}

/// Pausing or canceling a running run frees its slot; a run whose lease expired is taken
/// over although its key is full (it holds the slot).
pub async fn slots_follow_the_running_status(setup: impl Setup) {
    let store = setup.store().await;
    let runs = [
        create(&store, 0, Some(("k", 1))).await,
        create(&store, 0, Some(("k", 1))).await,
        create(&store, 0, Some(("k", 1))).await,
    ];
    let first = claim(&store, 10).await;
    assert_eq!(ids(&first), [runs[0].id]);
    store
        .lifecycle()
        .unwrap()
        .pause_run(runs[0].id)
        .await
        .unwrap();
    let second = claim(&store, 10).await;
    assert_eq!(ids(&second), [runs[1].id], "a paused run holds no slot");
    store
        .lifecycle()
        .unwrap()
        .cancel_run(runs[1].id)
        .await
        .unwrap();
    let third = claimed_runs(
        store
            .claim_runs(&new_worker(), SHORT_LEASE, 10)
            .await
            .unwrap(),
    );
    assert_eq!(ids(&third), [runs[2].id], "a canceled run holds no slot");
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let taken_over = claim(&store, 10).await;
    assert_eq!(
        ids(&taken_over),
        [runs[2].id],
        "the expired lease is taken over"
    );
    assert_eq!(taken_over[0].attempts, 2);
    // The resumed run waits for the slot.
    store
        .lifecycle()
        .unwrap()
        .resume_run(runs[0].id)
        .await
        .unwrap();
    assert!(claim(&store, 10).await.is_empty());
}

/// Keys are counted per namespace.
pub async fn keys_are_scoped_to_namespace(setup: impl Setup) {
    let store = setup.store().await;
    let other = store.scoped(&unique_namespace()).unwrap();
    create(&store, 0, Some(("shared", 1))).await;
    create(other.contract(), 0, Some(("shared", 1))).await;
    assert_eq!(claim(&store, 10).await.len(), 1);
    assert_eq!(claim(other.contract(), 10).await.len(), 1);
}

/// A concurrency limit of 0, or past the largest, and a key past the limits are refused;
/// nothing is stored.
pub async fn concurrency_values_are_checked(setup: impl Setup) {
    let store = setup.store().await;
    for (key, limit, field) in [
        ("k".to_owned(), 0, Field::ConcurrencyLimit),
        ("k".to_owned(), u32::MAX, Field::ConcurrencyLimit),
        ("k".repeat(513), 1, Field::ConcurrencyKey),
        ("a\0b".to_owned(), 1, Field::ConcurrencyKey),
    ] {
        let refused = store
            .create_run(CreateRun {
                concurrency: Some(Concurrency::new(key, limit)),
                ..CreateRun::new(unique_name())
            })
            .await;
        assert_err!(refused, StoreError::Limit(error) if error.field() == field);
    }
    assert!(matches!(
        Concurrency::new("k", 0).check(),
        Err(LimitError::OutOfRange { .. })
    ));
    let listed = store.list_runs(runs_page(10)).await.unwrap();
    assert!(listed.data.is_empty(), "nothing was stored");
}

/// Concurrent claimers never run more runs of a key at once than its limit.
pub async fn concurrent_claimers_respect_the_key_limit(setup: impl Setup) {
    let store = Arc::new(setup.store().await);
    for _ in 0..12 {
        create(&*store, 0, Some(("contended", 3))).await;
    }
    for _ in 0..4 {
        create(&*store, 0, None).await;
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
    let page = store
        .list_runs(tasks_core::ListRuns {
            statuses: vec![RunStatus::Running],
            ..runs_page(100)
        })
        .await
        .unwrap();
    assert_eq!(page.data.len(), claimed.len());
    assert_eq!(
        claimed.len(),
        3 + 4,
        "three of the key and the four without one"
    );
}
