//! Events sent to a run: [`EventStore::send_event`], [`EventStore::wait_for_event`] and
//! [`EventStore::list_events`]. Each topic of a run is a FIFO mailbox; each event is consumed by
//! exactly one wait; a wait with no event parks the run until a send wakes it.

use std::time::Duration;
#[cfg(doc)]
use tasks_core::EventStore;
use tasks_core::{LeaseStore, RunStore, StepStore};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tasks_core::{
    CreateRun, EventTarget, EventWait, Notification, RunStatus, SendEvent, StepAttempt, StepKind,
    StepStatus, Store, StoreError, WaitForEvent, WorkflowRun, limits,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A send of `payload` to `run_id` on `topic`, without a key.
fn send(run_id: Uuid, topic: &str, payload: Value) -> SendEvent {
    SendEvent {
        target: EventTarget::Run(run_id),
        topic: topic.to_owned(),
        payload,
        dedup_key: None,
    }
}

/// The wait `step_name` on `topic` of a claimed run, by its worker.
fn wait(
    run: &WorkflowRun,
    step_name: &str,
    topic: &str,
    timeout: Option<Duration>,
) -> WaitForEvent {
    WaitForEvent {
        call: None,
        run_id: run.id,
        holder: holder(run),
        step_name: step_name.to_owned(),
        topic: topic.to_owned(),
        timeout,
    }
}

#[track_caller]
fn done(outcome: EventWait) -> StepAttempt {
    match outcome {
        EventWait::Done(attempt) => attempt,
        EventWait::Parked(run) => panic!("expected the wait to be over, it parked: {run:?}"),
    }
}

#[track_caller]
fn parked(outcome: EventWait) -> WorkflowRun {
    match outcome {
        EventWait::Parked(run) => run,
        EventWait::Done(attempt) => panic!("expected the wait to park, it ended: {attempt:?}"),
    }
}

/// The payload a completed wait consumed.
#[track_caller]
fn payload(attempt: &StepAttempt) -> Value {
    attempt
        .output
        .as_ref()
        .and_then(|output| output.get("event"))
        .and_then(|event| event.get("payload"))
        .cloned()
        .unwrap_or_else(|| panic!("the wait consumed no event: {:?}", attempt.output))
}

/// Claims the one claimable run of the store again (after a wake-up).
async fn reclaim<S: Store + ?Sized>(store: &S, id: Uuid) -> WorkflowRun {
    let claimed = store
        .claim_run(&new_worker(), LONG_LEASE)
        .await
        .unwrap()
        .expect("the run should be claimable");
    assert_eq!(claimed.id, id);
    claimed
}

/// An event sent before the wait is delivered when the wait is reached: the wait's attempt
/// (kind `event`) completes with it, and the event is marked consumed by the wait.
pub async fn event_sent_before_the_wait_is_delivered(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let sent = store
        .events()
        .unwrap()
        .send_event(send(run.id, "approval", json!({ "ok": true })))
        .await
        .unwrap();
    assert!(!sent.duplicate);
    assert!(!sent.woke, "a running run is not waiting");
    assert_eq!(sent.event.workflow_run_id, run.id);
    assert_eq!(sent.event.namespace, store.namespace());
    assert_eq!(sent.event.consumed_by, None);
    assert_near_now(Some(sent.event.created_at), "created_at");

    let attempt = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/approval", "approval", None))
            .await
            .unwrap(),
    );
    assert_eq!(attempt.kind, StepKind::Event);
    assert_eq!(attempt.status, StepStatus::Completed);
    assert_eq!(attempt.step_name, "event/approval");
    assert_eq!(attempt.config["topic"], "approval");
    assert_eq!(payload(&attempt), json!({ "ok": true }));
    assert!(attempt.finished_at.is_some());

    let events = store.events().unwrap().list_events(run.id).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, sent.event.id);
    assert_eq!(events[0].consumed_by.as_deref(), Some("event/approval"));
    assert_near_now(events[0].consumed_at, "consumed_at");
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(history, vec![attempt]);
    let still = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(
        still.status,
        RunStatus::Running,
        "a delivered wait does not park"
    );
}

/// A wait without an event parks the run (sleeping, no worker, until the end of time); a
/// send on its topic makes it claimable at once, and the next wait consumes the event.
pub async fn wait_parks_and_a_send_wakes_the_run(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let parked_run = parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/approval", "approval", None))
            .await
            .unwrap(),
    );
    assert_eq!(parked_run.status, RunStatus::Sleeping);
    assert_eq!(parked_run.worker_id, None);
    assert_eq!(parked_run.available_at, Some(limits::LATEST));
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].kind, StepKind::Event);
    assert_eq!(history[0].status, StepStatus::Running);
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none(),
        "a waiting run is not claimable"
    );

    let sent = store
        .events()
        .unwrap()
        .send_event(send(run.id, "approval", json!("yes")))
        .await
        .unwrap();
    assert!(sent.woke);
    let woken = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(woken.status, RunStatus::Sleeping);
    assert_near_now(woken.available_at, "available_at after the send");

    let again = reclaim(&store, run.id).await;
    assert_eq!(again.attempts, run.attempts, "waking continues the attempt");
    let attempt = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&again, "event/approval", "approval", None))
            .await
            .unwrap(),
    );
    assert_eq!(attempt.id, history[0].id, "the running wait is completed");
    assert_eq!(payload(&attempt), json!("yes"));
    assert_eq!(store.step_history(run.id).await.unwrap().len(), 1);
}

/// Each topic is a FIFO mailbox: waits get the events in the order they were sent, each
/// event once; other topics neither deliver nor wake.
pub async fn events_are_delivered_in_order_once_per_topic(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    for n in 0..3 {
        store
            .events()
            .unwrap()
            .send_event(send(run.id, "numbers", json!(n)))
            .await
            .unwrap();
    }
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "other", json!("x")))
        .await
        .unwrap();
    for (n, name) in ["event/numbers", "event/numbers:1", "event/numbers:2"]
        .into_iter()
        .enumerate()
    {
        let attempt = done(
            store
                .events()
                .unwrap()
                .wait_for_event(wait(&run, name, "numbers", None))
                .await
                .unwrap(),
        );
        assert_eq!(payload(&attempt), json!(n), "wait {name}");
    }
    parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/numbers:3", "numbers", None))
            .await
            .unwrap(),
    );
    let woke = store
        .events()
        .unwrap()
        .send_event(send(run.id, "other", json!("y")))
        .await
        .unwrap();
    assert!(!woke.woke, "a send on another topic does not wake the run");
    let events = store.events().unwrap().list_events(run.id).await.unwrap();
    let consumers: Vec<Option<&str>> = events.iter().map(|e| e.consumed_by.as_deref()).collect();
    assert_eq!(
        consumers,
        vec![
            Some("event/numbers"),
            Some("event/numbers:1"),
            Some("event/numbers:2"),
            None,
            None
        ]
    );
}

/// A completed wait asked again returns its attempt as it is and consumes nothing more.
pub async fn a_completed_wait_is_not_repeated(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(1)))
        .await
        .unwrap();
    let first = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", None))
            .await
            .unwrap(),
    );
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(2)))
        .await
        .unwrap();
    let again = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", None))
            .await
            .unwrap(),
    );
    assert_eq!(again, first);
    let events = store.events().unwrap().list_events(run.id).await.unwrap();
    assert_eq!(events[1].consumed_by, None);
}

/// A send with a deduplication key already used for the run and topic stores nothing and
/// returns the first event; the same key on another topic is another event.
pub async fn duplicate_sends_store_one_event(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let keyed = |payload| SendEvent {
        dedup_key: Some("webhook-7".into()),
        ..send(run.id, "payment", payload)
    };
    let first = store
        .events()
        .unwrap()
        .send_event(keyed(json!(1)))
        .await
        .unwrap();
    let second = store
        .events()
        .unwrap()
        .send_event(keyed(json!(2)))
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(second.event, first.event);
    assert_eq!(second.event.payload, json!(1));
    let other_topic = store
        .events()
        .unwrap()
        .send_event(SendEvent {
            topic: "refund".into(),
            ..keyed(json!(3))
        })
        .await
        .unwrap();
    assert!(!other_topic.duplicate);
    assert_eq!(
        store
            .events()
            .unwrap()
            .list_events(run.id)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A wait with a timeout parks until the timeout; reached again after it, it completes as
/// timed out (`{"timedOut": true}`) and consumes nothing.
pub async fn wait_times_out(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let timeout = Duration::from_millis(300);
    let parked_run = parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", Some(timeout)))
            .await
            .unwrap(),
    );
    let history = store.step_history(run.id).await.unwrap();
    let until = parked_run.available_at.expect("parked until the timeout");
    assert_delay(
        Some(until),
        history[0].created_at,
        history[0].created_at,
        timeout,
    );
    sleep_past(until).await;
    let again = reclaim(&store, run.id).await;
    let attempt = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&again, "event/t", "t", Some(timeout)))
            .await
            .unwrap(),
    );
    assert_eq!(attempt.output, Some(json!({ "timedOut": true })));
    // An event sent now stays for the next wait.
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!("late")))
        .await
        .unwrap();
    let next = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&again, "event/t:1", "t", Some(timeout)))
            .await
            .unwrap(),
    );
    assert_eq!(payload(&next), json!("late"));
}

/// Sending to an unknown run, or to a completed, failed or canceled one, is refused and
/// stores nothing.
pub async fn send_is_refused_for_unknown_and_finished_runs(setup: impl Setup) {
    let store = setup.store().await;
    let unknown = Uuid::now_v7();
    assert_err!(
        store.events().unwrap().send_event(send(unknown, "t", json!(1))).await,
        StoreError::RunNotFound { id } if *id == unknown
    );
    assert_err!(
        store
            .events()
            .unwrap()
            .send_event(SendEvent {
                target: EventTarget::Key {
                    workflow_name: unique_name(),
                    idempotency_key: "k".into(),
                },
                ..send(unknown, "t", json!(1))
            })
            .await,
        StoreError::RunKeyNotFound { .. }
    );
    for run in [
        create_completed(&store).await,
        create_failed(&store).await,
        create_canceled(&store).await,
    ] {
        assert_err!(
            store.events().unwrap().send_event(send(run.id, "t", json!(1))).await,
            StoreError::WrongState { status, .. } if *status == run.status
        );
        assert!(
            store
                .events()
                .unwrap()
                .list_events(run.id)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

/// A run can be addressed by its workflow and idempotency key.
pub async fn send_by_workflow_and_idempotency_key(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let run = store
        .create_run(CreateRun {
            idempotency_key: Some("order-42".into()),
            ..CreateRun::new(&name)
        })
        .await
        .unwrap();
    let sent = store
        .events()
        .unwrap()
        .send_event(SendEvent {
            target: EventTarget::Key {
                workflow_name: name,
                idempotency_key: "order-42".into(),
            },
            ..send(Uuid::nil(), "paid", json!({ "amount": 5 }))
        })
        .await
        .unwrap();
    assert_eq!(sent.event.workflow_run_id, run.id);
    assert_eq!(
        store
            .events()
            .unwrap()
            .list_events(run.id)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The wait is a worker-side write: fenced on the run running under the worker.
pub async fn wait_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let stranger = WaitForEvent {
        call: None,
        holder: Holder::new(new_worker(), run.claim_epoch),
        ..wait(&run, "event/t", "t", None)
    };
    assert_err!(
        store.events().unwrap().wait_for_event(stranger).await,
        StoreError::LeaseLost { .. }
    );
    let pending = create_pending(&store).await;
    assert_err!(
        store
            .events()
            .unwrap()
            .wait_for_event(WaitForEvent {
                call: None,
                run_id: pending.id,
                ..wait(&run, "event/t", "t", None)
            })
            .await,
        StoreError::WrongState { .. }
    );
    let unknown = Uuid::now_v7();
    assert_err!(
        store
            .events().unwrap().wait_for_event(WaitForEvent {
                call: None,
                run_id: unknown,
                ..wait(&run, "event/t", "t", None)
            })
            .await,
        StoreError::RunNotFound { id } if *id == unknown
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    assert!(store.step_history(pending.id).await.unwrap().is_empty());
}

/// A paused waiting run keeps an event sent meanwhile; resumed, it consumes it.
pub async fn paused_waiting_run_keeps_its_event(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", None))
            .await
            .unwrap(),
    );
    store.lifecycle().unwrap().pause_run(run.id).await.unwrap();
    let sent = store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(9)))
        .await
        .unwrap();
    assert!(!sent.woke);
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Paused
    );
    store.lifecycle().unwrap().resume_run(run.id).await.unwrap();
    let again = reclaim(&store, run.id).await;
    let attempt = done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&again, "event/t", "t", None))
            .await
            .unwrap(),
    );
    assert_eq!(payload(&attempt), json!(9));
}

/// A run parked by a durable sleep after an event wait is not woken by a send: the wait
/// that ended forgot its topic.
pub async fn send_does_not_wake_a_durable_sleep(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", None))
            .await
            .unwrap(),
    );
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(1)))
        .await
        .unwrap();
    let again = reclaim(&store, run.id).await;
    done(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&again, "event/t", "t", None))
            .await
            .unwrap(),
    );
    let until = chrono::Utc::now() + chrono::Duration::seconds(60);
    store
        .sleep_run(run.id, &holder(&again), until)
        .await
        .unwrap();
    let sent = store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(2)))
        .await
        .unwrap();
    assert!(!sent.woke);
    let sleeping = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(sleeping.available_at.map(micros), Some(micros(until)));
}

/// A send that wakes a run announces it, so an idle worker claims it without polling.
pub async fn waking_send_is_announced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    parked(
        store
            .events()
            .unwrap()
            .wait_for_event(wait(&run, "event/t", "t", None))
            .await
            .unwrap(),
    );
    let mut notifications = store.subscribe().await.unwrap();
    store
        .events()
        .unwrap()
        .send_event(send(run.id, "t", json!(1)))
        .await
        .unwrap();
    let expected = Notification::RunAvailable {
        namespace: store.namespace().to_owned(),
    };
    loop {
        match tokio::time::timeout(Duration::from_secs(10), notifications.next()).await {
            Err(_) => panic!("no wake-up within 10 s of the send"),
            Ok(None) => panic!("the notification stream ended"),
            // The park's own announcement (the run sleeping, for waiters) may still be on
            // its way; this case is about the wake-up.
            Ok(Some(Notification::Missed { .. } | Notification::StatusChanged { .. })) => continue,
            Ok(Some(notification)) => {
                assert_eq!(notification, expected);
                break;
            }
        }
    }
}

/// Values past the limits are refused before anything is written.
pub async fn event_values_past_the_limits_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let long_topic = "t".repeat(limits::MAX_TOPIC_BYTES + 1);
    assert_err!(
        store.events().unwrap().send_event(send(run.id, &long_topic, json!(1))).await,
        StoreError::Limit(error) if error.field() == limits::Field::Topic
    );
    assert_err!(
        store
            .events().unwrap().send_event(send(run.id, "t", json!({ "nul": "a\u{0}b" })))
            .await,
        StoreError::Limit(error) if error.field() == limits::Field::EventPayload
    );
    assert_err!(
        store
            .events().unwrap().send_event(SendEvent {
                dedup_key: Some("k".repeat(limits::MAX_IDEMPOTENCY_KEY_BYTES + 1)),
                ..send(run.id, "t", json!(1))
            })
            .await,
        StoreError::Limit(error) if error.field() == limits::Field::DedupKey
    );
    assert_err!(
        store
            .events().unwrap().wait_for_event(wait(
                &run,
                "event/t",
                "t",
                Some(limits::MAX_DURATION + Duration::from_secs(1))
            ))
            .await,
        StoreError::Limit(error) if error.field() == limits::Field::EventTimeout
    );
    assert!(
        store
            .events()
            .unwrap()
            .list_events(run.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
}

/// A send racing a wait that parks never loses the wake-up: after both, the event was
/// delivered, or the run is claimable now.
pub async fn send_racing_a_park_never_loses_the_wake_up(setup: impl Setup) {
    let store = std::sync::Arc::new(setup.store().await);
    for round in 0..20 {
        let run = create_claimed(&*store).await;
        let waiting = {
            let store = store.clone();
            let params = wait(&run, "event/t", "t", None);
            tokio::spawn(async move { store.events().unwrap().wait_for_event(params).await })
        };
        let sending = {
            let store = store.clone();
            let params = send(run.id, "t", json!(round));
            tokio::spawn(async move { store.events().unwrap().send_event(params).await })
        };
        let waited = waiting.await.unwrap().unwrap();
        sending.await.unwrap().unwrap();
        match waited {
            EventWait::Done(attempt) => assert_eq!(payload(&attempt), json!(round)),
            EventWait::Parked(_) => {
                let again = reclaim(&*store, run.id).await;
                let attempt = done(
                    store
                        .events()
                        .unwrap()
                        .wait_for_event(wait(&again, "event/t", "t", None))
                        .await
                        .unwrap(),
                );
                assert_eq!(payload(&attempt), json!(round), "round {round}");
            }
        }
        store.lifecycle().unwrap().cancel_run(run.id).await.unwrap();
    }
}
