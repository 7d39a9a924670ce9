//! Namespaces: a store never sees or changes another namespace's runs, idempotency keys or
//! notifications.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use chrono::Utc;
use futures::StreamExt;
use serde_json::json;
use tasks_core::{
    CreateRun, CreateStepAttempt, FailRun, ListRuns, ListStepAttempts, Notification,
    NotificationStream, RunStatus, StepKind, Store, StoreError,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// How long a notification may take to arrive.
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The next notification of `stream` that is not a `Missed` (which a store may send at any
/// time); panics when none arrives in time.
async fn next_notification(stream: &mut NotificationStream, waiting_for: &str) -> Notification {
    loop {
        match tokio::time::timeout(NOTIFICATION_TIMEOUT, stream.next()).await {
            Err(_) => panic!(
                "no notification within {NOTIFICATION_TIMEOUT:?} (waiting for {waiting_for})"
            ),
            Ok(None) => panic!("the notification stream ended (waiting for {waiting_for})"),
            // Status changes for waiters are specified by `status`; here only wake-ups and
            // finishes are followed.
            Ok(Some(Notification::Missed { .. } | Notification::StatusChanged { .. })) => continue,
            Ok(Some(notification)) => return notification,
        }
    }
}

/// A store scoped to another namespace neither sees nor changes this namespace's runs and
/// steps, and this namespace does not see its runs.
pub async fn namespaces_are_isolated(setup: impl Setup) {
    let a = setup.store().await;
    let b_namespace = unique_namespace();
    let b = a.scoped(&b_namespace).unwrap();
    assert_eq!(b.namespace(), b_namespace);
    assert_ne!(a.namespace(), b.namespace());

    let running = create_claimed(&a).await;
    let worker = holder(&running);
    let step = a
        .create_step_attempt(CreateStepAttempt {
            id: Uuid::now_v7(),
            run_id: running.id,
            holder: worker.clone(),
            step_name: "s".into(),
            kind: StepKind::Function,
            config: json!({}),
            context: None,
        })
        .await
        .unwrap();
    let pending = create_pending(&a).await;
    let paused = create_pending(&a).await;
    let paused = a.lifecycle().unwrap().pause_run(paused.id).await.unwrap();

    // Reads see nothing.
    for id in [running.id, pending.id, paused.id] {
        assert_eq!(b.contract().get_run(id).await.unwrap(), None);
    }
    assert!(
        b.contract()
            .list_runs(ListRuns::default())
            .await
            .unwrap()
            .data
            .is_empty()
    );
    assert_eq!(b.contract().get_step_attempt(step.id).await.unwrap(), None);
    let steps = b
        .contract()
        .list_step_attempts(ListStepAttempts::new(running.id))
        .await
        .unwrap();
    assert!(steps.data.is_empty());
    assert!(
        b.contract()
            .step_history(running.id)
            .await
            .unwrap()
            .is_empty()
    );
    // Claims take nothing.
    assert_eq!(
        b.contract()
            .claim_run("intruder", LONG_LEASE)
            .await
            .unwrap(),
        None
    );
    assert!(
        b.contract()
            .claim_runs("intruder", LONG_LEASE, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Every write is "not found".
    macro_rules! not_found {
        ($id:expr, $call:expr) => {{
            let expected = $id;
            assert_err!($call, StoreError::RunNotFound { id } if *id == expected)
        }};
    }
    not_found!(
        pending.id,
        b.contract()
            .lifecycle()
            .unwrap()
            .cancel_run(pending.id)
            .await
    );
    not_found!(
        pending.id,
        b.contract()
            .lifecycle()
            .unwrap()
            .pause_run(pending.id)
            .await
    );
    not_found!(
        paused.id,
        b.contract()
            .lifecycle()
            .unwrap()
            .resume_run(paused.id)
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .lifecycle()
            .unwrap()
            .cancel_run(running.id)
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .extend_lease(running.id, &worker, LONG_LEASE)
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .sleep_run(
                running.id,
                &worker,
                Utc::now() + chrono::Duration::seconds(60)
            )
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .complete_run(running.id, &worker, json!(1))
            .await
    );
    not_found!(
        running.id,
        b.contract().fail_run(fail_params(&running, "x")).await
    );
    not_found!(
        running.id,
        b.contract()
            .fail_run(FailRun {
                force: true,
                ..fail_params(&running, "x")
            })
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .release_run(running.id, &worker, Duration::ZERO, json!(null))
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .create_step_attempt(CreateStepAttempt {
                id: Uuid::now_v7(),
                run_id: running.id,
                holder: worker.clone(),
                step_name: "intruder".into(),
                kind: StepKind::Function,
                config: json!({}),
                context: None,
            })
            .await
    );
    not_found!(
        running.id,
        b.contract()
            .complete_step_attempt(running.id, step.id, &worker, json!(1))
            .await
    );

    // Namespace A is exactly as it was.
    assert_eq!(a.get_run(running.id).await.unwrap(), Some(running.clone()));
    assert_eq!(a.get_run(pending.id).await.unwrap(), Some(pending.clone()));
    assert_eq!(a.get_run(paused.id).await.unwrap(), Some(paused.clone()));
    assert_eq!(a.get_step_attempt(step.id).await.unwrap(), Some(step));

    // And B's runs are B's alone.
    let theirs = create_pending(b.contract()).await;
    assert_eq!(theirs.namespace, b_namespace);
    assert_eq!(a.get_run(theirs.id).await.unwrap(), None);
    let ours = a.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ours.data.len(), 3);
    assert!(ours.data.iter().all(|run| run.namespace == a.namespace()));
    assert_eq!(
        b.contract()
            .claim_run("theirs", LONG_LEASE)
            .await
            .unwrap()
            .map(|run| run.id),
        Some(theirs.id)
    );
    assert_eq!(
        a.get_run(pending.id).await.unwrap().unwrap().status,
        RunStatus::Pending
    );

    // Scoping to one's own namespace sees the same rows.
    let again = a.scoped(a.namespace()).unwrap();
    assert_eq!(
        again.contract().get_run(pending.id).await.unwrap(),
        Some(pending)
    );
}

/// The same workflow name and idempotency key create distinct runs in distinct namespaces.
pub async fn idempotency_keys_are_scoped_to_namespace(setup: impl Setup) {
    let a = setup.store().await;
    let b = a.scoped(&unique_namespace()).unwrap();
    let params = CreateRun {
        idempotency_key: Some(Uuid::new_v4().to_string()),
        ..CreateRun::new(unique_name())
    };
    let in_a = a.create_run(params.clone()).await.unwrap();
    let in_b = b.contract().create_run(params.clone()).await.unwrap();
    assert_ne!(in_a.id, in_b.id);
    assert_eq!(in_b.namespace, b.namespace());
    assert_eq!(a.create_run(params.clone()).await.unwrap().id, in_a.id);
    assert_eq!(b.contract().create_run(params).await.unwrap().id, in_b.id);
    assert_eq!(
        a.list_runs(ListRuns::default()).await.unwrap().data.len(),
        1
    );
    assert_eq!(
        b.contract()
            .list_runs(ListRuns::default())
            .await
            .unwrap()
            .data
            .len(),
        1
    );
}

/// Subscribers hear that runs of their namespace became available or finished, and nothing
/// from other namespaces (neither a scoped sibling nor an unrelated store).
pub async fn subscribers_get_their_namespace_notifications(setup: impl Setup) {
    let a = setup.store().await;
    let b = a.scoped(&unique_namespace()).unwrap();
    let c = setup.store().await;
    let mut a_events = a.subscribe().await.unwrap();
    let mut b_events = b.contract().subscribe().await.unwrap();
    let ns = a.namespace().to_owned();
    let available = Notification::RunAvailable {
        namespace: ns.clone(),
    };
    let finished = |run_id| Notification::RunFinished {
        namespace: ns.clone(),
        run_id,
    };

    // Other namespaces' activity first: A must skip it.
    let theirs = create_pending(b.contract()).await;
    create_pending(&c).await;
    let first = create_pending(&a).await;
    assert_eq!(next_notification(&mut a_events, "create").await, available);
    assert_eq!(
        next_notification(&mut b_events, "create in B").await,
        Notification::RunAvailable {
            namespace: b.namespace().to_owned()
        }
    );

    let claimed = a.claim_run("w", LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(claimed.id, first.id);
    a.complete_run(first.id, &holder(&claimed), json!(1))
        .await
        .unwrap();
    assert_eq!(
        next_notification(&mut a_events, "complete").await,
        finished(first.id)
    );

    let second = create_pending(&a).await;
    assert_eq!(next_notification(&mut a_events, "create").await, available);
    a.lifecycle().unwrap().cancel_run(second.id).await.unwrap();
    assert_eq!(
        next_notification(&mut a_events, "cancel").await,
        finished(second.id)
    );

    let third = create_claimed(&a).await;
    assert_eq!(next_notification(&mut a_events, "create").await, available);
    a.fail_run(FailRun {
        force: true,
        ..fail_params(&third, "fatal")
    })
    .await
    .unwrap();
    assert_eq!(
        next_notification(&mut a_events, "fail").await,
        finished(third.id)
    );

    // B creating or finishing its runs reaches B's subscribers only.
    b.contract()
        .lifecycle()
        .unwrap()
        .cancel_run(theirs.id)
        .await
        .unwrap();
    assert_eq!(
        next_notification(&mut b_events, "cancel in B").await,
        Notification::RunFinished {
            namespace: b.namespace().to_owned(),
            run_id: theirs.id
        }
    );
    create_pending(b.contract()).await;
    assert_eq!(
        next_notification(&mut b_events, "create in B").await,
        Notification::RunAvailable {
            namespace: b.namespace().to_owned()
        }
    );

    // A marker proves that nothing else reached A in between.
    let marker = create_pending(&a).await;
    a.lifecycle().unwrap().cancel_run(marker.id).await.unwrap();
    assert_eq!(next_notification(&mut a_events, "create").await, available);
    assert_eq!(
        next_notification(&mut a_events, "the marker").await,
        finished(marker.id)
    );
}
