//! Published state of a run: [`StateStore::set_state`], [`StateStore::get_state`] and
//! [`StateStore::list_state`]. Each (run, key) holds its latest value and a version that grows by
//! one per publication; a publication is a completed step attempt of kind `state`, recorded
//! once per step name, fenced on the run's lease, and announced.

use std::time::Duration;
#[cfg(doc)]
use tasks_core::StateStore;
use tasks_core::{LeaseStore, RunStore, StepStore};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tasks_core::{
    Notification, PurgeRuns, RunStatus, SetState, StepKind, StepStatus, Store, StoreError,
    WorkflowRun, limits,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// The publication `step_name` of `value` under `key` by the run's worker.
fn set(run: &WorkflowRun, step_name: &str, key: &str, value: Value) -> SetState {
    SetState {
        call: None,
        run_id: run.id,
        holder: holder(run),
        step_name: step_name.to_owned(),
        key: key.to_owned(),
        value,
    }
}

/// A publication records a completed `state` attempt (the key in its config, the version
/// as output) and makes the value the key's latest, version 1 then 2; other keys keep
/// their own versions; the run is left running.
pub async fn publications_version_the_latest_value(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    assert_eq!(
        store
            .published_state()
            .unwrap()
            .get_state(run.id, "progress")
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .published_state()
            .unwrap()
            .list_state(run.id)
            .await
            .unwrap()
            .is_empty()
    );

    let first = store
        .published_state()
        .unwrap()
        .set_state(set(
            &run,
            "state/progress",
            "progress",
            json!({ "done": 1 }),
        ))
        .await
        .unwrap();
    assert!(first.published);
    assert_eq!(first.attempt.kind, StepKind::State);
    assert_eq!(first.attempt.status, StepStatus::Completed);
    assert_eq!(first.attempt.step_name, "state/progress");
    assert_eq!(first.attempt.config["key"], "progress");
    assert_eq!(first.attempt.output, Some(json!({ "version": 1 })));
    assert!(first.attempt.finished_at.is_some());
    let state = store
        .published_state()
        .unwrap()
        .get_state(run.id, "progress")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.run_id, run.id);
    assert_eq!(state.key, "progress");
    assert_eq!(state.value, json!({ "done": 1 }));
    assert_eq!(state.version, 1);
    assert_near_now(Some(state.updated_at), "updated_at");

    let second = store
        .published_state()
        .unwrap()
        .set_state(set(
            &run,
            "state/progress:1",
            "progress",
            json!({ "done": 2 }),
        ))
        .await
        .unwrap();
    assert!(second.published);
    assert_eq!(second.attempt.output, Some(json!({ "version": 2 })));
    store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/phase", "phase", json!("copying")))
        .await
        .unwrap();
    let state = store
        .published_state()
        .unwrap()
        .get_state(run.id, "progress")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((state.value, state.version), (json!({ "done": 2 }), 2));

    let all = store
        .published_state()
        .unwrap()
        .list_state(run.id)
        .await
        .unwrap();
    let keys: Vec<(&str, u64)> = all.iter().map(|s| (s.key.as_str(), s.version)).collect();
    assert_eq!(keys, [("phase", 1), ("progress", 2)], "by key");

    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(
        names(&history),
        ["state/progress", "state/progress:1", "state/phase"]
    );
    let still = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(still.status, RunStatus::Running);
    assert_eq!(still.worker_id, run.worker_id);
}

/// A publication whose step is recorded already (a replay, a retried write) writes
/// nothing: the first attempt is returned and the value and version stay those of the
/// latest publication, not the replayed one.
pub async fn a_recorded_publication_is_not_repeated(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let first = store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/p", "p", json!(10)))
        .await
        .unwrap();
    store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/p:1", "p", json!(20)))
        .await
        .unwrap();
    let again = store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/p", "p", json!(10)))
        .await
        .unwrap();
    assert!(!again.published);
    assert_eq!(again.attempt, first.attempt);
    let state = store
        .published_state()
        .unwrap()
        .get_state(run.id, "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((state.value, state.version), (json!(20), 2));
    assert_eq!(store.step_history(run.id).await.unwrap().len(), 2);
}

/// Only the worker holding the lease publishes, only while the run is running: another
/// worker is refused with `LeaseLost`, a finished run with `WrongState`, an unknown run with
/// `RunNotFound`, and nothing is stored.
pub async fn publication_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    assert_err!(
        store
            .published_state()
            .unwrap()
            .set_state(SetState {
                call: None,
                holder: Holder::new(new_worker(), run.claim_epoch),
                ..set(&run, "state/p", "p", json!(1))
            })
            .await,
        StoreError::LeaseLost { .. }
    );
    let unknown = Uuid::now_v7();
    assert_err!(
        store
            .published_state().unwrap().set_state(SetState {
                call: None,
                run_id: unknown,
                ..set(&run, "state/p", "p", json!(1))
            })
            .await,
        StoreError::RunNotFound { id } if *id == unknown
    );
    store
        .complete_run(run.id, &holder(&run), json!(null))
        .await
        .unwrap();
    assert_err!(
        store
            .published_state()
            .unwrap()
            .set_state(set(&run, "state/p", "p", json!(1)))
            .await,
        StoreError::WrongState { .. }
    );
    assert_eq!(
        store
            .published_state()
            .unwrap()
            .get_state(run.id, "p")
            .await
            .unwrap(),
        None
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
}

/// Reading the state of a run that does not exist is `RunNotFound`, not "no value".
pub async fn reading_an_unknown_run_is_not_found(setup: impl Setup) {
    let store = setup.store().await;
    let unknown = Uuid::now_v7();
    assert_err!(
        store.published_state().unwrap().get_state(unknown, "p").await,
        StoreError::RunNotFound { id } if *id == unknown
    );
    assert_err!(
        store.published_state().unwrap().list_state(unknown).await,
        StoreError::RunNotFound { id } if *id == unknown
    );
}

/// A publication is announced once committed, with the run, the key and the new version.
pub async fn publication_is_announced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let mut notifications = store.subscribe().await.unwrap();
    store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/p", "p", json!(1)))
        .await
        .unwrap();
    let expected = Notification::StateChanged {
        namespace: store.namespace().to_owned(),
        run_id: run.id,
        key: "p".into(),
        version: 1,
    };
    loop {
        match tokio::time::timeout(Duration::from_secs(10), notifications.next()).await {
            Err(_) => panic!("no announcement within 10 s of the publication"),
            Ok(None) => panic!("the notification stream ended"),
            Ok(Some(notification @ Notification::StateChanged { .. })) => {
                assert_eq!(notification, expected);
                break;
            }
            Ok(Some(_)) => continue,
        }
    }
}

/// A purge deletes a finished run together with its published state.
pub async fn purge_removes_published_state(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    store
        .published_state()
        .unwrap()
        .set_state(set(&run, "state/p", "p", json!(1)))
        .await
        .unwrap();
    store
        .complete_run(run.id, &holder(&run), json!(null))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let purged = store
        .retention()
        .unwrap()
        .purge_runs(&PurgeRuns::older_than(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert_err!(
        store
            .published_state()
            .unwrap()
            .get_state(run.id, "p")
            .await,
        StoreError::RunNotFound { .. }
    );
    assert_err!(
        store.published_state().unwrap().list_state(run.id).await,
        StoreError::RunNotFound { .. }
    );
}

/// A key or a value past the limits is refused before anything is written.
pub async fn state_values_past_the_limits_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let long_key = "k".repeat(limits::MAX_TOPIC_BYTES + 1);
    assert_err!(
        store.published_state().unwrap().set_state(set(&run, "state/k", &long_key, json!(1))).await,
        StoreError::Limit(error) if error.field() == limits::Field::StateKey
    );
    assert_err!(
        store
            .published_state().unwrap().set_state(set(&run, "state/k", "k", json!({ "nul": "a\u{0}b" })))
            .await,
        StoreError::Limit(error) if error.field() == limits::Field::StateValue
    );
    let huge = json!("x".repeat(limits::MAX_PAYLOAD_BYTES + 1));
    assert_err!(
        store.published_state().unwrap().set_state(set(&run, "state/k", "k", huge)).await,
        StoreError::Limit(error) if error.field() == limits::Field::StateValue
    );
    assert_err!(
        store.published_state().unwrap().get_state(run.id, &long_key).await,
        StoreError::Limit(error) if error.field() == limits::Field::StateKey
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    assert!(
        store
            .published_state()
            .unwrap()
            .list_state(run.id)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Concurrent publications of one key by the run's worker each get their own version: the
/// versions are 1..=n with none lost or repeated, and the latest value is the one of
/// version n.
pub async fn concurrent_publications_get_distinct_versions(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let publications = (0..8).map(|i| {
        let store = &store;
        let params = set(&run, &format!("state/p:{i}"), "p", json!(i));
        async move {
            store
                .published_state()
                .unwrap()
                .set_state(params)
                .await
                .unwrap()
        }
    });
    let done = futures::future::join_all(publications).await;
    let mut versions: Vec<u64> = done
        .iter()
        .map(|set| {
            set.attempt.output.as_ref().unwrap()["version"]
                .as_u64()
                .unwrap()
        })
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=8).collect::<Vec<u64>>());
    let state = store
        .published_state()
        .unwrap()
        .get_state(run.id, "p")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.version, 8);
    let last = done
        .iter()
        .find(|set| set.attempt.output.as_ref().unwrap()["version"] == 8)
        .unwrap();
    let published: u64 = last.attempt.step_name["state/p:".len()..].parse().unwrap();
    assert_eq!(state.value, json!(published));
}
