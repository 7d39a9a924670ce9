//! The Postgres store's background tasks: started only when needed, owned by the store,
//! and started again when the runtime they ran on is gone.

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use tasks::postgres::PgStore;
use tasks::{CreateRun, ListRuns, Notification, RecordStepAttempt, StepKind, StepStatus, Store};

/// A store on a fresh namespace with its own pool.
async fn store() -> PgStore {
    tasks_tests::pg_store().await
}

fn finished_step(run_id: uuid::Uuid, worker: &str) -> RecordStepAttempt {
    RecordStepAttempt {
        run_id,
        worker_id: worker.to_owned(),
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
    store.pause_run(other.id).await.unwrap();
    store.resume_run(other.id).await.unwrap();
    store.cancel_run(other.id).await.unwrap();
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
        .record_step_attempt(finished_step(claimed[0].run.id, "w"))
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
/// start again there, and the pool replaces the connections the first runtime took along.
#[test]
fn a_store_outlives_the_runtime_that_first_used_it() {
    let first = tokio::runtime::Runtime::new().unwrap();
    let store = first.block_on(async {
        let store = store().await;
        let run = store.create_run(CreateRun::new("first")).await.unwrap();
        let claimed = store
            .claim_runs("w", Duration::from_secs(60), 1)
            .await
            .unwrap();
        assert_eq!(claimed[0].run.id, run.id);
        store
            .record_step_attempt(finished_step(run.id, "w"))
            .await
            .unwrap();
        let _events = store.subscribe().await.unwrap();
        assert!(store.background_tasks() >= 2);
        store
    });
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        // Connections opened on the first runtime fail once each, with the error of a
        // runtime that shut down, and are replaced.
        let create = || async {
            for _ in 0..20 {
                match store.create_run(CreateRun::new("second")).await {
                    Ok(run) => return run,
                    Err(error) => {
                        let message = error.to_string();
                        assert!(message.contains("shut"), "{message}");
                        eprintln!("a connection of the first runtime: {message}");
                    }
                }
            }
            panic!("the store works on the second runtime");
        };
        let run = create().await;

        // The listener starts again on this runtime. If its first connection is one the
        // first runtime took along, it reconnects and says so with `Missed` (what a
        // notification sent meanwhile becomes); a run started after that is announced.
        let mut events = store.subscribe().await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..5 {
            create().await;
            let woken = tokio::time::timeout(Duration::from_secs(10), events.next()).await;
            match woken {
                Ok(Some(Notification::RunAvailable { .. })) => break,
                Ok(Some(Notification::Missed { .. })) => seen.push(woken),
                other => panic!("wake-ups reach a subscriber on the second runtime: {other:?}"),
            }
        }
        assert!(
            seen.len() < 5,
            "a run started on the second runtime is announced: only {seen:?}"
        );

        let claimed = store
            .claim_runs("w2", Duration::from_secs(60), 10)
            .await
            .unwrap();
        let ours = claimed
            .iter()
            .find(|c| c.run.id == run.id)
            .expect("claimed");
        let recorded = store
            .record_step_attempt(finished_step(ours.run.id, "w2"))
            .await;
        assert!(
            recorded.is_ok(),
            "the step recorder runs again: {recorded:?}"
        );
        store.close().await;
    });
}
