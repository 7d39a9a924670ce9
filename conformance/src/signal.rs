//! Signal-with-start: [`EventStore::signal_with_start`] sends an event to the run of a
//! workflow and an idempotency key, creating the run first when no run holds the key, in
//! one transaction. Racing calls make one run holding each of their events once; a finished
//! run that still holds its key refuses the event and nothing is stored.

use std::sync::Arc;
use std::time::Duration;
#[cfg(doc)]
use tasks_core::EventStore;
use tasks_core::{LeaseStore, RunStore};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tasks_core::limits::Field;
use tasks_core::{
    CreateRun, EventWait, IdempotencyScope, LimitError, ListRuns, Notification, RunEvent,
    RunStatus, SignalWithStart, SignalledRun, Store, StoreError, WaitForEvent, limits,
};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A signal-with-start of `payload` on `topic` to the run of `(name, key)`, started with
/// input `{"n": n}` in `scope` when there is none.
fn signal(
    name: &str,
    key: &str,
    scope: IdempotencyScope,
    n: i32,
    topic: &str,
    payload: Value,
) -> SignalWithStart {
    SignalWithStart {
        start: CreateRun {
            input: Some(json!({ "n": n })),
            idempotency_key: Some(key.to_owned()),
            idempotency_scope: scope,
            ..CreateRun::new(name.to_owned())
        },
        topic: topic.to_owned(),
        payload,
        dedup_key: None,
    }
}

async fn signal_with_start<S: Store + ?Sized>(
    store: &S,
    params: SignalWithStart,
) -> Result<SignalledRun, StoreError> {
    store.events().unwrap().signal_with_start(params).await
}

async fn events_of<S: Store + ?Sized>(store: &S, run_id: Uuid) -> Vec<RunEvent> {
    store.events().unwrap().list_events(run_id).await.unwrap()
}

fn payloads(events: &[RunEvent]) -> Vec<Value> {
    events.iter().map(|event| event.payload.clone()).collect()
}

/// No run holds the key: the run is created, pending, with the start's input and key and
/// the event in its mailbox, and announced. A second call finds that run: nothing is
/// created, and its event goes to the same mailbox, after the first.
pub async fn signal_with_start_creates_the_run_then_signals_it(setup: impl Setup) {
    let store = setup.store().await;
    let mut notifications = store.subscribe().await.unwrap();
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::ForEver;
    let first = signal_with_start(&store, signal(&name, &key, scope, 1, "add", json!("tea")))
        .await
        .unwrap();
    assert!(first.created);
    assert_eq!(first.run.status, RunStatus::Pending);
    assert_eq!(first.run.workflow_name, name);
    assert_eq!(first.run.idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(first.run.input, Some(json!({ "n": 1 })));
    assert_eq!(first.sent.event.workflow_run_id, first.run.id);
    assert_eq!(first.sent.event.topic, "add");
    assert!(!first.sent.duplicate);
    assert!(!first.sent.woke, "a pending run is not waiting");
    assert_near_now(Some(first.sent.event.created_at), "created_at");
    let expected = Notification::RunAvailable {
        namespace: store.namespace().to_owned(),
    };
    loop {
        match tokio::time::timeout(Duration::from_secs(10), notifications.next()).await {
            Err(_) => panic!("the new run was not announced within 10 s"),
            Ok(None) => panic!("the notification stream ended"),
            Ok(Some(Notification::Missed { .. } | Notification::StatusChanged { .. })) => continue,
            Ok(Some(notification)) => {
                assert_eq!(notification, expected);
                break;
            }
        }
    }

    let second = signal_with_start(&store, signal(&name, &key, scope, 2, "add", json!("milk")))
        .await
        .unwrap();
    assert!(!second.created);
    assert_eq!(second.run.id, first.run.id);
    assert_eq!(
        second.run.input,
        Some(json!({ "n": 1 })),
        "the first start's"
    );
    let runs = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&runs.data), [first.run.id]);
    let events = events_of(&store, first.run.id).await;
    assert_eq!(payloads(&events), [json!("tea"), json!("milk")]);
    assert_eq!(events[1].id, second.sent.event.id);

    // The events are the run's like any sent ones: a wait consumes the first.
    let claimed = claim_one(&store, LONG_LEASE).await;
    let waited = store
        .events()
        .unwrap()
        .wait_for_event(WaitForEvent {
            call: None,
            run_id: claimed.id,
            holder: holder(&claimed),
            step_name: "event/add".to_owned(),
            topic: "add".to_owned(),
            timeout: None,
        })
        .await
        .unwrap();
    match waited {
        EventWait::Done(attempt) => {
            assert_eq!(attempt.output.unwrap()["event"]["payload"], json!("tea"));
        }
        EventWait::Parked(run) => panic!("the event was there: {run:?}"),
    }
}

/// A run parked on the topic is woken by the event, as by a send: it is available now.
pub async fn signal_with_start_wakes_a_run_parked_on_the_topic(setup: impl Setup) {
    let store = setup.store().await;
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::ForEver;
    let created = signal_with_start(&store, signal(&name, &key, scope, 1, "first", json!(1)))
        .await
        .unwrap();
    let claimed = claim_one(&store, LONG_LEASE).await;
    assert_eq!(claimed.id, created.run.id);
    let parked = store
        .events()
        .unwrap()
        .wait_for_event(WaitForEvent {
            call: None,
            run_id: claimed.id,
            holder: holder(&claimed),
            step_name: "event/go".to_owned(),
            topic: "go".to_owned(),
            timeout: None,
        })
        .await
        .unwrap();
    assert!(matches!(parked, EventWait::Parked(_)));

    let woken = signal_with_start(&store, signal(&name, &key, scope, 2, "go", json!(2)))
        .await
        .unwrap();
    assert!(!woken.created);
    assert!(woken.sent.woke);
    assert_eq!(woken.run.status, RunStatus::Sleeping);
    assert_near_now(woken.run.available_at, "available_at");
    let again = claim_one(&store, LONG_LEASE).await;
    assert_eq!(again.id, created.run.id);
}

/// A deduplication key stores its event once, whichever call created the run.
pub async fn signal_with_start_deduplicates_its_event(setup: impl Setup) {
    let store = setup.store().await;
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::ForEver;
    let keyed = |n| SignalWithStart {
        dedup_key: Some("delivery-1".to_owned()),
        ..signal(&name, &key, scope, n, "add", json!(n))
    };
    let first = signal_with_start(&store, keyed(1)).await.unwrap();
    let repeat = signal_with_start(&store, keyed(2)).await.unwrap();
    assert!(first.created && !repeat.created);
    assert!(!first.sent.duplicate);
    assert!(repeat.sent.duplicate);
    assert_eq!(repeat.sent.event, first.sent.event);
    assert_eq!(payloads(&events_of(&store, first.run.id).await), [json!(1)]);
}

/// A finished run that still holds its key (the default scope) cannot take the event:
/// `WrongState`, and neither an event nor a run is stored. A finished run whose scope
/// lapsed (`WhileActive`) has released its key: a new run is created and gets the event.
pub async fn signal_with_start_to_a_finished_run(setup: impl Setup) {
    let store = setup.store().await;
    for scope in [IdempotencyScope::ForEver, IdempotencyScope::WhileActive] {
        let (name, key) = (unique_name(), Uuid::new_v4().to_string());
        let first = signal_with_start(&store, signal(&name, &key, scope, 1, "add", json!(1)))
            .await
            .unwrap();
        let claimed = claim_one(&store, LONG_LEASE).await;
        store
            .complete_run(claimed.id, &holder(&claimed), json!(null))
            .await
            .unwrap();
        let after = signal_with_start(&store, signal(&name, &key, scope, 2, "add", json!(2))).await;
        let events = events_of(&store, first.run.id).await;
        assert_eq!(payloads(&events), [json!(1)], "{scope:?}: nothing more");
        match scope {
            IdempotencyScope::ForEver => {
                assert_err!(
                    after,
                    StoreError::WrongState { id, status: RunStatus::Completed, .. }
                        if *id == first.run.id
                );
                let runs = store.list_runs(ListRuns::default()).await.unwrap();
                assert_eq!(ids(&runs.data), [first.run.id], "no run created");
            }
            _ => {
                let after = after.unwrap();
                assert!(after.created);
                assert_ne!(after.run.id, first.run.id);
                assert_eq!(after.run.idempotency_key.as_deref(), Some(key.as_str()));
                let events = events_of(&store, after.run.id).await;
                assert_eq!(payloads(&events), [json!(2)]);
                let old = store.get_run(first.run.id).await.unwrap().unwrap();
                assert_eq!(old.idempotency_key, None, "the key moved to the new run");
                store
                    .lifecycle()
                    .unwrap()
                    .cancel_run(after.run.id)
                    .await
                    .unwrap();
            }
        }
    }
}

/// A start without an idempotency key has no run to find: `InvalidArgument`. A value past
/// the limits (the start's or the event's) is `Limit`. Nothing is stored either way.
pub async fn signal_with_start_is_checked(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let mut keyless = signal(&name, "k", IdempotencyScope::ForEver, 1, "add", json!(1));
    keyless.start.idempotency_key = None;
    assert_err!(
        signal_with_start(&store, keyless).await,
        StoreError::InvalidArgument(_)
    );
    let long_topic = "t".repeat(limits::MAX_TOPIC_BYTES + 1);
    let params = signal(
        &name,
        "k",
        IdempotencyScope::ForEver,
        1,
        &long_topic,
        json!(1),
    );
    assert_err!(
        signal_with_start(&store, params).await,
        StoreError::Limit(LimitError::TooLong {
            field: Field::Topic,
            ..
        })
    );
    let long_key = "k".repeat(limits::MAX_IDEMPOTENCY_KEY_BYTES + 1);
    let params = signal(
        &name,
        &long_key,
        IdempotencyScope::ForEver,
        1,
        "add",
        json!(1),
    );
    assert_err!(
        signal_with_start(&store, params).await,
        StoreError::Limit(LimitError::TooLong {
            field: Field::IdempotencyKey,
            ..
        })
    );
    let runs = store.list_runs(ListRuns::default()).await.unwrap();
    assert!(
        runs.data.is_empty(),
        "nothing stored: {:?}",
        ids(&runs.data)
    );
}

/// Concurrent calls for one key, with no holder and with a holder whose scope lapsed: one
/// run is created, every call returns it, exactly one says it created it, and it holds
/// every call's event once.
pub async fn concurrent_signal_with_start_makes_one_run_with_every_event(setup: impl Setup) {
    const CALLERS: usize = 16;
    let store = Arc::new(setup.store().await);
    for lapsed_holder in [false, true] {
        let (name, key) = (unique_name(), Uuid::new_v4().to_string());
        let scope = IdempotencyScope::WhileActive;
        let old = if lapsed_holder {
            let old = signal_with_start(&*store, signal(&name, &key, scope, 0, "add", json!(-1)))
                .await
                .unwrap()
                .run;
            store.lifecycle().unwrap().cancel_run(old.id).await.unwrap();
            Some(old.id)
        } else {
            None
        };
        let barrier = Arc::new(Barrier::new(CALLERS));
        let tasks: Vec<_> = (0..CALLERS)
            .map(|i| {
                let (store, barrier) = (store.clone(), barrier.clone());
                let n = i32::try_from(i).unwrap();
                let params = signal(&name, &key, scope, n, "add", json!(n));
                tokio::spawn(async move {
                    barrier.wait().await;
                    signal_with_start(&*store, params).await
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(
                task.await
                    .expect("task panicked")
                    .expect("signal_with_start"),
            );
        }
        let run_id = outcomes[0].run.id;
        assert_ne!(Some(run_id), old);
        assert!(
            outcomes.iter().all(|outcome| outcome.run.id == run_id),
            "calls returned different runs: {:?}",
            outcomes.iter().map(|o| o.run.id).collect::<Vec<_>>()
        );
        let created = outcomes.iter().filter(|outcome| outcome.created).count();
        assert_eq!(created, 1, "one call created the run");
        let mut received: Vec<i64> = events_of(&*store, run_id)
            .await
            .iter()
            .map(|event| event.payload.as_i64().unwrap())
            .collect();
        received.sort_unstable();
        let every: Vec<i64> = (0..CALLERS as i64).collect();
        assert_eq!(received, every, "every event once");
        let listed = store
            .list_runs(ListRuns {
                workflow_name: Some(name.clone()),
                ..ListRuns::default()
            })
            .await
            .unwrap();
        let expected = usize::from(lapsed_holder) + 1;
        assert_eq!(listed.data.len(), expected, "one new run");
        if let Some(old) = old {
            let old_events = events_of(&*store, old).await;
            assert_eq!(payloads(&old_events), [json!(-1)]);
        }
        // Out of the way of the next round's claims.
        store.lifecycle().unwrap().cancel_run(run_id).await.unwrap();
    }
}
