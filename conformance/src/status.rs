//! Status changes announced for waiters ([`Notification::StatusChanged`]): every transition
//! that leaves a run in a live status a caller may wait for announces it, once committed,
//! to the subscribers of the run's namespace; terminal statuses are announced as finishes
//! only.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use futures::StreamExt as _;
use serde_json::json;
use tasks_core::{
    EventWait, FailRun, Notification, NotificationStream, RetryPolicy, RunStatus, Store,
    WaitForEvent, WorkflowRun,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// How long a case waits for one announcement.
const ANNOUNCEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits for the announcement that run `run_id` was left `status`, skipping wake-ups, other
/// runs' news and the run's other status changes (announcements sent in one batch may be
/// delivered in any order); panics after [`ANNOUNCEMENT_TIMEOUT`].
async fn expect_status(
    notifications: &mut NotificationStream,
    store: &impl Store,
    run_id: Uuid,
    status: RunStatus,
    after: &str,
) {
    let expected = Notification::StatusChanged {
        namespace: store.namespace().to_owned(),
        run_id,
        status,
    };
    loop {
        match tokio::time::timeout(ANNOUNCEMENT_TIMEOUT, notifications.next()).await {
            Err(_) => panic!("no {status} announced within {ANNOUNCEMENT_TIMEOUT:?} of {after}"),
            Ok(None) => {
                panic!("the notification stream ended (waiting for {status} after {after})")
            }
            Ok(Some(notification)) if notification == expected => return,
            Ok(Some(_)) => continue,
        }
    }
}

/// Collects the announcements about `run_id` until its finish; panics when it does not
/// come within [`ANNOUNCEMENT_TIMEOUT`].
async fn until_finished(notifications: &mut NotificationStream, run_id: Uuid) -> Vec<Notification> {
    let mut about_the_run = Vec::new();
    loop {
        match tokio::time::timeout(ANNOUNCEMENT_TIMEOUT, notifications.next()).await {
            Err(_) => panic!("run {run_id} was not announced finished; heard {about_the_run:?}"),
            Ok(None) => panic!("the notification stream ended"),
            Ok(Some(notification @ Notification::RunFinished { run_id: id, .. }))
                if id == run_id =>
            {
                about_the_run.push(notification);
                return about_the_run;
            }
            Ok(Some(notification @ Notification::StatusChanged { run_id: id, .. }))
                if id == run_id =>
            {
                about_the_run.push(notification)
            }
            Ok(Some(_)) => continue,
        }
    }
}

/// A durable sleep and a parked event wait announce the run sleeping.
pub async fn sleeps_and_event_waits_announce_sleeping(setup: impl Setup) {
    let store = setup.store().await;
    let mut notifications = store.subscribe().await.unwrap();

    let sleeper = create_claimed(&store).await;
    let until = chrono::Utc::now() + chrono::Duration::seconds(60);
    store
        .sleep_run(sleeper.id, &holder(&sleeper), until)
        .await
        .unwrap();
    expect_status(
        &mut notifications,
        &store,
        sleeper.id,
        RunStatus::Sleeping,
        "a sleep",
    )
    .await;

    let waiter = create_claimed(&store).await;
    let parked = store
        .events()
        .unwrap()
        .wait_for_event(WaitForEvent {
            call: None,
            run_id: waiter.id,
            holder: holder(&waiter),
            step_name: "event/t".to_owned(),
            topic: "t".to_owned(),
            timeout: None,
        })
        .await
        .unwrap();
    assert!(matches!(parked, EventWait::Parked(_)), "{parked:?}");
    expect_status(
        &mut notifications,
        &store,
        waiter.id,
        RunStatus::Sleeping,
        "a parked event wait",
    )
    .await;
}

/// A pause announces the run paused, a resume announces it pending (besides the wake-up).
pub async fn pause_and_resume_announce_their_status(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let mut notifications = store.subscribe().await.unwrap();
    store.lifecycle().unwrap().pause_run(run.id).await.unwrap();
    expect_status(
        &mut notifications,
        &store,
        run.id,
        RunStatus::Paused,
        "a pause",
    )
    .await;
    store.lifecycle().unwrap().resume_run(run.id).await.unwrap();
    expect_status(
        &mut notifications,
        &store,
        run.id,
        RunStatus::Pending,
        "a resume",
    )
    .await;
}

/// Every run a claim takes is announced running: pending ones, and sleeping ones whose
/// sleep ended.
pub async fn claims_announce_running(setup: impl Setup) {
    let store = setup.store().await;
    let mut notifications = store.subscribe().await.unwrap();
    let first = create_pending(&store).await;
    let second = create_pending(&store).await;
    let claimed = store
        .claim_runs(&new_worker(), LONG_LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    for run in [&first, &second] {
        expect_status(
            &mut notifications,
            &store,
            run.id,
            RunStatus::Running,
            "a claim",
        )
        .await;
    }

    let napping = create_claimed(&store).await;
    let until = chrono::Utc::now() + chrono::Duration::milliseconds(500);
    let sleeping = store
        .sleep_run(napping.id, &holder(&napping), until)
        .await
        .unwrap();
    sleep_past(until).await;
    let woken = claim_one(&store, LONG_LEASE).await;
    assert_eq!(woken.id, sleeping.id);
    expect_status(
        &mut notifications,
        &store,
        sleeping.id,
        RunStatus::Running,
        "a claim of a run whose sleep ended",
    )
    .await;
}

/// A failed attempt that will be retried, a run given back by its worker, and a retry of a
/// failed run each announce the run pending.
pub async fn retries_and_releases_announce_pending(setup: impl Setup) {
    let store = setup.store().await;
    let mut notifications = store.subscribe().await.unwrap();

    let retried = store
        .create_run(with_policy(
            // A retry far off: the run stays out of the claims below.
            RetryPolicy::new(3).with_initial_interval(Duration::from_secs(60)),
            None,
        ))
        .await
        .unwrap();
    let retried = {
        let claimed = claim_one(&store, LONG_LEASE).await;
        assert_eq!(claimed.id, retried.id);
        claimed
    };
    let failed = store
        .fail_run(fail_params(&retried, "try again"))
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Pending);
    expect_status(
        &mut notifications,
        &store,
        retried.id,
        RunStatus::Pending,
        "a failed attempt with retries left",
    )
    .await;

    let released = create_claimed(&store).await;
    store
        .release_run(
            released.id,
            &holder(&released),
            Duration::from_secs(60),
            json!({"message": "not here"}),
        )
        .await
        .unwrap();
    expect_status(
        &mut notifications,
        &store,
        released.id,
        RunStatus::Pending,
        "a release",
    )
    .await;

    let gave_up = create_failed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .retry_run(gave_up.id)
        .await
        .unwrap();
    expect_status(
        &mut notifications,
        &store,
        gave_up.id,
        RunStatus::Pending,
        "a retry of a failed run",
    )
    .await;
}

/// A run that finishes is announced finished, never as a status change to its terminal
/// status; a failed attempt that is not retried is a finish too.
pub async fn finishes_are_not_status_changes(setup: impl Setup) {
    let store = setup.store().await;
    let mut notifications = store.subscribe().await.unwrap();
    let terminal = |heard: &[Notification]| {
        heard.iter().any(|notification| {
            matches!(notification, Notification::StatusChanged { status, .. } if status.is_terminal())
        })
    };

    let completed = create_claimed(&store).await;
    store
        .complete_run(completed.id, &holder(&completed), json!(1))
        .await
        .unwrap();
    let heard = until_finished(&mut notifications, completed.id).await;
    assert!(!terminal(&heard), "{heard:?}");

    let canceled = create_pending(&store).await;
    store
        .lifecycle()
        .unwrap()
        .cancel_run(canceled.id)
        .await
        .unwrap();
    let heard = until_finished(&mut notifications, canceled.id).await;
    assert!(!terminal(&heard), "{heard:?}");

    let failed: WorkflowRun = create_claimed(&store).await;
    store
        .fail_run(FailRun {
            force: true,
            ..fail_params(&failed, "fatal")
        })
        .await
        .unwrap();
    let heard = until_finished(&mut notifications, failed.id).await;
    assert!(!terminal(&heard), "{heard:?}");
}

/// A run failed by its deadline (a claim's sweep) is announced finished once the claim
/// committed, whether it was pending or running: a waiter on its result or status learns
/// of it at once, not at its next poll.
pub async fn deadline_failures_are_announced(setup: impl Setup) {
    let store = setup.store().await;
    let deadline = chrono::Utc::now() + chrono::Duration::milliseconds(400);
    store
        .create_run(with_policy(RetryPolicy::new(1), Some(deadline)))
        .await
        .unwrap();
    let running = claim_one(&store, Duration::from_secs(60)).await;
    let pending = store
        .create_run(with_policy(RetryPolicy::new(1), Some(deadline)))
        .await
        .unwrap();
    let mut notifications = store.subscribe().await.unwrap();
    sleep_past(deadline).await;
    assert!(
        store
            .claim_run(&new_worker(), Duration::from_secs(60))
            .await
            .unwrap()
            .is_none(),
        "both runs are past their deadline"
    );
    // Both finishes, in any order.
    let mut unheard = vec![running.id, pending.id];
    while !unheard.is_empty() {
        match tokio::time::timeout(ANNOUNCEMENT_TIMEOUT, notifications.next()).await {
            Err(_) => panic!("runs {unheard:?} were not announced finished"),
            Ok(None) => panic!("the notification stream ended"),
            Ok(Some(Notification::RunFinished { run_id, .. })) => {
                unheard.retain(|id| *id != run_id)
            }
            Ok(Some(Notification::StatusChanged { run_id, status, .. })) => assert!(
                !(unheard.contains(&run_id) && status.is_terminal()),
                "a finish is not a status change"
            ),
            Ok(Some(_)) => {}
        }
    }
    for run in [&running, &pending] {
        let stored = store.get_run(run.id).await.unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Failed);
        assert_eq!(stored.error.as_ref().unwrap()["kind"], json!("deadline"));
    }
}
