//! Finishing step attempts: results, errors, repeated finishes, and what happens when the run
//! was paused, canceled or taken over meanwhile.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::{CreateStepAttempt, RunStatus, StepStatus, StepUpdate, Store, StoreError};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// Completing a running attempt records its output.
pub async fn complete_step_attempt_records_output(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let created = start_step(&store, &run, "s").await;
    let output = json!({ "foo": "bar" });
    let completed = recorded(
        complete_step(&store, &run, &created, output.clone())
            .await
            .unwrap(),
    );

    assert_eq!(completed.id, created.id);
    assert_eq!(completed.status, StepStatus::Completed);
    assert_eq!(completed.output, Some(output));
    assert_eq!(completed.error, None);
    assert_near_now(completed.finished_at, "finished_at");
    assert_eq!(completed.started_at, created.started_at);
    assert_eq!(
        store.get_step_attempt(created.id).await.unwrap(),
        Some(completed)
    );
}

/// An attempt cannot be completed once its run stopped running (here: completed).
pub async fn complete_step_attempt_when_run_not_running_is_wrong_state(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let step = start_step(&store, &run, "s").await;
    store
        .complete_run(run.id, &holder(&run), json!(null))
        .await
        .unwrap();

    assert_err!(
        complete_step(&store, &run, &step, json!({ "foo": "bar" })).await,
        StoreError::WrongState { id, status: RunStatus::Completed, .. } if *id == run.id
    );
    let after = store.get_step_attempt(step.id).await.unwrap().unwrap();
    assert_eq!(after.output, None);
    assert_ne!(after.status, StepStatus::Completed);
}

/// Completing an attempt that does not exist is `StepNotFound`.
pub async fn complete_unknown_step_attempt_is_not_found(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let unknown = Uuid::new_v4();
    assert_err!(
        store
            .complete_step_attempt(run.id, unknown, &holder(&run), json!({ "foo": "bar" }))
            .await,
        StoreError::StepNotFound { id } if *id == unknown
    );
}

/// An attempt addressed through another run (even one the caller holds) is not found, and
/// stays untouched.
pub async fn step_attempt_of_another_run_is_not_found(setup: impl Setup) {
    let store = setup.store().await;
    let a = create_claimed(&store).await;
    let b = create_claimed(&store).await;
    let step = start_step(&store, &a, "a-step").await;

    assert_err!(
        store.complete_step_attempt(b.id, step.id, &holder(&b), json!(1)).await,
        StoreError::StepNotFound { id } if *id == step.id
    );
    assert_eq!(store.get_step_attempt(step.id).await.unwrap(), Some(step));
}

/// A finished attempt cannot be finished again; its result stays.
pub async fn finished_step_attempt_cannot_be_finished_again(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let done = start_step(&store, &run, "done").await;
    let done = recorded(
        complete_step(&store, &run, &done, json!("first"))
            .await
            .unwrap(),
    );
    assert_err!(
        complete_step(&store, &run, &done, json!("second")).await,
        StoreError::StepAlreadyFinished { id, status: StepStatus::Completed } if *id == done.id
    );
    assert_eq!(store.get_step_attempt(done.id).await.unwrap(), Some(done));
}

/// Finishing an attempt after its run was paused reports the interruption and marks the
/// attempt paused, without recording the result; a later cancel marks it canceled.
pub async fn step_finished_after_pause_is_interrupted(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let done = start_step(&store, &run, "done").await;
    let done = recorded(
        complete_step(&store, &run, &done, json!("kept"))
            .await
            .unwrap(),
    );
    let s1 = start_step(&store, &run, "s1").await;
    let s2 = start_step(&store, &run, "s2").await;
    store.lifecycle().unwrap().pause_run(run.id).await.unwrap();

    assert_eq!(
        complete_step(&store, &run, &s1, json!("out"))
            .await
            .unwrap(),
        StepUpdate::Interrupted {
            run_status: RunStatus::Paused
        }
    );
    assert_eq!(
        complete_step(&store, &run, &s2, json!("err"))
            .await
            .unwrap(),
        StepUpdate::Interrupted {
            run_status: RunStatus::Paused
        }
    );
    for id in [s1.id, s2.id] {
        let step = store.get_step_attempt(id).await.unwrap().unwrap();
        assert_eq!(step.status, StepStatus::Paused);
        assert_eq!(step.output, None);
        assert_eq!(step.error, None);
    }

    store.lifecycle().unwrap().cancel_run(run.id).await.unwrap();
    assert_eq!(
        complete_step(&store, &run, &s1, json!("out"))
            .await
            .unwrap(),
        StepUpdate::Interrupted {
            run_status: RunStatus::Canceled
        }
    );
    let step = store.get_step_attempt(s1.id).await.unwrap().unwrap();
    assert_eq!(step.status, StepStatus::Canceled);
    assert_eq!(step.output, None);

    // An interruption never touches attempts that finished before it, nor invents any.
    assert_err!(
        complete_step(&store, &run, &done, json!("again")).await,
        StoreError::StepAlreadyFinished {
            status: StepStatus::Completed,
            ..
        }
    );
    assert_eq!(store.get_step_attempt(done.id).await.unwrap(), Some(done));
    let unknown = Uuid::new_v4();
    assert_err!(
        store
            .complete_step_attempt(run.id, unknown, &holder(&run), json!(1))
            .await,
        StoreError::StepNotFound { id } if *id == unknown
    );
}

/// Finishing an attempt after its run was canceled reports the interruption and marks the
/// attempt canceled, without recording the result.
pub async fn step_finished_after_cancel_is_interrupted(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let s1 = start_step(&store, &run, "s1").await;
    let s2 = start_step(&store, &run, "s2").await;
    store.lifecycle().unwrap().cancel_run(run.id).await.unwrap();

    assert_eq!(
        complete_step(&store, &run, &s1, json!("out"))
            .await
            .unwrap(),
        StepUpdate::Interrupted {
            run_status: RunStatus::Canceled
        }
    );
    assert_eq!(
        complete_step(&store, &run, &s2, json!("err"))
            .await
            .unwrap(),
        StepUpdate::Interrupted {
            run_status: RunStatus::Canceled
        }
    );
    for id in [s1.id, s2.id] {
        let step = store.get_step_attempt(id).await.unwrap().unwrap();
        assert_eq!(step.status, StepStatus::Canceled);
        assert_eq!(step.output, None);
        assert_eq!(step.error, None);
    }
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Canceled
    );
}

/// Only the worker holding a running run's lease can start attempts on it.
pub async fn create_step_attempt_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let running = create_claimed(&store).await;
    let (asleep, _) = create_sleeping(&store).await;
    let paused = create_claimed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    let pending = create_pending(&store).await;

    assert_err!(
        store
            .create_step_attempt(CreateStepAttempt {
                id: Uuid::now_v7(),
                holder: Holder::new("not-the-owner", running.claim_epoch),
                ..step_params(&running, "s")
            })
            .await,
        StoreError::LeaseLost { id, worker_id, .. } if *id == running.id && worker_id == "not-the-owner"
    );
    assert_err!(
        store.create_step_attempt(step_params(&asleep, "s")).await,
        StoreError::WrongState {
            status: RunStatus::Sleeping,
            ..
        }
    );
    assert_err!(
        store.create_step_attempt(step_params(&paused, "s")).await,
        StoreError::WrongState {
            status: RunStatus::Paused,
            ..
        }
    );
    assert_err!(
        store
            .create_step_attempt(CreateStepAttempt {
                id: Uuid::now_v7(),
                run_id: pending.id,
                holder: Holder::new(new_worker(), 1),
                ..step_params(&running, "s")
            })
            .await,
        StoreError::WrongState { id, status: RunStatus::Pending, .. } if *id == pending.id
    );
    for run in [&running, &asleep, &paused, &pending] {
        assert!(store.step_history(run.id).await.unwrap().is_empty());
    }
    // The owner can.
    start_step(&store, &running, "s").await;
}

/// A worker whose lease expired and whose run another worker reclaimed can no longer write
/// anything; the new owner can.
pub async fn stale_worker_cannot_write_after_takeover(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    let (w1, w2) = (new_worker(), new_worker());
    let stale = store
        .claim_run(&w1, Duration::from_millis(600))
        .await
        .unwrap()
        .unwrap();
    let s1 = start_step(&store, &stale, "s1").await;
    let w1 = holder(&stale);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let current = store.claim_run(&w2, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(current.id, stale.id);
    assert_eq!(current.attempts, 2);

    let id = stale.id;
    macro_rules! lease_lost {
        ($call:expr) => {
            assert_err!(
                $call,
                StoreError::LeaseLost { id: got, worker_id, .. } if *got == id && *worker_id == w1.worker_id
            )
        };
    }
    lease_lost!(store.complete_run(id, &w1, json!("stale")).await);
    lease_lost!(store.fail_run(fail_params(&stale, "stale")).await);
    lease_lost!(store.extend_lease(id, &w1, LONG_LEASE).await);
    lease_lost!(
        store
            .sleep_run(id, &w1, Utc::now() + chrono::Duration::seconds(60))
            .await
    );
    lease_lost!(
        store
            .release_run(id, &w1, Duration::ZERO, json!(null))
            .await
    );
    lease_lost!(store.create_step_attempt(step_params(&stale, "s2")).await);
    lease_lost!(complete_step(&store, &stale, &s1, json!("stale")).await);

    let untouched = store.get_step_attempt(s1.id).await.unwrap().unwrap();
    assert_eq!(untouched.status, StepStatus::Running);
    assert_eq!(untouched.output, None);
    let run = store.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.worker_id.as_deref(), Some(w2.as_str()));
    assert!(
        run.claim_epoch > stale.claim_epoch,
        "a takeover is a new claim"
    );

    let s2 = start_step(&store, &current, "s2").await;
    let done = recorded(
        complete_step(&store, &current, &s2, json!("fresh"))
            .await
            .unwrap(),
    );
    assert_eq!(done.output, Some(json!("fresh")));
    let completed = store
        .complete_run(id, &holder(&current), json!("fresh"))
        .await
        .unwrap();
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(completed.output, Some(json!("fresh")));
}
