//! Claiming runs and holding them: leases, batch claims, lease extension and sleeps.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::{CreateRun, FailRun, RunStatus, Store, StoreError};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A claim takes the run under a lease; nobody else can claim it until the lease expires,
/// after which another worker reclaims it as a second attempt, keeping `started_at`.
pub async fn claim_respects_lease_and_reclaims_after_expiry(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    let first = new_worker();
    let claimed = store
        .claim_run(&first, SHORT_LEASE)
        .await
        .unwrap()
        .expect("the run is claimable");
    assert_eq!(claimed.id, created.id);
    assert_eq!(claimed.status, RunStatus::Running);
    assert_eq!(claimed.worker_id.as_deref(), Some(first.as_str()));
    assert_eq!(claimed.attempts, 1);
    assert_near_now(claimed.started_at, "started_at");
    let lease_end = claimed
        .available_at
        .expect("a running run has a lease expiry");
    assert!(
        lease_end > claimed.started_at.unwrap(),
        "the lease ends after the claim"
    );

    let second = new_worker();
    assert_eq!(store.claim_run(&second, SHORT_LEASE).await.unwrap(), None);

    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let reclaimed = store
        .claim_run(&second, LONG_LEASE)
        .await
        .unwrap()
        .expect("an expired lease is claimable");
    assert_eq!(reclaimed.id, claimed.id);
    assert_eq!(reclaimed.status, RunStatus::Running);
    assert_eq!(reclaimed.attempts, 2);
    assert_eq!(reclaimed.worker_id.as_deref(), Some(second.as_str()));
    assert_eq!(reclaimed.started_at, claimed.started_at);
}

/// Runs whose lease expired (their worker died) are claimed before pending runs: recovery
/// never waits behind a backlog.
pub async fn claim_prefers_expired_leases_over_pending(setup: impl Setup) {
    let store = setup.store().await;
    let running = create_pending(&store).await;
    let claimed = claim_one(&store, Duration::from_millis(100)).await;
    assert_eq!(claimed.id, running.id);
    tokio::time::sleep(Duration::from_millis(400)).await;

    let pending = create_pending(&store).await;
    assert_eq!(claim_one(&store, LONG_LEASE).await.id, running.id);
    assert_eq!(claim_one(&store, LONG_LEASE).await.id, pending.id);
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
}

/// Nothing is claimed from an empty namespace, nor from runs that are running under a live
/// lease, sleeping, paused or finished.
pub async fn claim_returns_none_when_nothing_is_available(setup: impl Setup) {
    let store = setup.store().await;
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
    assert!(
        store
            .claim_runs("w", LONG_LEASE, 5)
            .await
            .unwrap()
            .is_empty()
    );

    create_claimed(&store).await;
    create_sleeping(&store).await;
    create_completed(&store).await;
    create_failed(&store).await;
    create_canceled(&store).await;
    let paused = create_pending(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();

    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
    assert!(
        store
            .claim_runs("w", LONG_LEASE, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Runs become claimable at `available_at`, earliest first.
pub async fn claim_skips_runs_not_yet_available(setup: impl Setup) {
    let store = setup.store().await;
    let at = |offset: chrono::Duration| CreateRun {
        available_at: Some(Utc::now() + offset),
        ..CreateRun::new(unique_name())
    };
    let later = store
        .create_run(at(chrono::Duration::hours(1)))
        .await
        .unwrap();
    let earlier = store
        .create_run(at(chrono::Duration::seconds(-10)))
        .await
        .unwrap();
    let now = create_pending(&store).await;

    assert_eq!(claim_one(&store, LONG_LEASE).await.id, earlier.id);
    assert_eq!(claim_one(&store, LONG_LEASE).await.id, now.id);
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
    let still = store.get_run(later.id).await.unwrap().unwrap();
    assert_eq!(still.status, RunStatus::Pending);
    assert_eq!(still.attempts, 0);
}

/// A batch claim takes at most `limit` distinct runs, oldest first, all for the worker.
pub async fn claim_runs_takes_up_to_limit(setup: impl Setup) {
    let store = setup.store().await;
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(create_pending(&store).await.id);
    }
    assert!(
        store
            .claim_runs("w0", LONG_LEASE, 0)
            .await
            .unwrap()
            .is_empty()
    );

    let first = claimed_runs(store.claim_runs("w1", LONG_LEASE, 3).await.unwrap());
    let first_ids: HashSet<Uuid> = first.iter().map(|run| run.id).collect();
    assert_eq!(first.len(), 3);
    assert_eq!(first_ids, created[0..3].iter().copied().collect());
    for run in &first {
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.worker_id.as_deref(), Some("w1"));
        assert_eq!(run.attempts, 1);
    }

    let second = claimed_runs(store.claim_runs("w2", LONG_LEASE, 10).await.unwrap());
    let second_ids: HashSet<Uuid> = second.iter().map(|run| run.id).collect();
    assert_eq!(second.len(), 2);
    assert_eq!(second_ids, created[3..5].iter().copied().collect());
    assert!(
        second
            .iter()
            .all(|run| run.worker_id.as_deref() == Some("w2"))
    );

    assert!(
        store
            .claim_runs("w3", LONG_LEASE, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A batch claim takes the runs whose lease expired first, earliest expiry first, however
/// many pending runs wait, and fills up with pending runs, oldest first; the rest stay for
/// the next claim.
pub async fn claim_runs_fills_a_batch_with_expired_leases_first(setup: impl Setup) {
    let store = setup.store().await;
    let expired_first = create_pending(&store).await;
    assert_eq!(claim_one(&store, SHORT_LEASE).await.id, expired_first.id);
    let expired_second = create_pending(&store).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(claim_one(&store, SHORT_LEASE).await.id, expired_second.id);
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let mut pending = Vec::new();
    for _ in 0..4 {
        pending.push(create_pending(&store).await.id);
    }

    let batch = claimed_runs(store.claim_runs("w", LONG_LEASE, 3).await.unwrap());
    // Returned oldest first (by creation), whatever the claim order.
    let ids: Vec<Uuid> = batch.iter().map(|run| run.id).collect();
    assert_eq!(ids, vec![expired_first.id, expired_second.id, pending[0]]);
    let attempts: Vec<i32> = batch.iter().map(|run| run.attempts).collect();
    assert_eq!(attempts, vec![2, 2, 1]);

    let rest = claimed_runs(store.claim_runs("w", LONG_LEASE, 5).await.unwrap());
    let ids: Vec<Uuid> = rest.iter().map(|run| run.id).collect();
    assert_eq!(ids, pending[1..].to_vec());
    assert!(
        store
            .claim_runs("w", LONG_LEASE, 3)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Concurrent batch claimers split the runs between them: every run is claimed exactly once.
pub async fn concurrent_batch_claimers_never_share_a_run(setup: impl Setup) {
    const RUNS: usize = 50;
    const CLAIMERS: usize = 4;
    let store = Arc::new(setup.store().await);
    let mut created = HashSet::new();
    for _ in 0..RUNS {
        created.insert(create_pending(&*store).await.id);
    }

    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                let worker = format!("claimer-{i}");
                let mut claimed = Vec::new();
                barrier.wait().await;
                loop {
                    let batch = store
                        .claim_runs(&worker, LONG_LEASE, 10)
                        .await
                        .expect("claim_runs");
                    if batch.is_empty() {
                        return (worker, claimed);
                    }
                    assert!(
                        batch.len() <= 10,
                        "a batch of {} exceeds the limit",
                        batch.len()
                    );
                    for run in claimed_runs(batch) {
                        assert_eq!(run.worker_id.as_deref(), Some(worker.as_str()));
                        assert_eq!(run.attempts, 1, "run {} was claimed twice", run.id);
                        claimed.push(run.id);
                    }
                }
            })
        })
        .collect();

    let mut all = Vec::new();
    let mut owners = Vec::new();
    for claimer in claimers {
        let (worker, claimed) = claimer.await.expect("claimer panicked");
        owners.extend(claimed.iter().map(|id| (*id, worker.clone())));
        all.extend(claimed);
    }
    let distinct: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!(all.len(), RUNS, "runs claimed more than once or not at all");
    assert_eq!(distinct, created);

    // The store agrees on who holds each run.
    for (id, worker) in owners {
        let run = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Running);
        assert_eq!(run.worker_id, Some(worker));
    }
}

/// Extending a lease moves its expiry forward.
pub async fn extend_lease_pushes_expiry(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    let worker = new_worker();
    let claimed = store
        .claim_run(&worker, Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    let before = Utc::now();
    let extended = store
        .extend_lease(claimed.id, &holder(&claimed), Duration::from_secs(60))
        .await
        .unwrap();
    let after = Utc::now();

    assert_eq!(extended.id, claimed.id);
    assert_eq!(extended.status, RunStatus::Running);
    assert_eq!(extended.worker_id.as_deref(), Some(worker.as_str()));
    assert_eq!(extended.attempts, 1);
    assert!(extended.available_at > claimed.available_at);
    assert_delay(
        extended.available_at,
        before,
        after,
        Duration::from_secs(60),
    );
    let fetched = store.get_run(claimed.id).await.unwrap().unwrap();
    assert_eq!(fetched.available_at, extended.available_at);
}

/// A worker whose run was paused, canceled or finished cannot extend its lease.
pub async fn extend_lease_of_paused_or_canceled_run_is_wrong_state(setup: impl Setup) {
    let store = setup.store().await;
    let paused = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    assert_err!(
        store.extend_lease(paused.id, &holder(&paused), LONG_LEASE).await,
        StoreError::WrongState { id, status: RunStatus::Paused, .. } if *id == paused.id
    );

    let canceled = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .cancel_run(canceled.id)
        .await
        .unwrap();
    assert_err!(
        store.extend_lease(canceled.id, &holder(&canceled), LONG_LEASE).await,
        StoreError::WrongState { id, status: RunStatus::Canceled, .. } if *id == canceled.id
    );

    let completed = create_claimed(&store).await;
    store
        .complete_run(completed.id, &holder(&completed), json!(null))
        .await
        .unwrap();
    assert_err!(
        store
            .extend_lease(completed.id, &holder(&completed), LONG_LEASE)
            .await,
        StoreError::WrongState {
            status: RunStatus::Completed,
            ..
        }
    );
    assert_eq!(
        store.get_run(paused.id).await.unwrap().unwrap().status,
        RunStatus::Paused
    );
}

/// After another worker took the run over, the previous owner's extension is `LeaseLost`.
pub async fn extend_lease_after_takeover_is_lease_lost(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    let (w1, w2) = (new_worker(), new_worker());
    let first = store.claim_run(&w1, SHORT_LEASE).await.unwrap().unwrap();
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = store.claim_run(&w2, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(second.id, first.id);

    assert_err!(
        store.extend_lease(first.id, &holder(&first), LONG_LEASE).await,
        StoreError::LeaseLost { id, worker_id, .. } if *id == first.id && *worker_id == w1
    );
    assert_err!(
        store
            .extend_lease(
                first.id,
                &Holder::new("never-owned-it", second.claim_epoch),
                LONG_LEASE
            )
            .await,
        StoreError::LeaseLost { .. }
    );
    let extended = store
        .extend_lease(first.id, &holder(&second), LONG_LEASE)
        .await
        .unwrap();
    assert_eq!(extended.worker_id.as_deref(), Some(w2.as_str()));
}

/// Sleeping parks the run until the given instant and releases the worker.
pub async fn sleep_parks_run_until_time(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let until = Utc::now() + chrono::Duration::seconds(5);
    let sleeping = store
        .sleep_run(claimed.id, &holder(&claimed), until)
        .await
        .unwrap();

    assert_eq!(sleeping.status, RunStatus::Sleeping);
    assert_eq!(sleeping.worker_id, None);
    assert_eq!(sleeping.available_at, Some(micros(until)));
    assert_eq!(sleeping.finished_at, None);
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(sleeping));
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
}

/// A sleeping run is claimed again once its wake-up time has passed.
pub async fn sleeping_run_is_claimable_after_wake_time(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let until = Utc::now() + chrono::Duration::seconds(1);
    store
        .sleep_run(claimed.id, &holder(&claimed), until)
        .await
        .unwrap();
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);

    sleep_past(until).await;
    let worker = new_worker();
    let woken = store
        .claim_run(&worker, LONG_LEASE)
        .await
        .unwrap()
        .expect("awake");
    assert_eq!(woken.id, claimed.id);
    assert_eq!(woken.status, RunStatus::Running);
    assert_eq!(woken.worker_id, Some(worker));
}

/// Only the owner of a running run can put it to sleep.
pub async fn sleep_is_refused_unless_running(setup: impl Setup) {
    let store = setup.store().await;
    let later = || Utc::now() + chrono::Duration::seconds(60);

    let completed = create_claimed(&store).await;
    store
        .complete_run(completed.id, &holder(&completed), json!(null))
        .await
        .unwrap();
    assert_err!(
        store.sleep_run(completed.id, &holder(&completed), later()).await,
        StoreError::WrongState { id, status: RunStatus::Completed, .. } if *id == completed.id
    );

    let failed = create_claimed(&store).await;
    store
        .fail_run(FailRun {
            force: true,
            ..fail_params(&failed, "failed")
        })
        .await
        .unwrap();
    assert_err!(
        store.sleep_run(failed.id, &holder(&failed), later()).await,
        StoreError::WrongState {
            status: RunStatus::Failed,
            ..
        }
    );

    let canceled = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .cancel_run(canceled.id)
        .await
        .unwrap();
    assert_err!(
        store
            .sleep_run(canceled.id, &holder(&canceled), later())
            .await,
        StoreError::WrongState {
            status: RunStatus::Canceled,
            ..
        }
    );

    let other = create_claimed(&store).await;
    assert_err!(
        store
            .sleep_run(
                other.id,
                &Holder::new("not-the-owner", other.claim_epoch),
                later()
            )
            .await,
        StoreError::LeaseLost { .. }
    );
    assert_eq!(
        store.get_run(other.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );

    // Last, since it becomes claimable again after its backoff: failed once and
    // rescheduled, the run is pending again and no longer the worker's.
    let rescheduled = create_claimed(&store).await;
    let pending = store
        .fail_run(fail_params(&rescheduled, "retry me"))
        .await
        .unwrap();
    assert_eq!(pending.status, RunStatus::Pending);
    assert_err!(
        store
            .sleep_run(rescheduled.id, &holder(&rescheduled), later())
            .await,
        StoreError::WrongState {
            status: RunStatus::Pending,
            ..
        }
    );
    assert_eq!(store.get_run(rescheduled.id).await.unwrap(), Some(pending));
}
