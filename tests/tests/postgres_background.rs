//! The Postgres store's background tasks: started only when needed, owned by the store,
//! and started again when the runtime they ran on is gone.

use std::time::Duration;
use tasks::store::{LeaseStore, RunStore, StepStore};

use futures::StreamExt;
use serde_json::json;
use tasks::postgres::PgStore;
use tasks::store::{CreateRun, Notification, RecordStepAttempt, Store};
use tasks::{ListRuns, StepKind, StepStatus};

/// A store on a fresh namespace with its own pool.
async fn store() -> PgStore {
    tasks_tests::pg_store().await
}

fn finished_step(claimed: &tasks::store::ClaimedRun) -> RecordStepAttempt {
    RecordStepAttempt {
        id: uuid::Uuid::now_v7(),
        run_id: claimed.run.id,
        holder: claimed.holder(),
        step_name: "step".into(),
        kind: StepKind::Function,
        config: json!({}),
        status: StepStatus::Completed,
        output: Some(json!(1)),
        error: None,
        args: None,
        elapsed: Duration::from_millis(1),
    }
}

/// A client that starts, reads, lists and operates on runs starts no task; a wait for a
/// notification starts the listener, and a worker's write starts its batch writer.
#[tokio::test]
async fn a_client_starts_no_background_task() {
    let store = store().await;
    let run = store.create_run(CreateRun::new("client")).await.unwrap();
    store.get_run(run.id).await.unwrap();
    store.list_runs(ListRuns::default()).await.unwrap();
    let other = store.create_run(CreateRun::new("client")).await.unwrap();
    store
        .lifecycle()
        .unwrap()
        .pause_run(other.id)
        .await
        .unwrap();
    store
        .lifecycle()
        .unwrap()
        .resume_run(other.id)
        .await
        .unwrap();
    store
        .lifecycle()
        .unwrap()
        .cancel_run(other.id)
        .await
        .unwrap();
    assert_eq!(store.background_tasks(), 0);

    let mut events = store.subscribe().await.unwrap();
    assert_eq!(store.background_tasks(), 1, "the LISTEN pump");
    // A new run sends its wake-up itself.
    store.create_run(CreateRun::new("client")).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
    assert_eq!(
        woken.unwrap(),
        Some(Notification::RunAvailable {
            namespace: store.namespace().to_owned()
        })
    );

    let claimed = store
        .claim_runs("w", Duration::from_secs(60), 1)
        .await
        .unwrap();
    store
        .record_step_attempt(finished_step(&claimed[0]))
        .await
        .unwrap();
    assert!(store.background_tasks() >= 2, "and the step recorder");

    store.close().await;
    assert_eq!(store.background_tasks(), 0);
    assert!(
        store.subscribe().await.is_err(),
        "a closed store subscribes no more"
    );
}

/// A store kept past the runtime that started its tasks works on the next runtime: the tasks
/// start again there, and the pool (with the store's settings, `PgStore::pool_options`)
/// hands the new runtime none of the connections the first one took along, so no statement
/// fails for them.
#[test]
fn a_store_outlives_the_runtime_that_first_used_it() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let store = first.block_on(async {
        let store = PgStore::connect(&tasks_tests::database_url())
            .await
            .unwrap()
            .with_namespace(tasks_tests::unique_namespace("test"))
            .unwrap();
        tasks::postgres::migrate(store.pool()).await.unwrap();
        // Several connections in the pool, all opened on this runtime.
        let runs = futures::future::try_join_all(
            (0..4).map(|_| store.create_run(CreateRun::new("first"))),
        )
        .await
        .unwrap();
        let claimed = store
            .claim_runs("w", Duration::from_secs(60), 1)
            .await
            .unwrap();
        assert!(runs.iter().any(|run| run.id == claimed[0].run.id));
        store
            .record_step_attempt(finished_step(&claimed[0]))
            .await
            .unwrap();
        let _events = store.subscribe().await.unwrap();
        assert!(store.background_tasks() >= 2);
        assert!(store.pool().size() >= 2, "{}", store.pool().size());
        store
    });
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        let create = || async { store.create_run(CreateRun::new("second")).await.unwrap() };
        // Every statement works at once, several at a time too.
        let run = create().await;
        futures::future::join_all((0..4).map(|_| create())).await;

        // The listener starts again on this runtime, on a connection of this runtime.
        let mut events = store.subscribe().await.unwrap();
        create().await;
        let woken = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
        assert!(
            matches!(woken, Ok(Some(Notification::RunAvailable { .. }))),
            "wake-ups reach a subscriber on the second runtime: {woken:?}"
        );

        let claimed = store
            .claim_runs("w2", Duration::from_secs(60), 10)
            .await
            .unwrap();
        let ours = claimed
            .iter()
            .find(|c| c.run.id == run.id)
            .expect("claimed");
        let recorded = store.record_step_attempt(finished_step(ours)).await;
        assert!(
            recorded.is_ok(),
            "the step recorder runs again: {recorded:?}"
        );
        store.close().await;
    });
}
