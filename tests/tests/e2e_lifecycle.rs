//! End to end: the lifecycle of runs against each store (Postgres and SQLite):
//! handled step errors replay deterministically; step timeouts.

use crate::support;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use support::{Backend, bump, calls, client, worker};
use tasks::{RunError, StepFailure, StepStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// A step's own error type: replayed as an equal value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Payment {
    Declined { code: u32, reason: String },
    Unavailable,
}

impl std::fmt::Display for Payment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payment::Declined { code, reason } => write!(f, "declined ({code}): {reason}"),
            Payment::Unavailable => f.write_str("unavailable"),
        }
    }
}

impl std::error::Error for Payment {}

/// Fails on its first two calls in a run, succeeds after that: a replay that ran it again
/// would take the other branch.
#[step(
    name = "charge_twice",
    retry(max_attempts = 2, initial_interval = "10ms")
)]
async fn charge() -> Result<String, Payment> {
    if bump(run_id(), "charge") <= 2 {
        return Err(Payment::Declined {
            code: 51,
            reason: "insufficient funds".into(),
        });
    }
    Ok("charged".into())
}

#[step(retry(max_attempts = 1))]
async fn open_file() -> Result<String, std::io::Error> {
    if bump(run_id(), "open_file") == 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file",
        ));
    }
    Ok("opened".into())
}

#[step(retry(max_attempts = 1))]
async fn boxed() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    if bump(run_id(), "boxed") == 1 {
        return Err("boxed failure".into());
    }
    Ok("fine".into())
}

#[step(retry(max_attempts = 1))]
async fn permanent() -> Result<String, WorkflowError> {
    if bump(run_id(), "permanent") == 1 {
        return Err(WorkflowError::msg("gave up").non_retryable());
    }
    Ok("fine".into())
}

/// Handles each step's error, then sleeps (which replays the run from the top).
#[workflow(name = "e2e-handled-errors")]
async fn handled(ctx: WorkflowContext, _input: ()) -> Result<Vec<String>, WorkflowError> {
    let mut seen = Vec::new();
    match charge().await {
        Ok(ok) => seen.push(ok),
        Err(Payment::Declined { code, reason }) => seen.push(format!("declined {code} {reason}")),
        Err(Payment::Unavailable) => seen.push("unavailable".into()),
    }
    match open_file().await {
        Ok(ok) => seen.push(ok),
        Err(error) => seen.push(format!("{:?}: {error}", error.kind())),
    }
    match boxed().await {
        Ok(ok) => seen.push(ok),
        Err(error) => seen.push(format!("boxed: {error}")),
    }
    match permanent().await {
        Ok(ok) => seen.push(ok),
        Err(error) => seen.push(format!("{error} (retryable: {})", error.is_retryable())),
    }
    // Every execution of the workflow reports what it saw; the replay must agree.
    bump(ctx.run_id(), &format!("saw {seen:?}"));
    ctx.sleep("replay", Duration::from_millis(300)).await?;
    Ok(seen)
}

async fn a_handled_step_error_replays_without_running_the_step(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = handled::start(&client(&store), ()).await.unwrap();
    let seen = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        seen,
        [
            "declined 51 insufficient funds",
            "NotFound: no such file",
            "boxed: boxed failure",
            "gave up (retryable: false)",
        ]
    );
    // Each failed step ran its attempts once, and not again on the replay after the sleep.
    assert_eq!(calls(run.id(), "charge"), 2);
    assert_eq!(calls(run.id(), "open_file"), 1);
    assert_eq!(calls(run.id(), "boxed"), 1);
    assert_eq!(calls(run.id(), "permanent"), 1);
    // The workflow ran twice (before and after the sleep) and saw the same errors both times.
    assert_eq!(calls(run.id(), &format!("saw {seen:?}")), 2);

    let steps = run.steps().await.unwrap();
    let charges: Vec<_> = steps
        .iter()
        .filter(|s| s.step_name == "charge_twice")
        .collect();
    assert_eq!(charges.len(), 2, "two attempts, none on replay");
    assert!(charges.iter().all(|s| s.status == StepStatus::Failed));
    let last = charges[1].error.as_ref().unwrap();
    assert_eq!(last["message"], "declined (51): insufficient funds");
    assert_eq!(last["kind"], "step");
    assert_eq!(
        last["replay"]["value"],
        serde_json::json!({ "Declined": { "code": 51, "reason": "insufficient funds" } })
    );
    assert!(
        charges[0].error.as_ref().unwrap().get("replay").is_none(),
        "a retried attempt's error is not final"
    );
    worker.shutdown().await;
}

/// Keeps a step's error, sleeps, then returns it: after the replay the run fails with it.
#[workflow(name = "e2e-returned-after-replay")]
async fn returned(ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    let result = charge().await;
    ctx.sleep("replay", Duration::from_millis(300)).await?;
    Ok(result?)
}

async fn a_replayed_step_error_that_the_workflow_returns_fails_the_run(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = returned::start(&client(&store), ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.message, "declined (51): insufficient funds");
            assert_eq!(error.kind.as_deref(), Some("step"));
            assert!(!error.retryable);
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "charge"), 2);
    assert_eq!(run.run().await.unwrap().attempts, 1, "no workflow retry");
    worker.shutdown().await;
}

/// Hangs on its first call in a run (until the timeout drops it), answers at once after.
#[step(timeout = "300ms", retry(max_attempts = 2, initial_interval = "10ms"))]
async fn hangs_once() -> Result<String, std::io::Error> {
    let run = run_id();
    if bump(run, "hangs_once") == 1 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Never reached: the timeout dropped this future.
        bump(run, "hangs_once finished");
    }
    Ok("answered".into())
}

#[workflow(name = "e2e-timeout-retried")]
async fn timeout_retried(_ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    Ok(hangs_once().await?)
}

async fn a_timed_out_attempt_is_dropped_recorded_and_retried(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = timeout_retried::start(&client(&store), ()).await.unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        "answered"
    );
    let steps = run.steps().await.unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].status, StepStatus::Failed);
    let error = steps[0].error.as_ref().unwrap();
    assert_eq!(error["kind"], "timeout");
    assert_eq!(error["message"], "step hangs_once timed out after 300ms");
    assert_eq!(steps[0].config["timeoutMs"], 300);
    let took = steps[0].finished_at.unwrap() - steps[0].started_at.unwrap();
    assert!(
        took >= chrono::Duration::milliseconds(250) && took < chrono::Duration::seconds(3),
        "the attempt ended at its timeout, not when its body would have: {took}"
    );
    assert_eq!(steps[1].status, StepStatus::Completed);
    // The hung attempt's future was dropped: its body never went on past the sleep.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(calls(run.id(), "hangs_once finished"), 0);
    worker.shutdown().await;
}

#[step(timeout = "100ms", retry(max_attempts = 2, initial_interval = "10ms"))]
async fn always_slow() -> Result<(), WorkflowError> {
    bump(run_id(), "always_slow");
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

#[step(timeout = "100ms", retry(max_attempts = 1))]
async fn slow_io() -> Result<(), std::io::Error> {
    bump(run_id(), "slow_io");
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

/// Handles the timeouts of two steps, then sleeps so that they replay.
#[workflow(name = "e2e-timeout-handled")]
async fn timeout_handled(ctx: WorkflowContext, _input: ()) -> Result<Vec<String>, WorkflowError> {
    let mut seen = Vec::new();
    if let Err(error) = always_slow().await {
        let failure = error.downcast_ref::<StepFailure>().expect("a StepFailure");
        seen.push(format!("timeout: {}, {error}", failure.is_timeout()));
    }
    if let Err(error) = slow_io().await {
        seen.push(format!("{:?}: {error}", error.kind()));
    }
    ctx.sleep("replay", Duration::from_millis(200)).await?;
    Ok(seen)
}

async fn an_exhausted_timeout_is_a_typed_error_that_replays(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = timeout_handled::start(&client(&store), ()).await.unwrap();
    let seen = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        seen,
        [
            "timeout: true, step always_slow timed out after 100ms",
            "TimedOut: step slow_io timed out after 100ms",
        ]
    );
    assert_eq!(calls(run.id(), "always_slow"), 2, "retried by its policy");
    assert_eq!(calls(run.id(), "slow_io"), 1, "not run again on replay");
    worker.shutdown().await;
}

/// A step whose own error type has no room for a timeout: an exhausted timeout fails the run.
#[step(timeout = "100ms", retry(max_attempts = 1))]
async fn slow_payment() -> Result<(), Payment> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    Err(Payment::Unavailable)
}

#[workflow(name = "e2e-timeout-serde")]
async fn timeout_serde(_ctx: WorkflowContext, _input: ()) -> Result<bool, WorkflowError> {
    Ok(slow_payment().await.is_err())
}

async fn an_exhausted_timeout_of_a_serde_error_type_fails_the_run(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = timeout_serde::start(&client(&store), ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.kind.as_deref(), Some("timeout"));
            assert_eq!(error.message, "step slow_payment timed out after 100ms");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    worker.shutdown().await;
}

every_store!(
    a_handled_step_error_replays_without_running_the_step,
    a_replayed_step_error_that_the_workflow_returns_fails_the_run,
    a_timed_out_attempt_is_dropped_recorded_and_retried,
    an_exhausted_timeout_is_a_typed_error_that_replays,
    an_exhausted_timeout_of_a_serde_error_type_fails_the_run,
);
