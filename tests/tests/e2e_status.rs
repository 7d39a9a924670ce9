//! End to end: waiting for a run's status without polling (`RunHandle::wait_for_status`,
//! `wait_for_run`, and the same on `Client`), against each store (Postgres and SQLite): until
//! sleeping on a durable sleep and on an event wait, until paused by another task, and the
//! typed errors (timeout, a terminal status that can never match, an unknown run).
//!
//! Every wait that must succeed starts before the change it waits for and has a timeout
//! shorter than the waits' safety re-read (`WAIT_SAFETY_REREAD`, 30 s): only a
//! notification can end it in time.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, client, worker};
use tasks::{
    Awaited, Event, RunStatus, WAIT_SAFETY_REREAD, WaitError, WorkflowContext, WorkflowError, step,
    workflow,
};

/// Shorter than the safety re-read: a wait that succeeds within it was woken by a
/// notification.
const WITHIN: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Go {
    now: bool,
}

impl Event for Go {
    const TOPIC: &'static str = "e2e-status-go";
}

/// Sleeps durably for a minute.
#[workflow(name = "e2e-status-nap")]
async fn nap(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    ctx.sleep("nap", Duration::from_secs(60)).await?;
    Ok(())
}

/// Waits for a `Go`.
#[workflow(name = "e2e-status-waits", events(Go))]
async fn waits(ctx: WorkflowContext) -> Result<bool, WorkflowError> {
    Ok(ctx.wait_for_event::<Go>().await?.now)
}

#[step]
async fn slow() -> Result<u32, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(1)
}

#[step]
async fn quick(n: u32) -> Result<u32, std::io::Error> {
    Ok(n + 1)
}

/// A slow step (long enough to be paused in), then a quick one.
#[workflow(name = "e2e-status-slow")]
async fn slow_then_quick(_ctx: WorkflowContext) -> Result<u32, WorkflowError> {
    let n = slow().await?;
    Ok(quick(n).await?)
}

#[test]
fn the_bound_is_below_the_safety_reread() {
    assert!(WITHIN < WAIT_SAFETY_REREAD);
}

async fn waits_until_a_durable_sleep_parks_the_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = nap::start(&client, ()).await.unwrap();
    // Waiting before any worker runs: the first read sees the run pending.
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_for_status(&[RunStatus::Sleeping], WITHIN).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let worker = worker(&store).build().unwrap().spawn();
    let parked = waiter.await.unwrap().unwrap();
    assert_eq!(parked.id, run.id());
    assert_eq!(parked.status, RunStatus::Sleeping);
    assert_eq!(parked.worker_id, None, "a sleeping run holds no worker");
    let nap = &run.steps().await.unwrap()[0];
    assert_eq!(nap.step_name, "nap");
    // A run already in the status is returned at once.
    let again = client
        .wait_for_status(run.id(), &[RunStatus::Sleeping], WITHIN)
        .await
        .unwrap();
    assert_eq!(again.status, RunStatus::Sleeping);
    run.cancel().await.unwrap();
    worker.shutdown().await;
}

async fn waits_until_an_event_wait_parks_the_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = waits::start(&client, ()).await.unwrap();
    let waiter = {
        let client = client.clone();
        let id = run.id();
        tokio::spawn(async move {
            client
                .wait_for_run(id, WITHIN, |run| run.status == RunStatus::Sleeping)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let worker = worker(&store).build().unwrap().spawn();
    let parked = waiter.await.unwrap().unwrap();
    assert_eq!(parked.status, RunStatus::Sleeping);
    let steps = run.steps().await.unwrap();
    assert_eq!(steps[0].step_name, "event/e2e-status-go");
    client
        .send_event(run.id(), &Go { now: true })
        .await
        .unwrap();
    assert!(run.result_within(WITHIN).await.unwrap());
    worker.shutdown().await;
}

async fn waits_until_another_task_pauses_the_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = slow_then_quick::start(&client, ()).await.unwrap();
    // Another task pauses the run as soon as a worker runs it.
    let pauser = {
        let run = run.clone();
        tokio::spawn(async move {
            let running = run.wait_for_status(&[RunStatus::Running], WITHIN).await?;
            assert!(running.worker_id.is_some());
            run.pause().await.map_err(tasks::WaitError::from)
        })
    };
    let paused = run
        .wait_for_status(&[RunStatus::Paused], WITHIN)
        .await
        .unwrap();
    assert_eq!(paused.status, RunStatus::Paused);
    assert_eq!(pauser.await.unwrap().unwrap().status, RunStatus::Paused);
    run.resume().await.unwrap();
    assert_eq!(run.result_within(WITHIN).await.unwrap(), 2);
    worker.shutdown().await;
}

async fn a_wait_times_out_with_the_last_status(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    // No worker: the run stays pending.
    let run = nap::start(&client, ()).await.unwrap();
    let started = std::time::Instant::now();
    match run
        .wait_for_status(&[RunStatus::Sleeping], Duration::from_millis(300))
        .await
    {
        Err(WaitError::Timeout {
            run_id,
            waited,
            awaited: Awaited::Run { status },
        }) => {
            assert_eq!(run_id, run.id());
            assert_eq!(waited, Duration::from_millis(300));
            assert_eq!(status, Some(RunStatus::Pending));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(10));
}

async fn a_run_that_finishes_otherwise_fails_the_wait(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = nap::start(&client, ()).await.unwrap();
    let waiter = {
        let run = run.clone();
        tokio::spawn(async move { run.wait_for_status(&[RunStatus::Paused], WITHIN).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    run.cancel().await.unwrap();
    match waiter.await.unwrap() {
        Err(WaitError::Finished { run: finished, .. }) => {
            assert_eq!(finished.id, run.id());
            assert_eq!(finished.status, RunStatus::Canceled);
        }
        other => panic!("expected the wait to fail on the cancel, got {other:?}"),
    }
    // A terminal status that is wanted matches.
    let canceled = run
        .wait_for_status(&[RunStatus::Canceled, RunStatus::Completed], WITHIN)
        .await
        .unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
}

async fn unknown_runs_and_empty_waits_are_refused(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let unknown = tasks::uuid::Uuid::now_v7();
    match client
        .wait_for_status(unknown, &[RunStatus::Sleeping], WITHIN)
        .await
    {
        Err(WaitError::NotFound { run_id }) => assert_eq!(run_id, unknown),
        other => panic!("expected not found, got {other:?}"),
    }
    let run = nap::start(&client, ()).await.unwrap();
    assert!(matches!(
        run.wait_for_status(&[], WITHIN).await,
        Err(WaitError::NoStatus)
    ));
}

every_store!(
    waits_until_a_durable_sleep_parks_the_run,
    waits_until_an_event_wait_parks_the_run,
    waits_until_another_task_pauses_the_run,
    a_wait_times_out_with_the_last_status,
    a_run_that_finishes_otherwise_fails_the_wait,
    unknown_runs_and_empty_waits_are_refused,
);
