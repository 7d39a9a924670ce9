//! How runs end or retry: completion, failure with backoff and retry policies, release, and
//! the deadline checks that claims and failures make.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::{CreateRun, FailRun, ListRuns, RetryPolicy, RunStatus, StoreError};

use super::Setup;
use super::support::*;

/// Completing records the output and finishes the run.
pub async fn complete_run_marks_completed(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let output = json!({ "ok": true });
    let completed = store
        .complete_run(claimed.id, &holder(&claimed), output.clone())
        .await
        .unwrap();

    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(completed.output, Some(output));
    assert_eq!(completed.error, None);
    assert_near_now(completed.finished_at, "finished_at");
    assert_eq!(completed.available_at, None);
    assert_eq!(completed.attempts, 1);
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(completed));
}

/// Only the lease holder of a running run completes it, and only once.
pub async fn complete_run_is_fenced_on_owner_and_status(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    assert_err!(
        store
            .complete_run(
                claimed.id,
                &Holder::new("not-the-owner", claimed.claim_epoch),
                json!(1)
            )
            .await,
        StoreError::LeaseLost { id, worker_id, .. } if *id == claimed.id && worker_id == "not-the-owner"
    );
    assert_eq!(
        store.get_run(claimed.id).await.unwrap(),
        Some(claimed.clone())
    );

    let completed = store
        .complete_run(claimed.id, &holder(&claimed), json!(1))
        .await
        .unwrap();
    assert_err!(
        store
            .complete_run(claimed.id, &holder(&claimed), json!(2))
            .await,
        StoreError::WrongState {
            status: RunStatus::Completed,
            ..
        }
    );
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(completed));

    let pending = create_pending(&store).await;
    assert_err!(
        store
            .complete_run(pending.id, &Holder::new("w", 1), json!(1))
            .await,
        StoreError::WrongState { id, status: RunStatus::Pending, .. } if *id == pending.id
    );
}

/// A first failure reschedules the run after the default initial backoff (1 s).
pub async fn fail_run_reschedules_with_backoff(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let error = error_value("boom");
    let before = Utc::now();
    let failed = store.fail_run(fail_params(&claimed, "boom")).await.unwrap();
    let after = Utc::now();

    assert_eq!(failed.status, RunStatus::Pending);
    assert_eq!(failed.error, Some(error));
    assert_eq!(failed.output, None);
    assert_eq!(failed.finished_at, None);
    assert_eq!(failed.worker_id, None);
    assert_eq!(failed.started_at, None);
    assert_eq!(failed.attempts, 1);
    assert_delay(failed.available_at, before, after, Duration::from_secs(1));
    assert_eq!(store.get_run(claimed.id).await.unwrap(), Some(failed));
}

/// The backoff doubles with every attempt (known slow test: waits out a 1 s backoff).
pub async fn fail_run_backoff_grows_between_attempts(setup: impl Setup) {
    let store = setup.store().await;
    let first = create_claimed(&store).await;
    assert_eq!(first.attempts, 1);
    let failed = store
        .fail_run(fail_params(&first, "first failure"))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Pending);

    sleep_past(failed.available_at.unwrap()).await;
    let second = claim_one(&store, LONG_LEASE).await;
    assert_eq!(second.id, first.id);
    assert_eq!(second.attempts, 2);
    let before = Utc::now();
    let failed = store
        .fail_run(fail_params(&second, "second failure"))
        .await
        .unwrap();
    let after = Utc::now();
    assert_eq!(failed.status, RunStatus::Pending);
    assert_eq!(failed.error, Some(error_value("second failure")));
    assert_delay(failed.available_at, before, after, Duration::from_secs(2));
}

/// When the last attempt allowed by the policy fails, the run fails for good.
pub async fn fail_run_fails_for_good_when_attempts_are_exhausted(setup: impl Setup) {
    let store = setup.store().await;
    let policy = RetryPolicy::new(2).with_initial_interval(Duration::from_millis(10));
    let run = store.create_run(with_policy(policy, None)).await.unwrap();

    let first = claim_one(&store, LONG_LEASE).await;
    assert_eq!(first.id, run.id);
    let retried = store.fail_run(fail_params(&first, "one")).await.unwrap();
    assert_eq!(retried.status, RunStatus::Pending);

    sleep_past(retried.available_at.unwrap()).await;
    let second = claim_one(&store, LONG_LEASE).await;
    assert_eq!(second.attempts, 2);
    let failed = store.fail_run(fail_params(&second, "two")).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.error, Some(error_value("two")));
    assert_eq!(failed.available_at, None);
    assert_eq!(failed.worker_id, None);
    assert_near_now(failed.finished_at, "finished_at");
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
}

/// `force` fails the run for good even with attempts left.
pub async fn fail_run_fails_for_good_when_forced(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let failed = store
        .fail_run(FailRun {
            force: true,
            ..fail_params(&claimed, "fatal")
        })
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.error, Some(error_value("fatal")));
    assert_eq!(failed.available_at, None);
    assert_eq!(failed.worker_id, None);
    assert_eq!(failed.attempts, 1);
    assert_near_now(failed.finished_at, "finished_at");
}

/// The run's retry policy sets the backoff, to the millisecond (the policy's intervals
/// are whole milliseconds on every store).
pub async fn fail_run_backoff_follows_the_policy_interval(setup: impl Setup) {
    let store = setup.store().await;
    let policy = RetryPolicy::new(5)
        .with_initial_interval(Duration::from_millis(7_250))
        .with_backoff_coefficient(1.5);

    store.create_run(with_policy(policy, None)).await.unwrap();
    let claimed = claim_one(&store, LONG_LEASE).await;
    let before = Utc::now();
    let failed = store
        .fail_run(fail_params(&claimed, "policy"))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Pending);
    assert_delay(
        failed.available_at,
        before,
        Utc::now(),
        Duration::from_millis(7_250),
    );
}

/// Releasing gives the run back without counting the attempt, recording the reason.
pub async fn release_run_returns_run_to_pending(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    assert_eq!(claimed.attempts, 1);
    let reason = json!({ "message": "workflow not registered on this worker" });
    assert_err!(
        store
            .release_run(
                claimed.id,
                &Holder::new("not-the-owner", claimed.claim_epoch),
                Duration::ZERO,
                reason.clone()
            )
            .await,
        StoreError::LeaseLost { .. }
    );

    let before = Utc::now();
    let released = store
        .release_run(
            claimed.id,
            &holder(&claimed),
            Duration::from_secs(1),
            reason.clone(),
        )
        .await
        .unwrap();
    let after = Utc::now();
    assert_eq!(released.status, RunStatus::Pending);
    assert_eq!(released.attempts, 0);
    assert_eq!(released.worker_id, None);
    assert_eq!(released.error, Some(reason));
    assert_eq!(released.finished_at, None);
    assert_delay(released.available_at, before, after, Duration::from_secs(1));
    assert_eq!(
        store.get_run(claimed.id).await.unwrap(),
        Some(released.clone())
    );
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);

    sleep_past(released.available_at.unwrap()).await;
    let again = claim_one(&store, LONG_LEASE).await;
    assert_eq!(again.id, claimed.id);
    assert_eq!(again.attempts, 1);
}

/// A run whose deadline passed is never claimed.
pub async fn deadline_passed_run_is_not_claimed(setup: impl Setup) {
    let store = setup.store().await;
    store
        .create_run(CreateRun {
            deadline_at: Some(Utc::now() - chrono::Duration::seconds(1)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
}

/// Claiming fails live runs whose deadline passed, whether available yet or not.
pub async fn claim_fails_pending_runs_past_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let past = Some(Utc::now() - chrono::Duration::seconds(1));
    let available = store
        .create_run(CreateRun {
            deadline_at: past,
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let not_yet_available = store
        .create_run(CreateRun {
            deadline_at: past,
            available_at: Some(Utc::now() + chrono::Duration::hours(1)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let fine = create_pending(&store).await;

    let claimed = claim_one(&store, LONG_LEASE).await;
    assert_eq!(
        claimed.id, fine.id,
        "only the run without a deadline is claimable"
    );
    for id in [available.id, not_yet_available.id] {
        let failed = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(failed.status, RunStatus::Failed);
        let error = failed.error.expect("a deadline error");
        assert_eq!(error["message"], json!(DEADLINE_MESSAGE));
        assert_near_now(failed.finished_at, "finished_at");
        assert_eq!(failed.available_at, None);
        assert_eq!(failed.worker_id, None);
    }
}

/// Running and sleeping runs whose deadline passes are failed by the next claim; their
/// worker can no longer complete them.
pub async fn claim_fails_running_runs_past_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let deadline = Utc::now() + chrono::Duration::milliseconds(1_500);
    let mut created = Vec::new();
    for _ in 0..2 {
        let run = store
            .create_run(CreateRun {
                deadline_at: Some(deadline),
                ..CreateRun::new(unique_name())
            })
            .await
            .unwrap();
        created.push(run.id);
    }
    let running = claim_one(&store, LONG_LEASE).await;
    assert_eq!(running.id, created[0]);
    let sleeper = claim_one(&store, LONG_LEASE).await;
    assert_eq!(sleeper.id, created[1]);
    let sleeping = store
        .sleep_run(
            sleeper.id,
            &holder(&sleeper),
            Utc::now() + chrono::Duration::seconds(60),
        )
        .await
        .unwrap();
    assert_eq!(sleeping.status, RunStatus::Sleeping);

    sleep_past(deadline).await;
    assert_eq!(store.claim_run("w", LONG_LEASE).await.unwrap(), None);
    for id in &created {
        let failed = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.error.unwrap()["message"], json!(DEADLINE_MESSAGE));
        assert_eq!(failed.worker_id, None);
        assert_eq!(failed.available_at, None);
        assert_near_now(failed.finished_at, "finished_at");
    }
    assert_err!(
        store
            .complete_run(running.id, &holder(&running), json!(1))
            .await,
        StoreError::WrongState {
            status: RunStatus::Failed,
            ..
        }
    );
}

/// A failure whose retry would start after the deadline fails the run for good.
pub async fn fail_run_fails_for_good_when_retry_would_pass_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let policy = RetryPolicy::new(5)
        .with_initial_interval(Duration::from_secs(300))
        .with_max_interval(Duration::from_secs(600));
    let deadline = Utc::now() + chrono::Duration::seconds(30);
    store
        .create_run(with_policy(policy, Some(deadline)))
        .await
        .unwrap();
    let claimed = claim_one(&store, LONG_LEASE).await;

    let failed = store
        .fail_run(fail_params(&claimed, "test error"))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.available_at, None);
    assert_near_now(failed.finished_at, "finished_at");
    assert_eq!(failed.started_at, None);
    assert_eq!(failed.worker_id, None);
    assert_eq!(failed.error, Some(error_value("test error")));
}

/// A failure whose retry fits before the deadline is rescheduled.
pub async fn fail_run_reschedules_when_retry_fits_before_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    store
        .create_run(CreateRun {
            deadline_at: Some(deadline),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let claimed = claim_one(&store, LONG_LEASE).await;
    let before = Utc::now();
    let failed = store
        .fail_run(fail_params(&claimed, "test error"))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Pending);
    assert_eq!(failed.finished_at, None);
    assert_delay(
        failed.available_at,
        before,
        Utc::now(),
        Duration::from_secs(1),
    );
    assert_eq!(failed.deadline_at, Some(micros(deadline)));

    let listed = store
        .list_runs(ListRuns {
            statuses: vec![RunStatus::Pending],
            ..ListRuns::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.data.len(), 1);
}
