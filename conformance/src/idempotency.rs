//! Idempotency scopes: how long a run holds its idempotency key, and what a
//! create with a key whose holder's scope has lapsed does (it releases the key from the old
//! run and creates a new one).

use std::sync::Arc;
use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use serde_json::json;
use tasks_core::limits::Field;
use tasks_core::{CreateRun, IdempotencyScope, LimitError, ListRuns, RunStatus, Store, StoreError};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

fn keyed(name: &str, key: &str, scope: IdempotencyScope, n: i32) -> CreateRun {
    CreateRun {
        input: Some(json!({ "n": n })),
        idempotency_key: Some(key.to_owned()),
        idempotency_scope: scope,
        ..CreateRun::new(name.to_owned())
    }
}

/// The default scope: the key stays with its run after the run has finished.
pub async fn idempotency_for_ever_keeps_the_key_after_the_run_finished(setup: impl Setup) {
    let store = setup.store().await;
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let first = store
        .create_run(keyed(&name, &key, IdempotencyScope::ForEver, 1))
        .await
        .unwrap();
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(first.id)
        .await
        .unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
    let again = store
        .create_run(keyed(&name, &key, IdempotencyScope::WhileActive, 2))
        .await
        .unwrap();
    assert_eq!(again.id, first.id, "the finished run still holds its key");
    assert_eq!(again.input, Some(json!({ "n": 1 })));
}

/// While active: the key is held while the run is live, and free once it has finished; the
/// new run takes it, and the old run keeps it only as `released`.
pub async fn idempotency_while_active_frees_the_key_once_the_run_finished(setup: impl Setup) {
    let store = setup.store().await;
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::WhileActive;
    let first = store
        .create_run(keyed(&name, &key, scope, 1))
        .await
        .unwrap();
    let claimed = claim_one(&store, LONG_LEASE).await;
    assert_eq!(claimed.id, first.id);
    let repeat = store
        .create_run(keyed(&name, &key, scope, 2))
        .await
        .unwrap();
    assert_eq!(repeat.id, first.id, "a running run holds its key");

    store
        .complete_run(first.id, &holder(&claimed), json!(null))
        .await
        .unwrap();
    let second = store
        .create_run(keyed(&name, &key, scope, 3))
        .await
        .unwrap();
    assert_ne!(
        second.id, first.id,
        "a finished run no longer holds the key"
    );
    assert_eq!(second.status, RunStatus::Pending);
    assert_eq!(second.idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(second.input, Some(json!({ "n": 3 })));
    let old = store.get_run(first.id).await.unwrap().unwrap();
    assert_eq!(old.idempotency_key, None, "the key moved to the new run");
    assert_eq!(old.status, RunStatus::Completed);

    let third = store
        .create_run(keyed(&name, &key, scope, 4))
        .await
        .unwrap();
    assert_eq!(third.id, second.id, "the new run holds the key while live");
}

/// With a time to live: the key is free once the time has passed since the run's creation,
/// whatever the run's status (here it is still pending).
pub async fn idempotency_ttl_frees_the_key_after_its_time(setup: impl Setup) {
    let store = setup.store().await;
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::Ttl(Duration::from_millis(600));
    let first = store
        .create_run(keyed(&name, &key, scope, 1))
        .await
        .unwrap();
    let repeat = store
        .create_run(keyed(&name, &key, scope, 2))
        .await
        .unwrap();
    assert_eq!(
        repeat.id, first.id,
        "the key is held within its time to live"
    );

    tokio::time::sleep(Duration::from_millis(900)).await;
    let second = store
        .create_run(keyed(&name, &key, scope, 3))
        .await
        .unwrap();
    assert_ne!(second.id, first.id, "the key expired");
    let old = store.get_run(first.id).await.unwrap().unwrap();
    assert_eq!(
        old.status,
        RunStatus::Pending,
        "the old run is untouched but for its key"
    );
    assert_eq!(old.idempotency_key, None);
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(listed.data.len(), 2);
}

/// A time to live of zero or past the limit is refused, and nothing is stored.
pub async fn idempotency_ttl_is_checked(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    for ttl in [
        Duration::ZERO,
        tasks_core::limits::MAX_DURATION + Duration::from_secs(1),
    ] {
        let refused = store
            .create_run(keyed(&name, "k", IdempotencyScope::Ttl(ttl), 1))
            .await;
        match refused {
            Err(StoreError::Limit(
                LimitError::OutOfRange {
                    field: Field::IdempotencyTtl,
                    ..
                }
                | LimitError::DurationTooLong {
                    field: Field::IdempotencyTtl,
                    ..
                },
            )) => {}
            other => panic!("expected a limit error for {ttl:?}, got {other:?}"),
        }
    }
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert!(listed.data.is_empty());
}

/// Concurrent creates with a key whose holder has finished (while-active scope): exactly one
/// new run is created, and every caller gets it.
pub async fn idempotency_release_race_creates_one_run(setup: impl Setup) {
    const CALLERS: usize = 24;
    let store = Arc::new(setup.store().await);
    let (name, key) = (unique_name(), Uuid::new_v4().to_string());
    let scope = IdempotencyScope::WhileActive;
    let first = store
        .create_run(keyed(&name, &key, scope, 0))
        .await
        .unwrap();
    store
        .lifecycle()
        .unwrap()
        .cancel_run(first.id)
        .await
        .unwrap();

    let barrier = Arc::new(Barrier::new(CALLERS));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            let params = keyed(&name, &key, scope, i as i32 + 1);
            tokio::spawn(async move {
                barrier.wait().await;
                store.create_run(params).await
            })
        })
        .collect();
    let mut created = Vec::new();
    for task in tasks {
        created.push(task.await.expect("task panicked").expect("create_run"));
    }
    let winner = created[0].id;
    assert_ne!(winner, first.id);
    assert!(
        created.iter().all(|run| run.id == winner),
        "concurrent creates returned different runs: {:?}",
        ids(&created)
    );
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    let mut expected = vec![first.id, winner];
    expected.sort();
    let mut listed = ids(&listed.data);
    listed.sort();
    assert_eq!(listed, expected, "one new run beside the old one");
}
