//! Worker heartbeats: the runs of a worker whose heartbeat row went stale are claimable
//! before their leases expire, and the stale worker's writes are then refused.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks_core::{
    RecordStepAttempt, RunStatus, StepKind, StepStatus, Store, StoreError, WorkflowRun,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A staleness that has passed by the time the next statement runs.
const AT_ONCE: Duration = Duration::ZERO;

/// Claims a fresh run for a fresh worker with a long lease; returns the run.
async fn held_run<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    create_claimed(store).await
}

/// A completed step attempt of `run` written by `worker`.
fn finished_step(run: &WorkflowRun, worker: &Holder, name: &str) -> RecordStepAttempt {
    RecordStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: worker.clone(),
        step_name: name.to_owned(),
        kind: StepKind::Function,
        config: json!({}),
        status: StepStatus::Completed,
        output: Some(json!(1)),
        error: None,
        args: None,
        elapsed: Duration::from_millis(1),
    }
}

/// The runs of a worker whose heartbeat is stale are claimed by another worker long before
/// their lease expires; the stale worker's writes are then refused.
pub async fn stale_heartbeat_makes_runs_claimable(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    let dead = holder(&run);
    store
        .heartbeat(&dead.worker_id, Duration::from_millis(1))
        .await
        .expect("heartbeat");
    tokio::time::sleep(Duration::from_millis(50)).await;

    let rescuer = new_worker();
    let taken = store
        .claim_run(&rescuer, LONG_LEASE)
        .await
        .expect("claim_run")
        .expect("the stale worker's run is claimable");
    assert_eq!(taken.id, run.id);
    assert_eq!(taken.status, RunStatus::Running);
    assert_eq!(taken.worker_id.as_deref(), Some(rescuer.as_str()));
    assert_eq!(
        taken.attempts,
        run.attempts + 1,
        "a takeover counts an attempt"
    );

    assert_err!(
        store.complete_run(run.id, &dead, json!(1)).await,
        StoreError::LeaseLost { .. }
    );
    assert_err!(
        store
            .record_step_attempt(finished_step(&run, &dead, "late"))
            .await,
        StoreError::LeaseLost { .. }
    );
    assert_err!(
        store.extend_lease(run.id, &dead, LONG_LEASE).await,
        StoreError::LeaseLost { .. }
    );
    let current = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(current.worker_id.as_deref(), Some(rescuer.as_str()));
    assert!(store.step_history(run.id).await.unwrap().is_empty());
}

/// A fresh heartbeat keeps the worker's runs its own.
pub async fn fresh_heartbeat_keeps_runs(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    store
        .heartbeat(owner(&run), LONG_LEASE)
        .await
        .expect("heartbeat");
    assert_eq!(
        store.claim_run(&new_worker(), LONG_LEASE).await.unwrap(),
        None
    );
}

/// A heartbeat rewrites the row: a worker that was stale and beats again keeps its runs.
pub async fn heartbeat_again_refreshes_the_row(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    store.heartbeat(owner(&run), AT_ONCE).await.unwrap();
    store.heartbeat(owner(&run), LONG_LEASE).await.unwrap();
    assert_eq!(
        store.claim_run(&new_worker(), LONG_LEASE).await.unwrap(),
        None
    );
}

/// A worker without a heartbeat row keeps the lease-only behaviour, even when other
/// workers' rows are stale.
pub async fn worker_without_heartbeat_keeps_its_lease(setup: impl Setup) {
    let store = setup.store().await;
    let _run = held_run(&store).await;
    store.heartbeat(&new_worker(), AT_ONCE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.claim_run(&new_worker(), LONG_LEASE).await.unwrap(),
        None
    );
}

/// A removed worker's runs wait for their leases; removing twice is harmless.
pub async fn removed_worker_falls_back_to_its_lease(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    store.heartbeat(owner(&run), AT_ONCE).await.unwrap();
    store
        .remove_worker(owner(&run))
        .await
        .expect("remove_worker");
    store
        .remove_worker(owner(&run))
        .await
        .expect("remove again");
    assert_eq!(
        store.claim_run(&new_worker(), LONG_LEASE).await.unwrap(),
        None
    );
}

/// A worker whose own heartbeat is stale does not claim its own runs again (it is still
/// executing them).
pub async fn stale_worker_does_not_reclaim_its_own_runs(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    store.heartbeat(owner(&run), AT_ONCE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.claim_run(owner(&run), LONG_LEASE).await.unwrap(),
        None
    );
}

/// Heartbeats are per namespace: a stale row in another namespace frees nothing here.
pub async fn heartbeats_are_scoped_to_namespace(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    let elsewhere = store.scoped(&unique_namespace()).unwrap();
    elsewhere
        .contract()
        .heartbeat(owner(&run), AT_ONCE)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.claim_run(&new_worker(), LONG_LEASE).await.unwrap(),
        None
    );
    // In its own namespace the stale row does free it.
    store.heartbeat(owner(&run), AT_ONCE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = store.claim_run(&new_worker(), LONG_LEASE).await.unwrap();
    assert_eq!(taken.map(|taken| taken.id), Some(run.id));
}

/// The runs of a stale worker are claimed before pending runs, however many wait: a backlog
/// never delays recovery.
pub async fn stale_workers_runs_come_before_pending_runs(setup: impl Setup) {
    let store = setup.store().await;
    let run = held_run(&store).await;
    store.heartbeat(owner(&run), AT_ONCE).await.unwrap();
    let mut backlog = Vec::new();
    for _ in 0..5 {
        backlog.push(create_pending(&store).await.id);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let rescuer = new_worker();
    let first = store.claim_runs(&rescuer, LONG_LEASE, 1).await.unwrap();
    assert_eq!(ids(&claimed_runs(first)), vec![run.id]);
    let second = store.claim_runs(&rescuer, LONG_LEASE, 10).await.unwrap();
    assert_eq!(ids(&claimed_runs(second)), backlog);
}
