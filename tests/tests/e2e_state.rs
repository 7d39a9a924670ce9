//! End to end: state published by runs executed by a real worker, against each store
//! (Postgres and SQLite): a client waiting on a key is woken by the publication's
//! notification (not by polling), each value once and in order although the run replays
//! its publications after every wait; the latest value, an unpublished key, an unknown run,
//! a finished run, and a key past the limits.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, client, worker};
use tasks::{
    Awaited, ClientError, Event, RunStatus, StepKind, StoreError, WaitError, WorkflowContext,
    WorkflowError, limits, workflow,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Progress {
    done: u32,
    total: u32,
}

/// Lets the workflow go on to its next piece of work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Next {}

impl Event for Next {
    const TOPIC: &'static str = "e2e-state-next";
}

/// Publishes its progress after each of three pieces of work, waiting for a `Next` event
/// between them (so the run parks and replays its earlier publications twice).
#[workflow(name = "e2e-state-progress", events(Next))]
async fn progress(ctx: WorkflowContext) -> Result<u32, WorkflowError> {
    const TOTAL: u32 = 3;
    for done in 1..=TOTAL {
        if done > 1 {
            ctx.wait_for_event::<Next>().await?;
        }
        ctx.set_state("progress", &Progress { done, total: TOTAL })
            .await?;
    }
    Ok(TOTAL)
}

/// Publishes under a key past the limits.
#[workflow(name = "e2e-state-long-key")]
async fn long_key(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    let key = "k".repeat(limits::MAX_TOPIC_BYTES + 1);
    ctx.set_state(&key, &1).await
}

async fn published_state_observed_by_a_waiting_client(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = progress::start(&client, ()).await.unwrap();
    let worker = worker(&store).build().unwrap().spawn();

    let first = client
        .wait_for_state::<Progress>(run.id(), "progress", 0, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(first.value, Progress { done: 1, total: 3 });
    assert_eq!(first.version, 1);
    assert_eq!(first.run_id, run.id());

    let mut seen = first.version;
    for done in 2..=3 {
        run.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(20))
            .await
            .unwrap();
        // The wait reads before the publication it waits for exists: only the
        // publication's notification wakes it before its safety re-read (30 s), long after
        // its 20 s timeout.
        let waiting = tokio::spawn({
            let client = client.clone();
            let run_id = run.id();
            async move {
                client
                    .wait_for_state::<Progress>(run_id, "progress", seen, Duration::from_secs(20))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            client
                .get_state::<Progress>(run.id(), "progress")
                .await
                .unwrap()
                .map(|state| state.version),
            Some(seen),
            "nothing newer before the event"
        );
        client.send_event(run.id(), &Next {}).await.unwrap();
        let state = waiting.await.unwrap().unwrap();
        assert_eq!(state.value, Progress { done, total: 3 });
        assert_eq!(state.version, seen + 1, "one version per publication");
        seen = state.version;
    }
    assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 3);

    // Each publication once, although the run replayed the earlier ones after each wait.
    let latest = client
        .get_state::<Progress>(run.id(), "progress")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((latest.value.done, latest.version), (3, 3));
    let published: Vec<(String, u64)> = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .filter(|step| step.kind == StepKind::State)
        .map(|step| {
            (
                step.step_name,
                step.output.unwrap()["version"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        published,
        [
            ("state/progress".to_owned(), 1),
            ("state/progress:1".to_owned(), 2),
            ("state/progress:2".to_owned(), 3),
        ]
    );
    let listed = client.list_state(run.id()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].value,
        serde_json::json!({ "done": 3, "total": 3 })
    );

    // A finished run publishes nothing more: a wait for a newer version ends at once.
    let started = std::time::Instant::now();
    let finished = client
        .wait_for_state::<Progress>(run.id(), "progress", 3, Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &finished,
            WaitError::Finished { run: finished_run, awaited: Awaited::State { version: Some(3), .. } }
                if finished_run.status == RunStatus::Completed
        ),
        "{finished:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    worker.shutdown().await;
}

async fn reads_of_unknown_runs_and_keys(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = progress::start(&client, ()).await.unwrap();
    assert!(
        client
            .get_state::<Progress>(run.id(), "progress")
            .await
            .unwrap()
            .is_none(),
        "nothing published yet"
    );
    let unknown = tasks::uuid::Uuid::now_v7();
    assert!(matches!(
        client.get_state::<Progress>(unknown, "progress").await,
        Err(ClientError::Store(StoreError::RunNotFound { id })) if id == unknown
    ));
    assert!(matches!(
        client
            .wait_for_state::<Progress>(unknown, "progress", 0, Duration::from_secs(5))
            .await,
        Err(WaitError::NotFound { run_id }) if run_id == unknown
    ));
    let long_key = "k".repeat(limits::MAX_TOPIC_BYTES + 1);
    assert!(matches!(
        client.get_state::<Progress>(run.id(), &long_key).await,
        Err(ClientError::Limit(_))
    ));
    // Nobody runs the run: the wait times out, knowing of no version.
    assert!(matches!(
        client
            .wait_for_state::<Progress>(run.id(), "progress", 0, Duration::from_millis(300))
            .await,
        Err(WaitError::Timeout {
            awaited: Awaited::State { version: None, .. },
            ..
        })
    ));

    // A value that does not decode into the type asked for is a typed error.
    let worker = worker(&store).build().unwrap().spawn();
    client
        .wait_for_state_json(run.id(), "progress", 0, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(matches!(
        client.get_state::<String>(run.id(), "progress").await,
        Err(ClientError::InvalidState { .. })
    ));
    client.cancel(run.id()).await.unwrap();
    worker.shutdown().await;
}

async fn a_key_past_the_limits_fails_the_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = long_key::start(&client, ()).await.unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    let error = run
        .result_within(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("state key"), "{error}");
    assert!(client.list_state(run.id()).await.unwrap().is_empty());
    let finished = client.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(finished.status, RunStatus::Failed);
    assert_eq!(finished.attempts, 1, "not retried");
    worker.shutdown().await;
}

every_store!(
    published_state_observed_by_a_waiting_client,
    reads_of_unknown_runs_and_keys,
    a_key_past_the_limits_fails_the_run,
);
