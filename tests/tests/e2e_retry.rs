//! End to end: retry from the failure and fork against each store (Postgres
//! and SQLite). A retried run runs only its unfinished steps, and the step that failed gets
//! its full retry budget again; a fork replays the history before its step and runs the
//! rest.

use crate::support;

use std::time::Duration;

use support::{Backend, bump, calls, client, worker};
use tasks::store::Operation;
use tasks::{
    RunError, RunStatus, StepStatus, StoreError, WorkflowContext, WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[step(name = "retry_prepare")]
async fn prepare() -> Result<String, WorkflowError> {
    bump(run_id(), "prepare");
    Ok("prepared".into())
}

/// Fails on its first five calls in a run: three attempts before the retry, then two more
/// and a success after it, which needs a fresh budget of three attempts.
#[step(
    name = "retry_ship",
    retry(max_attempts = 3, initial_interval = "10ms")
)]
async fn ship() -> Result<String, WorkflowError> {
    let call = bump(run_id(), "ship");
    if call <= 5 {
        return Err(WorkflowError::msg(format!("ship failed on call {call}")));
    }
    Ok(format!("shipped on call {call}"))
}

#[workflow(name = "e2e-retry-order", retry(max_attempts = 1))]
async fn order(_ctx: WorkflowContext, _input: ()) -> Result<Vec<String>, WorkflowError> {
    let prepared = prepare().await?;
    let shipped = ship().await?;
    Ok(vec![prepared, shipped])
}

async fn a_retried_run_runs_only_its_unfinished_steps_with_a_fresh_budget(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = order::start(&client, ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert!(error.message.contains("ship failed on call 3"), "{error:?}")
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "ship"), 3, "the step's budget ran out");

    let retried = client.retry(run.id()).await.unwrap();
    assert_eq!(retried.status, RunStatus::Pending);
    assert_eq!(retried.attempts, 0);
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, ["prepared", "shipped on call 6"]);
    assert_eq!(
        calls(run.id(), "prepare"),
        1,
        "a completed step does not run again"
    );
    assert_eq!(
        calls(run.id(), "ship"),
        6,
        "three fresh attempts after the retry"
    );

    let finished = run.run().await.unwrap();
    assert_eq!(finished.status, RunStatus::Completed);
    assert_eq!(finished.attempts, 1, "the run's own attempts started over");
    assert_eq!(finished.error, None);
    let steps = run.steps().await.unwrap();
    let history: Vec<_> = steps
        .iter()
        .map(|step| (step.step_name.as_str(), step.status))
        .collect();
    let failed = ("retry_ship", StepStatus::Failed);
    assert_eq!(
        history,
        [
            ("retry_prepare", StepStatus::Completed),
            failed,
            failed,
            failed,
            failed,
            failed,
            ("retry_ship", StepStatus::Completed),
        ],
        "the history before the retry is kept"
    );
    let attempts: Vec<_> = steps[1..]
        .iter()
        .map(|step| step.config["attempt"].clone())
        .collect();
    assert_eq!(attempts, [1, 2, 3, 1, 2, 3].map(serde_json::Value::from));

    // A completed run is the wrong state; so is an unknown run.
    match client.retry(run.id()).await {
        Err(StoreError::WrongState {
            operation: Operation::RetryRun,
            status: RunStatus::Completed,
            ..
        }) => {}
        other => panic!("expected a wrong state, got {other:?}"),
    }
    let unknown = Uuid::now_v7();
    match client.retry(unknown).await {
        Err(StoreError::RunNotFound { id }) => assert_eq!(id, unknown),
        other => panic!("expected not found, got {other:?}"),
    }
    worker.shutdown().await;
}

#[step]
async fn pack() -> Result<String, WorkflowError> {
    bump(run_id(), "pack");
    Ok("packed".into())
}

#[workflow(name = "e2e-retry-canceled")]
async fn packing(ctx: WorkflowContext, _input: ()) -> Result<Vec<String>, WorkflowError> {
    let prepared = prepare().await?;
    ctx.sleep("nap", Duration::from_millis(1500)).await?;
    let packed = pack().await?;
    Ok(vec![prepared, packed])
}

async fn a_canceled_run_is_retried_from_its_unfinished_step(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = packing::start(&client, ()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(20))
        .await
        .unwrap();
    client.cancel(run.id()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Canceled { .. }) => {}
        other => panic!("expected a canceled run, got {other:?}"),
    }
    client.retry(run.id()).await.unwrap();
    // A run that is live again refuses a second retry.
    match client.retry(run.id()).await {
        Err(StoreError::WrongState {
            operation: Operation::RetryRun,
            ..
        }) => {}
        other => panic!("expected a wrong state, got {other:?}"),
    }
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, ["prepared", "packed"]);
    assert_eq!(
        calls(run.id(), "prepare"),
        1,
        "the completed step is not run again"
    );
    assert_eq!(calls(run.id(), "pack"), 1);
    let naps: Vec<_> = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .filter(|step| step.step_name == "nap")
        .map(|step| step.status)
        .collect();
    assert_eq!(
        naps.last(),
        Some(&StepStatus::Completed),
        "the interrupted sleep ran again: {naps:?}"
    );
    worker.shutdown().await;
}

/// Returns the id of the run it executed in: a fork that replays it shows the source's id.
#[step]
async fn stamp() -> Result<String, WorkflowError> {
    bump(run_id(), "stamp");
    Ok(run_id().to_string())
}

#[step]
async fn label() -> Result<String, WorkflowError> {
    bump(run_id(), "label");
    Ok(format!("label for {}", run_id()))
}

#[workflow(name = "e2e-fork")]
async fn labelled(_ctx: WorkflowContext, _input: u32) -> Result<Vec<String>, WorkflowError> {
    let stamped = stamp().await?;
    let labelled = label().await?;
    Ok(vec![stamped, labelled])
}

async fn a_fork_replays_the_history_before_its_step_and_runs_the_rest(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let source = labelled::start(&client, 7).await.unwrap();
    // Not finished yet (no worker): a live run cannot be forked.
    match client.fork(source.id(), "label").await {
        Err(StoreError::WrongState {
            operation: Operation::ForkRun,
            status: RunStatus::Pending,
            ..
        }) => {}
        other => panic!("expected a wrong state, got {other:?}"),
    }
    let worker = worker(&store).build().unwrap().spawn();
    let first = source.result_within(Duration::from_secs(20)).await.unwrap();
    let source_id = source.id().to_string();
    assert_eq!(first, [source_id.clone(), format!("label for {source_id}")]);

    let forked = client.fork(source.id(), "label").await.unwrap();
    assert_eq!(forked.forked_from_run_id, Some(source.id()));
    assert_eq!(forked.forked_from_step.as_deref(), Some("label"));
    assert_eq!(forked.input, Some(serde_json::json!(7)));
    let handle = client.handle::<Vec<String>>(forked.id);
    let output = handle.result_within(Duration::from_secs(20)).await.unwrap();
    // `stamp` replayed the source's output; `label` ran in the fork.
    assert_eq!(
        output,
        [source_id.clone(), format!("label for {}", forked.id)]
    );
    assert_eq!(calls(forked.id, "stamp"), 0);
    assert_eq!(calls(forked.id, "label"), 1);
    assert_eq!(calls(source.id(), "stamp"), 1);
    let steps: Vec<_> = handle
        .steps()
        .await
        .unwrap()
        .into_iter()
        .map(|step| (step.step_name, step.status))
        .collect();
    assert_eq!(
        steps,
        [
            ("stamp".to_owned(), StepStatus::Completed),
            ("label".to_owned(), StepStatus::Completed),
        ]
    );

    // Forking from the first step runs everything again; an unknown step is refused.
    let again = client.fork(source.id(), "stamp").await.unwrap();
    let output = client
        .handle::<Vec<String>>(again.id)
        .result_within(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(output[0], again.id.to_string());
    match client.fork(source.id(), "nope").await {
        Err(StoreError::UnknownStep { run_id, step_name }) => {
            assert_eq!((run_id, step_name.as_str()), (source.id(), "nope"))
        }
        other => panic!("expected an unknown step, got {other:?}"),
    }
    worker.shutdown().await;
}

/// Declines every call, for good: its policy's five attempts must not be used.
#[step(
    name = "retry_charge_card",
    retry(max_attempts = 5, initial_interval = "10ms")
)]
async fn charge_card() -> Result<String, WorkflowError> {
    bump(run_id(), "charge_card");
    Err(WorkflowError::msg("card declined").non_retryable())
}

#[workflow(name = "e2e-retry-declined", retry(max_attempts = 3))]
async fn declined(_ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    charge_card().await
}

async fn a_non_retryable_step_error_ends_the_step_at_its_first_attempt(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = declined::start(&client, ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert!(error.message.contains("card declined"), "{error:?}");
            assert!(!error.retryable, "{error:?}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(
        calls(run.id(), "charge_card"),
        1,
        "neither the step's policy nor the workflow's retried it"
    );
    let steps = run.steps().await.unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0].status, StepStatus::Failed);
    assert_eq!(run.run().await.unwrap().attempts, 1);
    worker.shutdown().await;
}

#[step(name = "retry_refuse")]
async fn refuse() -> Result<(), WorkflowError> {
    bump(run_id(), "refuse");
    Err(WorkflowError::msg("refused").non_retryable())
}

#[workflow(name = "e2e-retry-refusal", retry(max_attempts = 1))]
async fn refusal(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    refuse().await
}

/// A retry the moment a run failed finds the worker still tearing down the execution that
/// failed it: the claim hands the run to the same worker, whose new execution waits for the
/// old one to end and then runs. Twenty times in a row, each within a generous bound.
async fn a_run_retried_the_moment_it_failed_runs_again_at_once(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = refusal::start(&client, ()).await.unwrap();
    for retries in 0..20 {
        match run.result_within(Duration::from_secs(10)).await {
            Err(RunError::Failed { error, .. }) => {
                assert!(error.message.contains("refused"), "{error:?}")
            }
            other => panic!("after {retries} retries: expected a failed run, got {other:?}"),
        }
        assert_eq!(calls(run.id(), "refuse"), retries + 1);
        client.retry(run.id()).await.unwrap();
    }
    worker.shutdown().await;
}

every_store!(
    a_non_retryable_step_error_ends_the_step_at_its_first_attempt,
    a_retried_run_runs_only_its_unfinished_steps_with_a_fresh_budget,
    a_canceled_run_is_retried_from_its_unfinished_step,
    a_fork_replays_the_history_before_its_step_and_runs_the_rest,
    a_run_retried_the_moment_it_failed_runs_again_at_once,
);
