//! Operator transitions (cancel, pause, resume) and the errors every mutating operation
//! gives for unknown runs and runs in the wrong state.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::{
    CreateRun, CreateStepAttempt, FailRun, RunStatus, StepKind, Store, StoreError, WorkflowRun,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// Asserts what every cancel leaves behind.
#[track_caller]
fn assert_canceled(run: &WorkflowRun, id: Uuid) {
    assert_eq!(run.id, id);
    assert_eq!(run.status, RunStatus::Canceled);
    assert_eq!(run.worker_id, None);
    assert_eq!(run.available_at, None);
    assert_near_now(run.finished_at, "finished_at");
}

/// Asserts what every pause leaves behind.
#[track_caller]
fn assert_paused(run: &WorkflowRun, id: Uuid) {
    assert_eq!(run.id, id);
    assert_eq!(run.status, RunStatus::Paused);
    assert_eq!(run.worker_id, None);
    assert_eq!(run.available_at, None);
    assert_eq!(run.finished_at, None);
}

/// Parameters of a step attempt for `worker`.
fn step(run_id: Uuid, worker: &Holder) -> CreateStepAttempt {
    CreateStepAttempt {
        id: Uuid::now_v7(),
        run_id,
        holder: worker.clone(),
        step_name: "step".into(),
        kind: StepKind::Function,
        config: json!({}),
        context: None,
    }
}

/// Canceling a pending run finishes it.
pub async fn cancel_pending_run(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(created.id)
        .await
        .unwrap();
    assert_canceled(&canceled, created.id);
    assert_eq!(store.get_run(created.id).await.unwrap(), Some(canceled));
}

/// Canceling a running run takes it from its worker, which can no longer finish it.
pub async fn cancel_running_run(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(claimed.id)
        .await
        .unwrap();
    assert_canceled(&canceled, claimed.id);

    assert_err!(
        store
            .complete_run(claimed.id, &holder(&claimed), json!(1))
            .await,
        StoreError::WrongState {
            status: RunStatus::Canceled,
            ..
        }
    );
    assert_err!(
        store.fail_run(fail_params(&claimed, "late")).await,
        StoreError::WrongState {
            status: RunStatus::Canceled,
            ..
        }
    );
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(canceled));
}

/// Canceling a sleeping run finishes it.
pub async fn cancel_sleeping_run(setup: impl Setup) {
    let store = setup.store().await;
    let (_, sleeping) = create_sleeping(&store).await;
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(sleeping.id)
        .await
        .unwrap();
    assert_canceled(&canceled, sleeping.id);
}

/// Canceling a paused run finishes it.
pub async fn cancel_paused_run(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(claimed.id)
        .await
        .unwrap();
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(claimed.id)
        .await
        .unwrap();
    assert_canceled(&canceled, claimed.id);
    assert_err!(
        store.lifecycle().unwrap().resume_run(claimed.id).await,
        StoreError::WrongState {
            status: RunStatus::Canceled,
            ..
        }
    );
}

/// A completed run cannot be canceled, and stays as it was.
pub async fn cancel_completed_run_is_wrong_state(setup: impl Setup) {
    let store = setup.store().await;
    let completed = create_completed(&store).await;
    assert_err!(
        store.lifecycle().unwrap().cancel_run(completed.id).await,
        StoreError::WrongState { id, status: RunStatus::Completed, .. } if *id == completed.id
    );
    assert_eq!(store.get_run(completed.id).await.unwrap(), Some(completed));
}

/// A failed run (by deadline, or for good) cannot be canceled.
pub async fn cancel_failed_run_is_wrong_state(setup: impl Setup) {
    let store = setup.store().await;
    let late = store
        .create_run(CreateRun {
            deadline_at: Some(Utc::now() - chrono::Duration::seconds(1)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
    let late = store.get_run(late.id).await.unwrap().unwrap();
    assert_eq!(late.status, RunStatus::Failed);
    assert_err!(
        store.lifecycle().unwrap().cancel_run(late.id).await,
        StoreError::WrongState { id, status: RunStatus::Failed, .. } if *id == late.id
    );
    assert_eq!(store.get_run(late.id).await.unwrap(), Some(late));

    let failed = create_failed(&store).await;
    assert_err!(
        store.lifecycle().unwrap().cancel_run(failed.id).await,
        StoreError::WrongState {
            status: RunStatus::Failed,
            ..
        }
    );
}

/// Canceling a canceled run returns it unchanged.
pub async fn cancel_is_idempotent(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    let first = store
        .lifecycle()
        .unwrap()
        .cancel_run(created.id)
        .await
        .unwrap();
    let second = store
        .lifecycle()
        .unwrap()
        .cancel_run(created.id)
        .await
        .unwrap();
    assert_eq!(second.status, RunStatus::Canceled);
    assert_eq!(second.id, first.id);
    assert_eq!(second.finished_at, first.finished_at);
    assert_eq!(second, first);
}

/// Canceling an unknown run is `RunNotFound`.
pub async fn cancel_unknown_run_is_not_found(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    let unknown = Uuid::new_v4();
    assert_err!(
        store.lifecycle().unwrap().cancel_run(unknown).await,
        StoreError::RunNotFound { id } if *id == unknown
    );
}

/// Canceled runs are never claimed.
pub async fn canceled_run_is_not_claimed(setup: impl Setup) {
    let store = setup.store().await;
    create_canceled(&store).await;
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
}

/// Pausing a pending run parks it.
pub async fn pause_pending_run(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(created.id)
        .await
        .unwrap();
    assert_paused(&paused, created.id);
    assert_eq!(paused.attempts, 0);
    assert_eq!(store.get_run(created.id).await.unwrap(), Some(paused));
}

/// Pausing a running run takes it from its worker, which can no longer finish it.
pub async fn pause_running_run(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(claimed.id)
        .await
        .unwrap();
    assert_paused(&paused, claimed.id);
    assert_eq!(paused.attempts, 1);
    assert_err!(
        store
            .complete_run(claimed.id, &holder(&claimed), json!(1))
            .await,
        StoreError::WrongState {
            status: RunStatus::Paused,
            ..
        }
    );
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(paused));
}

/// Pausing a sleeping run parks it (its wake-up time is dropped).
pub async fn pause_sleeping_run(setup: impl Setup) {
    let store = setup.store().await;
    let (_, sleeping) = create_sleeping(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(sleeping.id)
        .await
        .unwrap();
    assert_paused(&paused, sleeping.id);
}

/// Pausing a paused run returns it unchanged.
pub async fn pause_is_idempotent(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    let first = store
        .lifecycle()
        .unwrap()
        .pause_run(created.id)
        .await
        .unwrap();
    let second = store
        .lifecycle()
        .unwrap()
        .pause_run(created.id)
        .await
        .unwrap();
    assert_eq!(second, first);
}

/// Finished runs cannot be paused.
pub async fn pause_refuses_terminal_runs(setup: impl Setup) {
    let store = setup.store().await;
    for (run, status) in [
        (create_completed(&store).await, RunStatus::Completed),
        (create_failed(&store).await, RunStatus::Failed),
        (create_canceled(&store).await, RunStatus::Canceled),
    ] {
        assert_err!(
            store.lifecycle().unwrap().pause_run(run.id).await,
            StoreError::WrongState { id, status: s, .. } if *id == run.id && *s == status
        );
        assert_eq!(store.get_run(run.id).await.unwrap(), Some(run));
    }
}

/// Paused runs are never claimed.
pub async fn paused_run_is_not_claimed(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(created.id)
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

/// Resuming makes a paused run pending and available at once.
pub async fn resume_makes_paused_run_pending_now(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(claimed.id)
        .await
        .unwrap();
    let resumed = store
        .lifecycle()
        .unwrap()
        .resume_run(claimed.id)
        .await
        .unwrap();
    assert_eq!(resumed.status, RunStatus::Pending);
    assert_eq!(resumed.worker_id, None);
    assert_eq!(resumed.finished_at, None);
    assert_near_now(resumed.available_at, "available_at");
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(resumed));

    let worker = new_worker();
    let reclaimed = store
        .claim_run(&worker, LONG_LEASE)
        .await
        .unwrap()
        .expect("claimable");
    assert_eq!(reclaimed.id, claimed.id);
    assert_eq!(reclaimed.worker_id, Some(worker));
    assert_eq!(reclaimed.attempts, 2);
}

/// Resuming a pending or running run returns it unchanged.
pub async fn resume_is_idempotent_on_pending_and_running(setup: impl Setup) {
    let store = setup.store().await;
    let running = create_claimed(&store).await;
    let resumed = store
        .lifecycle()
        .unwrap()
        .resume_run(running.id)
        .await
        .unwrap();
    assert_eq!(resumed, running);

    let pending = create_pending(&store).await;
    let resumed = store
        .lifecycle()
        .unwrap()
        .resume_run(pending.id)
        .await
        .unwrap();
    assert_eq!(resumed, pending);
}

/// Finished runs cannot be resumed.
pub async fn resume_refuses_terminal_runs(setup: impl Setup) {
    let store = setup.store().await;
    for (run, status) in [
        (create_completed(&store).await, RunStatus::Completed),
        (create_failed(&store).await, RunStatus::Failed),
        (create_canceled(&store).await, RunStatus::Canceled),
    ] {
        assert_err!(
            store.lifecycle().unwrap().resume_run(run.id).await,
            StoreError::WrongState { id, status: s, .. } if *id == run.id && *s == status
        );
        assert_eq!(store.get_run(run.id).await.unwrap(), Some(run));
    }
}

/// Every operation on a run id that does not exist is `RunNotFound` with that id.
pub async fn unknown_run_is_not_found_for_every_operation(setup: impl Setup) {
    let store = setup.store().await;
    create_claimed(&store).await;
    let id = Uuid::new_v4();
    let w = &Holder::new("w", 1);
    let later = Utc::now() + chrono::Duration::seconds(60);
    macro_rules! not_found {
        ($call:expr) => {
            assert_err!($call, StoreError::RunNotFound { id: missing } if *missing == id)
        };
    }
    not_found!(store.extend_lease(id, w, LONG_LEASE).await);
    not_found!(store.sleep_run(id, w, later).await);
    not_found!(store.complete_run(id, w, json!(1)).await);
    not_found!(
        store
            .fail_run(FailRun {
                run_id: id,
                holder: w.clone(),
                error: error_value("x"),
                force: false,
            })
            .await
    );
    not_found!(store.release_run(id, w, Duration::ZERO, json!(null)).await);
    not_found!(store.lifecycle().unwrap().cancel_run(id).await);
    not_found!(store.lifecycle().unwrap().pause_run(id).await);
    not_found!(store.lifecycle().unwrap().resume_run(id).await);
    not_found!(store.create_step_attempt(step(id, w)).await);
    not_found!(
        store
            .complete_step_attempt(id, Uuid::new_v4(), w, json!(1))
            .await
    );
}

/// Worker operations on a run that is not running are `WrongState` with its status, even
/// for the worker that last held it.
pub async fn finished_run_is_wrong_state_for_every_worker_operation(setup: impl Setup) {
    let store = setup.store().await;
    let completed = create_completed(&store).await;
    let pending = create_pending(&store).await;
    let later = Utc::now() + chrono::Duration::seconds(60);
    for (run, worker, status) in [
        (&completed, holder(&completed), RunStatus::Completed),
        (&pending, Holder::new(new_worker(), 1), RunStatus::Pending),
    ] {
        let id = run.id;
        let w = &worker;
        macro_rules! wrong_state {
            ($call:expr) => {
                assert_err!(
                    $call,
                    StoreError::WrongState { id: got, status: s, .. } if *got == id && *s == status
                )
            };
        }
        wrong_state!(store.extend_lease(id, w, LONG_LEASE).await);
        wrong_state!(store.sleep_run(id, w, later).await);
        wrong_state!(store.complete_run(id, w, json!(1)).await);
        wrong_state!(
            store
                .fail_run(FailRun {
                    run_id: id,
                    holder: w.clone(),
                    error: error_value("x"),
                    force: true,
                })
                .await
        );
        wrong_state!(store.release_run(id, w, Duration::ZERO, json!(null)).await);
        wrong_state!(store.create_step_attempt(step(id, w)).await);
        assert_eq!(store.get_run(id).await.unwrap().as_ref(), Some(run));
    }
}
