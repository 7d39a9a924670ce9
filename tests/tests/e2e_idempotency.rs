//! End to end: idempotency scopes against each store (Postgres and SQLite). A
//! key is held for ever (the default), while its run is live, or for a time to live; a
//! start whose key is free again creates and executes a new run.

use crate::support;

use std::time::Duration;

use support::{Backend, client, worker};
use tasks::{IdempotencyScope, RunStatus, StartOptions, WorkflowContext, WorkflowError, workflow};

/// Naps durably for the given milliseconds, then echoes its input.
#[workflow(name = "e2e-idempotency-nap")]
async fn nap(ctx: WorkflowContext, input: (u32, u64)) -> Result<u32, WorkflowError> {
    ctx.sleep("nap", Duration::from_millis(input.1)).await?;
    Ok(input.0)
}

fn keyed(key: &str, scope: IdempotencyScope) -> StartOptions {
    StartOptions::new()
        .idempotency_key(key)
        .idempotency_scope(scope)
}

async fn a_key_held_for_ever_returns_the_first_run_after_it_finished(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let first = client
        .start::<nap>((1, 0))
        .idempotency_key("for-ever")
        .await
        .unwrap();
    assert_eq!(
        first.result_within(Duration::from_secs(20)).await.unwrap(),
        1
    );
    let again = client
        .start::<nap>((2, 0))
        .options(keyed("for-ever", IdempotencyScope::WhileActive))
        .await
        .unwrap();
    assert_eq!(
        again.id(),
        first.id(),
        "the holder's scope (for ever) counts"
    );
    assert_eq!(
        again.result_within(Duration::from_secs(5)).await.unwrap(),
        1
    );
    worker.shutdown().await;
}

async fn a_key_held_while_active_is_free_once_the_run_finished(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let scope = IdempotencyScope::WhileActive;
    let first = client
        .start::<nap>((1, 1500))
        .options(keyed("singleton", scope))
        .await
        .unwrap();
    first
        .wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(20))
        .await
        .unwrap();
    let repeat = client
        .start::<nap>((2, 0))
        .options(keyed("singleton", scope))
        .await
        .unwrap();
    assert_eq!(repeat.id(), first.id(), "a live run holds its key");
    assert_eq!(
        first.result_within(Duration::from_secs(20)).await.unwrap(),
        1
    );

    let second = client
        .start::<nap>((3, 0))
        .options(keyed("singleton", scope))
        .await
        .unwrap();
    assert_ne!(
        second.id(),
        first.id(),
        "a finished run no longer holds its key"
    );
    assert_eq!(
        second.result_within(Duration::from_secs(20)).await.unwrap(),
        3
    );
    let old = first.run().await.unwrap();
    assert_eq!(old.idempotency_key, None);
    assert_eq!(old.output, Some(serde_json::json!(1)));
    worker.shutdown().await;
}

async fn a_key_with_a_time_to_live_is_free_after_it(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let scope = IdempotencyScope::Ttl(Duration::from_millis(1000));
    let first = client
        .start::<nap>((1, 0))
        .options(keyed("hourly", scope))
        .await
        .unwrap();
    assert_eq!(
        first.result_within(Duration::from_secs(20)).await.unwrap(),
        1
    );
    let repeat = client
        .start::<nap>((2, 0))
        .options(keyed("hourly", scope))
        .await
        .unwrap();
    assert_eq!(
        repeat.id(),
        first.id(),
        "finished, but within its time to live"
    );

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let second = client
        .start::<nap>((3, 0))
        .options(keyed("hourly", scope))
        .await
        .unwrap();
    assert_ne!(second.id(), first.id(), "the time to live has passed");
    assert_eq!(
        second.result_within(Duration::from_secs(20)).await.unwrap(),
        3
    );
    worker.shutdown().await;
}

async fn a_zero_time_to_live_is_refused(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let refused = client
        .start::<nap>((1, 0))
        .options(keyed("zero", IdempotencyScope::Ttl(Duration::ZERO)))
        .await;
    let Err(error) = refused else {
        panic!("a zero time to live is refused");
    };
    assert!(
        error.to_string().contains("time to live"),
        "the error names the value: {error}"
    );
    assert_eq!(
        client
            .list_runs(Default::default())
            .await
            .unwrap()
            .data
            .len(),
        0,
        "nothing was stored"
    );
}

every_store!(
    a_key_held_for_ever_returns_the_first_run_after_it_finished,
    a_key_held_while_active_is_free_once_the_run_finished,
    a_key_with_a_time_to_live_is_free_after_it,
    a_zero_time_to_live_is_refused,
);
