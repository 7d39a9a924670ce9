//! End to end: retry-after parking against each store (Postgres and SQLite). A
//! step or workflow error that asks to be retried after a delay parks the run (status
//! sleeping, its worker slot free) until then, and does not use up an attempt.

use crate::support;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use support::{Backend, bump, calls, client, worker};
use tasks::{
    RetryAfter, RunError, RunStatus, StepStatus, WorkflowContext, WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// Rate limited on its first two calls (3 s, then 500 ms), then answers; one attempt only,
/// so a retry-after that used up an attempt would fail the run.
#[step(retry(max_attempts = 1))]
async fn call_api() -> Result<String, WorkflowError> {
    let call = bump(run_id(), "call_api");
    match call {
        1 => Err(WorkflowError::msg("HTTP 429").retry_after(Duration::from_secs(3))),
        2 => Err(WorkflowError::msg("HTTP 429").retry_after(Duration::from_millis(500))),
        _ => Ok(format!("answered on call {call}")),
    }
}

#[workflow(name = "e2e-retry-after-api", retry(max_attempts = 1))]
async fn rate_limited(_ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    call_api().await
}

#[step]
async fn quick_step() -> Result<u32, WorkflowError> {
    Ok(7)
}

#[workflow(name = "e2e-retry-after-quick")]
async fn quick(_ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    quick_step().await
}

async fn a_step_that_asks_to_retry_later_parks_the_run_without_using_an_attempt(backend: Backend) {
    let store = backend.store().await;
    // One slot: the quick run can only execute while the rate-limited one is parked.
    let worker = worker(&store).concurrency(1).build().unwrap().spawn();
    let client = client(&store);
    let run = rate_limited::start(&client, ()).await.unwrap();

    let parked = eventually!(Duration::from_secs(20), {
        let current = run.run().await.unwrap();
        (current.status == RunStatus::Sleeping).then_some(current)
    });
    let until = parked
        .available_at
        .expect("a parked run has an available_at");
    assert!(
        until >= parked.updated_at + chrono::Duration::milliseconds(2500),
        "parked for the 3 s asked: {until} vs {}",
        parked.updated_at
    );
    assert_eq!(parked.worker_id, None, "the parked run holds no worker");

    let other = quick::start(&client, ()).await.unwrap();
    assert_eq!(
        other.result_within(Duration::from_secs(2)).await.unwrap(),
        7
    );
    assert_eq!(
        calls(run.id(), "call_api"),
        1,
        "the quick run used the only slot while the first was parked"
    );

    let output = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, "answered on call 3");
    let finished = run.run().await.unwrap();
    assert_eq!(finished.status, RunStatus::Completed);
    assert_eq!(finished.attempts, 1, "parking did not count run attempts");

    let steps = run.steps().await.unwrap();
    let history: Vec<_> = steps
        .iter()
        .map(|step| {
            let error = step.error.clone().unwrap_or_default();
            (
                step.status,
                step.config["attempt"].clone(),
                error["kind"].clone(),
                error["retryAfterMs"].clone(),
            )
        })
        .collect();
    use serde_json::{Value, json};
    assert_eq!(
        history,
        [
            (
                StepStatus::Failed,
                json!(1),
                json!("retry_after"),
                json!(3000)
            ),
            (
                StepStatus::Failed,
                json!(1),
                json!("retry_after"),
                json!(500)
            ),
            (StepStatus::Completed, json!(1), Value::Null, Value::Null),
        ],
        "every attempt is the first; the parked ones say how long they asked for"
    );
    assert_eq!(steps[0].error.as_ref().unwrap()["message"], "HTTP 429");
    worker.shutdown().await;
}

/// A step's own serde error type that can carry a `RetryAfter` as its source.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
enum ApiError {
    RateLimited(RetryAfter),
    Refused(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::RateLimited(_) => f.write_str("rate limited"),
            ApiError::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApiError::RateLimited(retry) => Some(retry),
            ApiError::Refused(_) => None,
        }
    }
}

#[step(retry(max_attempts = 2, initial_interval = "10ms"))]
async fn typed_call() -> Result<String, ApiError> {
    let call = bump(run_id(), "typed_call");
    match call {
        1 => Err(ApiError::RateLimited(RetryAfter::new(
            Duration::from_millis(300),
        ))),
        2 | 3 => Err(ApiError::Refused(format!("call {call}"))),
        _ => Ok("never".into()),
    }
}

#[workflow(name = "e2e-retry-after-typed", retry(max_attempts = 1))]
async fn typed(_ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    match typed_call().await {
        Ok(value) => Ok(value),
        Err(error) => Ok(format!("handled: {error}")),
    }
}

async fn a_retry_after_in_the_source_chain_of_a_typed_error_is_honoured(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = typed::start(&client, ()).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    // The retry-after did not count: two real attempts followed it.
    assert_eq!(output, "handled: refused: call 3");
    assert_eq!(calls(run.id(), "typed_call"), 3);
    let kinds: Vec<_> = run
        .steps()
        .await
        .unwrap()
        .iter()
        .map(|step| step.error.as_ref().unwrap()["kind"].clone())
        .collect();
    assert_eq!(kinds, ["retry_after", "step", "step"]);
    worker.shutdown().await;
}

/// Asks the whole run to be retried later on its first execution.
#[workflow(name = "e2e-retry-after-workflow", retry(max_attempts = 1))]
async fn busy(_ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    let call = bump(run_id(), "busy");
    if call == 1 {
        return Err(WorkflowError::msg("busy").retry_after(Duration::from_millis(1500)));
    }
    Ok(call)
}

async fn a_workflow_that_asks_to_retry_later_parks_without_using_an_attempt(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = busy::start(&client, ()).await.unwrap();
    let parked = eventually!(Duration::from_secs(20), {
        let current = run.run().await.unwrap();
        (current.status == RunStatus::Sleeping).then_some(current)
    });
    let until = parked.available_at.unwrap();
    assert!(
        until >= parked.updated_at + chrono::Duration::milliseconds(1000),
        "{until} vs {}",
        parked.updated_at
    );
    assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 2);
    assert_eq!(run.run().await.unwrap().attempts, 1);
    worker.shutdown().await;
}

#[step]
async fn greedy() -> Result<(), WorkflowError> {
    Err(WorkflowError::msg("come back in 200 years")
        .retry_after(tasks::limits::MAX_DURATION + Duration::from_secs(1)))
}

#[workflow(name = "e2e-retry-after-too-long")]
async fn too_long(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    greedy().await
}

async fn a_retry_after_past_the_limit_fails_the_run_for_good(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = too_long::start(&client, ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.kind.as_deref(), Some("limit"), "{error:?}");
            assert!(error.message.contains("retry-after"), "{error:?}");
            assert!(!error.retryable);
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(run.run().await.unwrap().attempts, 1);
    worker.shutdown().await;
}

every_store!(
    a_step_that_asks_to_retry_later_parks_the_run_without_using_an_attempt,
    a_retry_after_in_the_source_chain_of_a_typed_error_is_honoured,
    a_workflow_that_asks_to_retry_later_parks_without_using_an_attempt,
    a_retry_after_past_the_limit_fails_the_run_for_good,
);
