//! End to end: workflows executed by a real worker against each store (Postgres and
//! SQLite) — memoization, retries, sleeps, pause/resume/cancel, deadlines, fencing and
//! limits.

use crate::support;

use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, bump, calls, client, worker};
use tasks::store::CreateRun;
use tasks::{
    RetryPolicy, RunError, RunStatus, StartOptions, StepKind, StepStatus, WorkflowContext,
    WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Text {
    text: String,
}

#[step]
async fn shout(text: &str) -> Result<String, std::io::Error> {
    bump(run_id(), &format!("shout:{text}"));
    Ok(text.to_uppercase())
}

/// Calls the same step three times, sleeps (which forces a replay), then once more.
#[workflow(name = "e2e-repeat")]
async fn repeat(ctx: WorkflowContext, input: Text) -> Result<Vec<String>, WorkflowError> {
    let mut out = vec![
        shout("a").await?,
        shout("b").await?,
        shout(&input.text).await?,
    ];
    ctx.sleep("pause", Duration::from_millis(200)).await?;
    out.push(shout("d").await?);
    Ok(out)
}

async fn repeated_step_names_resolve_in_call_order_and_replay_memoized(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = repeat::start(&client, Text { text: "c".into() })
        .await
        .unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, vec!["A", "B", "C", "D"]);

    let steps = run.steps().await.unwrap();
    let names: Vec<(&str, StepKind)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind))
        .collect();
    assert_eq!(
        names,
        vec![
            ("shout", StepKind::Function),
            ("shout:1", StepKind::Function),
            ("shout:2", StepKind::Function),
            ("pause", StepKind::Sleep),
            ("shout:3", StepKind::Function),
        ]
    );
    let outputs: Vec<_> = steps
        .iter()
        .filter(|s| s.kind == StepKind::Function)
        .map(|s| s.output.clone().unwrap())
        .collect();
    assert_eq!(
        outputs,
        vec![json!("A"), json!("B"), json!("C"), json!("D")]
    );
    assert!(steps.iter().all(|s| s.status == StepStatus::Completed));
    // The sleep made the run replay from the top; nothing before it ran twice.
    for label in ["a", "b", "c", "d"] {
        assert_eq!(
            calls(run.id(), &format!("shout:{label}")),
            1,
            "step {label}"
        );
    }
    assert_eq!(
        run.run().await.unwrap().attempts,
        1,
        "waking from a sleep is not a new attempt"
    );
    worker.shutdown().await;
}

#[step]
async fn tagged(tag: u32) -> Result<u32, std::io::Error> {
    // Finish in reverse order of start, so completion order differs from call order.
    tokio::time::sleep(Duration::from_millis(u64::from(100 - tag * 30))).await;
    bump(run_id(), &format!("tagged:{tag}"));
    Ok(tag * 10)
}

#[workflow(name = "e2e-join")]
async fn joined(ctx: WorkflowContext, _input: ()) -> Result<(u32, u32, u32), WorkflowError> {
    let first = tokio::try_join!(tagged(1), tagged(2), tagged(3))?;
    ctx.sleep("replay", Duration::from_millis(100)).await?;
    let again = tokio::try_join!(tagged(1), tagged(2), tagged(3))?;
    assert_eq!(first, (10, 20, 30));
    Ok(again)
}

async fn concurrent_steps_get_deterministic_names(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = joined::start(&client, ()).await.unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        (10, 20, 30)
    );
    let steps = run.steps().await.unwrap();
    let by_name = |name: &str| {
        steps
            .iter()
            .find(|s| s.step_name == name)
            .and_then(|s| s.output.clone())
    };
    assert_eq!(by_name("tagged"), Some(json!(10)));
    assert_eq!(by_name("tagged:1"), Some(json!(20)));
    assert_eq!(by_name("tagged:2"), Some(json!(30)));
    assert_eq!(by_name("tagged:3"), Some(json!(10)));
    assert_eq!(by_name("tagged:5"), Some(json!(30)));
    // Replay after the sleep reused the first three; the second join ran its own three.
    for tag in 1..=3 {
        assert_eq!(calls(run.id(), &format!("tagged:{tag}")), 2);
    }
    worker.shutdown().await;
}

#[tokio::test]
async fn a_step_outside_a_workflow_is_a_plain_call() {
    let before = calls(Uuid::nil(), "shout:plain");
    assert_eq!(shout("plain").await.unwrap(), "PLAIN");
    assert_eq!(calls(Uuid::nil(), "shout:plain"), before + 1);
    assert!(WorkflowContext::current().is_none());
}

#[step]
async fn prepare() -> Result<u32, std::io::Error> {
    bump(run_id(), "prepare");
    Ok(7)
}

#[step(retry(max_attempts = 4, initial_interval = "20ms", backoff = 1.5))]
async fn flaky(fail_times: u32) -> Result<u32, std::io::Error> {
    let call = bump(run_id(), "flaky");
    if call <= fail_times {
        return Err(std::io::Error::other(format!("flaky failure {call}")));
    }
    Ok(call)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Flaky {
    fail_times: u32,
}

#[workflow(name = "e2e-flaky", retry(max_attempts = 3, initial_interval = "50ms"))]
async fn flaky_flow(_ctx: WorkflowContext, input: Flaky) -> Result<u32, WorkflowError> {
    let base = prepare().await?;
    Ok(base + flaky(input.fail_times).await?)
}

async fn a_failing_step_is_retried_without_rerunning_completed_steps(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = flaky_flow::start(&client(&store), Flaky { fail_times: 2 })
        .await
        .unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        7 + 3
    );
    assert_eq!(calls(run.id(), "prepare"), 1);
    assert_eq!(calls(run.id(), "flaky"), 3);
    let statuses: Vec<_> = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.step_name == "flaky")
        .map(|s| s.status)
        .collect();
    assert_eq!(
        statuses,
        vec![
            StepStatus::Failed,
            StepStatus::Failed,
            StepStatus::Completed
        ]
    );
    assert_eq!(
        run.run().await.unwrap().attempts,
        1,
        "step retries do not retry the run"
    );
    worker.shutdown().await;
}

async fn a_step_that_exhausts_its_retries_fails_the_run_without_workflow_retries(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = flaky_flow::start(&client(&store), Flaky { fail_times: 100 })
        .await
        .unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.message, "flaky failure 4");
            assert_eq!(error.kind.as_deref(), Some("step"));
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "flaky"), 4, "max_attempts = 4");
    assert_eq!(calls(run.id(), "prepare"), 1);
    let stored = run.run().await.unwrap();
    assert_eq!(stored.status, RunStatus::Failed);
    assert_eq!(
        stored.attempts, 1,
        "the workflow retry policy does not apply to step errors"
    );
    worker.shutdown().await;
}

#[workflow(
    name = "e2e-workflow-retry",
    retry(max_attempts = 3, initial_interval = "50ms", backoff = 1.0)
)]
async fn workflow_retry(ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    prepare().await?;
    if ctx.attempt() < 2 {
        return Err(WorkflowError::msg("not yet"));
    }
    Ok(ctx.attempt())
}

async fn errors_outside_steps_use_the_workflow_retry_policy(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = workflow_retry::start(&client(&store), ()).await.unwrap();
    assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 2);
    assert_eq!(
        calls(run.id(), "prepare"),
        1,
        "the completed step was replayed, not re-run"
    );
    worker.shutdown().await;
}

#[workflow(name = "e2e-sleepy")]
async fn sleepy(ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    prepare().await?;
    ctx.sleep("nap", Duration::from_millis(1500)).await?;
    Ok("rested".into())
}

async fn a_durable_sleep_parks_the_run_and_wakes_it(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let started = Instant::now();
    let run = sleepy::start(&client(&store), ()).await.unwrap();
    let parked = run
        .wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(parked.worker_id, None, "a sleeping run holds no worker");
    assert!(parked.available_at.is_some());
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        "rested"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    let nap = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.step_name == "nap")
        .unwrap();
    assert_eq!(
        (nap.kind, nap.status),
        (StepKind::Sleep, StepStatus::Completed)
    );
    assert_eq!(calls(run.id(), "prepare"), 1);
    worker.shutdown().await;
}

#[step]
async fn slow_step(label: &str, millis: u64) -> Result<String, std::io::Error> {
    bump(run_id(), label);
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(label.to_owned())
}

#[workflow(name = "e2e-three-phases")]
async fn three_phases(_ctx: WorkflowContext, millis: u64) -> Result<Vec<String>, WorkflowError> {
    Ok(vec![
        slow_step("one", 10).await?,
        slow_step("two", millis).await?,
        slow_step("three", 10).await?,
    ])
}

async fn wait_for_calls(run_id: Uuid, label: &str, count: u32) {
    eventually!(Duration::from_secs(10), {
        (calls(run_id, label) >= count).then_some(())
    });
}

async fn pausing_a_running_run_stops_it_at_the_next_step_and_resume_finishes_it(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = three_phases::start(&client, 800).await.unwrap();
    wait_for_calls(run.id(), "two", 1).await;
    let paused = run.pause().await.unwrap();
    assert_eq!(paused.status, RunStatus::Paused);

    // Step two finishes, finds the run paused, and the run stops there.
    let two = eventually!(Duration::from_secs(10), {
        let steps = run.steps().await.unwrap();
        steps
            .into_iter()
            .find(|s| s.step_name == "slow_step:1" && s.status != StepStatus::Running)
    });
    assert_eq!(two.status, StepStatus::Paused);
    assert_eq!(two.output, None, "an interrupted step writes no result");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(calls(run.id(), "three"), 0);
    assert_eq!(run.status().await.unwrap(), RunStatus::Paused);

    run.resume().await.unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        vec!["one", "two", "three"]
    );
    assert_eq!(calls(run.id(), "one"), 1);
    assert_eq!(
        calls(run.id(), "two"),
        2,
        "the interrupted step ran again after resume"
    );
    assert_eq!(calls(run.id(), "three"), 1);
    worker.shutdown().await;
}

async fn canceling_a_running_run_stops_it_and_writes_nothing_stale(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = three_phases::start(&client(&store), 800).await.unwrap();
    wait_for_calls(run.id(), "two", 1).await;
    run.cancel().await.unwrap();
    match run.result_within(Duration::from_secs(10)).await {
        Err(RunError::Canceled { run_id }) => assert_eq!(run_id, run.id()),
        other => panic!("expected a canceled run, got {other:?}"),
    }
    let two = eventually!(Duration::from_secs(10), {
        let steps = run.steps().await.unwrap();
        steps
            .into_iter()
            .find(|s| s.step_name == "slow_step:1" && s.status != StepStatus::Running)
    });
    assert_eq!(two.status, StepStatus::Canceled);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stored = run.run().await.unwrap();
    assert_eq!(stored.status, RunStatus::Canceled);
    assert_eq!(stored.output, None);
    assert_eq!(calls(run.id(), "three"), 0);
    worker.shutdown().await;
}

async fn a_run_past_its_deadline_fails(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let deadline = chrono::Utc::now() + chrono::Duration::milliseconds(700);
    let run = client(&store)
        .start::<three_phases>(5_000)
        .deadline(deadline)
        .await
        .unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.message, "Workflow run deadline exceeded")
        }
        other => panic!("expected a deadline failure, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "three"), 0);
    worker.shutdown().await;
}

async fn a_worker_that_lost_its_lease_writes_nothing(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = three_phases::start(&client(&store), 800).await.unwrap();
    wait_for_calls(run.id(), "two", 1).await;
    // Another worker takes the run over while step two is still executing here (as after
    // a long GC pause on this worker): hand the lease to "usurper".
    store.usurp_lease(run.id(), "usurper").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stored = run.run().await.unwrap();
    assert_eq!(stored.status, RunStatus::Running);
    assert_eq!(stored.worker_id.as_deref(), Some("usurper"));
    assert_eq!(stored.output, None);
    // The stale worker's step result was fenced out: step two is still open, or (when a
    // function step is recorded only once it finishes) not recorded at all.
    let steps = run.steps().await.unwrap();
    let two: Vec<_> = steps
        .iter()
        .filter(|s| s.step_name == "slow_step:1")
        .collect();
    assert!(two.len() <= 1, "{two:?}");
    assert!(
        two.iter()
            .all(|s| s.status == StepStatus::Running && s.output.is_none()),
        "the stale worker's step result was fenced out: {two:?}"
    );
    assert!(
        steps.iter().all(|s| s.step_name != "slow_step:2"),
        "nothing after step two was recorded: {steps:?}"
    );
    assert_eq!(calls(run.id(), "three"), 0);
    worker.shutdown().await;
}

#[workflow(name = "e2e-runaway")]
async fn runaway(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    loop {
        prepare().await?;
    }
}

async fn a_runaway_loop_hits_the_step_limit(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store)
        .max_steps_per_run(25)
        .build()
        .unwrap()
        .spawn();
    let run = runaway::start(&client(&store), ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.kind.as_deref(), Some("step_limit"));
            assert!(error.message.contains("25 steps"), "{}", error.message);
            assert!(
                error.message.contains("ctx.continue_as_new"),
                "the limit names its remedy: {}",
                error.message
            );
        }
        other => panic!("expected the step limit, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "prepare"), 25);
    worker.shutdown().await;
}

async fn unregistered_workflows_are_rescheduled_not_failed(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store)
        .unknown_workflow(tasks::UnknownWorkflowPolicy::Reschedule {
            initial: Duration::from_secs(60),
            max: Duration::from_secs(600),
        })
        .build()
        .unwrap()
        .spawn();
    let run = store
        .create_run(CreateRun::new("not-in-this-binary"))
        .await
        .unwrap();
    let released = eventually!(Duration::from_secs(10), {
        let stored = store.get_run(run.id).await.unwrap().unwrap();
        stored.error.is_some().then_some(stored)
    });
    assert_eq!(released.status, RunStatus::Pending);
    assert_eq!(released.attempts, 0, "a deferral is not an attempt");
    assert_eq!(released.worker_id, None);
    let error = released.error.unwrap();
    assert_eq!(error["kind"], "unregistered");
    assert_eq!(error["deferrals"], 1);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not-in-this-binary")
    );
    let wait = released.available_at.unwrap() - released.updated_at;
    assert!(
        wait >= chrono::Duration::seconds(59),
        "rescheduled with backoff, got {wait}"
    );
    worker.shutdown().await;
}

async fn unregistered_workflows_can_be_failed_instead(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store)
        .unknown_workflow(tasks::UnknownWorkflowPolicy::Fail)
        .build()
        .unwrap()
        .spawn();
    let run = store
        .create_run(CreateRun::new("not-in-this-binary"))
        .await
        .unwrap();
    let failed = eventually!(Duration::from_secs(10), {
        let stored = store.get_run(run.id).await.unwrap().unwrap();
        (stored.status == RunStatus::Failed).then_some(stored)
    });
    assert_eq!(failed.error.unwrap()["kind"], "unregistered");
    worker.shutdown().await;
}

async fn graceful_shutdown_lets_in_flight_runs_finish(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = three_phases::start(&client(&store), 600).await.unwrap();
    wait_for_calls(run.id(), "two", 1).await;
    worker.shutdown().await;
    let stored = run.run().await.unwrap();
    assert_eq!(
        stored.status,
        RunStatus::Completed,
        "the in-flight run finished during the grace period"
    );
    assert_eq!(stored.output, Some(json!(["one", "two", "three"])));
}

async fn shutdown_past_the_grace_period_leaves_nothing_half_written(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store)
        .lease(Duration::from_millis(600))
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .spawn();
    let run = three_phases::start(&client(&store), 2_000).await.unwrap();
    wait_for_calls(run.id(), "two", 1).await;
    worker.shutdown().await;

    // Abandoned mid-step: step two has no result (it is still open, or, when a function
    // step is recorded only once it finishes, not recorded at all), nothing after it ran,
    // no output.
    let stored = run.run().await.unwrap();
    assert_eq!(stored.status, RunStatus::Running);
    assert_eq!(stored.output, None);
    let steps = run.steps().await.unwrap();
    let status_of = |name: &str| steps.iter().find(|s| s.step_name == name).map(|s| s.status);
    assert_eq!(status_of("slow_step"), Some(StepStatus::Completed));
    let two: Vec<_> = steps
        .iter()
        .filter(|s| s.step_name == "slow_step:1")
        .collect();
    assert!(two.len() <= 1, "{two:?}");
    assert!(
        two.iter()
            .all(|s| s.status == StepStatus::Running && s.output.is_none()),
        "the abandoned step was left open or unrecorded, never finished: {two:?}"
    );
    assert_eq!(status_of("slow_step:2"), None);

    // Another worker takes over once the lease expires and finishes the run.
    let successor = support::worker(&store).build().unwrap().spawn();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        vec!["one", "two", "three"]
    );
    assert_eq!(calls(run.id(), "one"), 1);
    successor.shutdown().await;
}

async fn the_idempotency_key_returns_the_same_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let options = StartOptions::new().idempotency_key("order-17");
    let first = client
        .start::<three_phases>(1)
        .options(options.clone())
        .await
        .unwrap();
    let second = client
        .start::<three_phases>(2)
        .options(options)
        .await
        .unwrap();
    assert_eq!(first.id(), second.id());
    let page = client.list_runs(Default::default()).await.unwrap();
    assert_eq!(page.data.len(), 1);
    assert_eq!(
        page.data[0].input,
        Some(json!(1)),
        "the first input is kept"
    );
}

async fn a_delayed_start_waits_before_running(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let started = Instant::now();
    let run = client(&store)
        .start::<three_phases>(1)
        .delay(Duration::from_millis(1500))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let waiting = run.run().await.unwrap();
    assert_eq!(
        waiting.status,
        RunStatus::Pending,
        "not started before its delay"
    );
    assert_eq!(calls(run.id(), "one"), 0);
    let delay = waiting.available_at.unwrap() - waiting.created_at;
    assert_eq!(
        delay.num_milliseconds(),
        1500,
        "measured on the store's clock"
    );
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        vec!["one", "two", "three"]
    );
    assert!(started.elapsed() >= Duration::from_millis(1500));
    worker.shutdown().await;
}

/// A step, then workflow code that takes a while (not a durable sleep), then a step.
#[workflow(name = "e2e-linger")]
async fn linger(_ctx: WorkflowContext, millis: u64) -> Result<Vec<String>, WorkflowError> {
    let first = shout("x").await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    let second = shout("y").await?;
    Ok(vec![first, second])
}

/// A finished step's record waits for the run's next write only briefly: while the
/// workflow is busy between two steps, the first step is already durable.
async fn a_finished_step_is_durable_while_the_workflow_goes_on(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = linger::start(&client, 3_000).await.unwrap();
    wait_for_calls(run.id(), "shout:x", 1).await;
    let recorded_by = Instant::now() + Duration::from_millis(1_500);
    loop {
        let steps = run.steps().await.unwrap();
        if let Some(step) = steps.iter().find(|s| s.step_name == "shout") {
            assert_eq!(step.status, StepStatus::Completed);
            assert_eq!(step.output, Some(json!("X")));
            break;
        }
        assert!(
            Instant::now() < recorded_by,
            "the first step was not recorded while the workflow went on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(calls(run.id(), "shout:y"), 0, "still between the steps");
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        vec!["X", "Y"]
    );
    let names: Vec<String> = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.step_name)
        .collect();
    assert_eq!(names, vec!["shout", "shout:1"]);
    assert_eq!(calls(run.id(), "shout:x"), 1);
    assert_eq!(calls(run.id(), "shout:y"), 1);
    worker.shutdown().await;
}

#[test]
fn default_retry_policies_are_sane() {
    assert_eq!(RetryPolicy::DEFAULT_STEP.max_attempts, 3);
    assert_eq!(RetryPolicy::NONE.delay_after(1), None);
}

every_store! {
    repeated_step_names_resolve_in_call_order_and_replay_memoized,
    concurrent_steps_get_deterministic_names,
    a_failing_step_is_retried_without_rerunning_completed_steps,
    a_step_that_exhausts_its_retries_fails_the_run_without_workflow_retries,
    errors_outside_steps_use_the_workflow_retry_policy,
    a_durable_sleep_parks_the_run_and_wakes_it,
    pausing_a_running_run_stops_it_at_the_next_step_and_resume_finishes_it,
    canceling_a_running_run_stops_it_and_writes_nothing_stale,
    a_run_past_its_deadline_fails,
    a_runaway_loop_hits_the_step_limit,
    unregistered_workflows_are_rescheduled_not_failed,
    unregistered_workflows_can_be_failed_instead,
    graceful_shutdown_lets_in_flight_runs_finish,
    shutdown_past_the_grace_period_leaves_nothing_half_written,
    the_idempotency_key_returns_the_same_run,
    a_delayed_start_waits_before_running,
    a_finished_step_is_durable_while_the_workflow_goes_on,
    ;
    sql:
    a_worker_that_lost_its_lease_writes_nothing,
}
