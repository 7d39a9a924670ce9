//! End to end: signal-with-start through the client, with a real worker, against each store
//! (Postgres and SQLite): concurrent callers for one key start one run that receives every
//! event, later events wake it, a finished run that keeps its key refuses the event, and
//! refusals store nothing.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, client, worker};
use tasks::{
    ClientError, Event, IdempotencyScope, ListRuns, RunStatus, StoreError, WorkflowContext,
    WorkflowError, workflow,
};

/// An item added to a cart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Added {
    sku: String,
}

impl Event for Added {
    const TOPIC: &'static str = "e2e-signal-added";
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Cart {
    /// How many items the cart waits for.
    items: usize,
}

/// Collects `items` added items, in the order they were received.
#[workflow(name = "e2e-signal-cart", events(Added))]
async fn cart(ctx: WorkflowContext, cart: Cart) -> Result<Vec<String>, WorkflowError> {
    let mut skus = Vec::new();
    for _ in 0..cart.items {
        skus.push(ctx.wait_for_event::<Added>().await?.sku);
    }
    Ok(skus)
}

async fn concurrent_callers_start_one_run_that_receives_every_event(backend: Backend) {
    const CALLERS: usize = 8;
    let store = backend.store().await;
    let client = client(&store);
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .start::<cart>(Cart { items: CALLERS + 1 })
                    .idempotency_key("cart-1")
                    .with_event(&Added {
                        sku: format!("sku-{i}"),
                    })
                    .await
            })
        })
        .collect();
    let mut signalled = Vec::new();
    for task in tasks {
        signalled.push(task.await.unwrap().unwrap());
    }
    let run_id = signalled[0].run.id;
    assert!(signalled.iter().all(|s| s.run.id == run_id));
    assert_eq!(signalled.iter().filter(|s| s.created).count(), 1);

    let worker = worker(&store).build().unwrap().spawn();
    let handle = signalled.pop().unwrap().handle;
    handle
        .wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(20))
        .await
        .unwrap();
    // The run waits for its last item: this event wakes it.
    let last = client
        .start::<cart>(Cart { items: 0 })
        .idempotency_key("cart-1")
        .with_event(&Added { sku: "last".into() })
        .await
        .unwrap();
    assert!(!last.created);
    assert_eq!(last.run.id, run_id);
    assert!(last.event.woke, "the run was parked on the topic");
    let mut skus = handle.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(skus.pop().as_deref(), Some("last"));
    skus.sort();
    let every: Vec<String> = (0..CALLERS).map(|i| format!("sku-{i}")).collect();
    assert_eq!(skus, every, "every caller's event once");
    worker.shutdown().await;

    // The finished run holds its key for ever: the event is refused, nothing is stored.
    let refused = client
        .start::<cart>(Cart { items: 1 })
        .idempotency_key("cart-1")
        .with_event(&Added { sku: "late".into() })
        .await;
    assert!(
        matches!(
            refused,
            Err(ClientError::Store(StoreError::WrongState {
                status: RunStatus::Completed,
                ..
            }))
        ),
        "{refused:?}"
    );
    let events = store.events().unwrap().list_events(run_id).await.unwrap();
    assert_eq!(events.len(), CALLERS + 1);
    let runs = client.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(runs.data.len(), 1);
}

async fn a_finished_run_that_released_its_key_is_followed_by_a_new_one(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let signal = |sku: &str| {
        client
            .start::<cart>(Cart { items: 1 })
            .idempotency_key("cart-2")
            .idempotency_scope(IdempotencyScope::WhileActive)
            .with_event(&Added { sku: sku.into() })
    };
    let first = signal("a").await.unwrap();
    assert_eq!(
        first
            .handle
            .result_within(Duration::from_secs(20))
            .await
            .unwrap(),
        ["a"]
    );
    let second = signal("b").await.unwrap();
    assert!(second.created, "the finished run released its key");
    assert_ne!(second.run.id, first.run.id);
    assert_eq!(
        second
            .handle
            .result_within(Duration::from_secs(20))
            .await
            .unwrap(),
        ["b"]
    );
    worker.shutdown().await;
}

async fn refusals_store_nothing(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let keyless = client
        .start::<cart>(Cart { items: 1 })
        .with_event(&Added { sku: "a".into() })
        .await;
    assert!(
        matches!(
            keyless,
            Err(ClientError::Store(StoreError::InvalidArgument(_)))
        ),
        "{keyless:?}"
    );
    let undeclared = client
        .start_by_name("e2e-signal-cart", json!({ "items": 1 }))
        .idempotency_key("cart-3")
        .with_event_by_topic("nope", json!({}))
        .await;
    assert!(
        matches!(undeclared, Err(ClientError::UndeclaredEvent { .. })),
        "{undeclared:?}"
    );
    let invalid_payload = client
        .start_by_name("e2e-signal-cart", json!({ "items": 1 }))
        .idempotency_key("cart-3")
        .with_event_by_topic(Added::TOPIC, json!({ "sku": 7 }))
        .await;
    assert!(
        matches!(invalid_payload, Err(ClientError::InvalidEvent { .. })),
        "{invalid_payload:?}"
    );
    let invalid_input = client
        .start_by_name("e2e-signal-cart", json!({ "items": "many" }))
        .idempotency_key("cart-3")
        .with_event_by_topic(Added::TOPIC, json!({ "sku": "a" }))
        .await;
    assert!(
        matches!(invalid_input, Err(ClientError::InvalidInput(_))),
        "{invalid_input:?}"
    );
    let runs = client.list_runs(ListRuns::default()).await.unwrap();
    assert!(runs.data.is_empty(), "nothing stored");
}

every_store!(
    concurrent_callers_start_one_run_that_receives_every_event,
    a_finished_run_that_released_its_key_is_followed_by_a_new_one,
    refusals_store_nothing,
);
