//! End to end: a workflow whose code changed between a run's first execution and its replay,
//! against each store (Postgres and SQLite). A reordered step, a renamed step and a step
//! whose output type changed each fail the run with the non-determinism error, before the
//! changed call runs or is handed a stored output, and nothing is written for it. A patched
//! workflow (`ctx.patched`) replays an old run down the old path and runs a new run down
//! the new one.
//!
//! "Deploying new code" is simulated per run: each workflow reads which code it runs from a
//! map keyed by its run id, switched while the run is parked on an event. This binary
//! declares two steps with one name on purpose (the retyped step), so its client and worker
//! take explicit registries instead of the link-time one, which refuses that.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, TestStore, bump, calls, worker};
use tasks::uuid::Uuid;
use tasks::{
    Client, Event, NonDeterminism, Registry, RunError, RunStatus, StepKind, WorkflowContext,
    WorkflowError, step, workflow,
};

/// The event that lets a parked run go on.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Go;

impl Event for Go {
    const TOPIC: &'static str = "identity-go";
}

/// Which code each run executes: 0 until the test "deploys" 1.
fn code_of(run_id: Uuid) -> u8 {
    codes().lock().unwrap().get(&run_id).copied().unwrap_or(0)
}

fn deploy(run_id: Uuid, code: u8) {
    codes().lock().unwrap().insert(run_id, code);
}

fn codes() -> &'static Mutex<HashMap<Uuid, u8>> {
    static CODES: OnceLock<Mutex<HashMap<Uuid, u8>>> = OnceLock::new();
    CODES.get_or_init(Default::default)
}

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[step]
async fn first() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "first"))
}

#[step]
async fn second() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "second"))
}

#[step]
async fn charge() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "charge"))
}

#[step]
async fn charge_card() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "charge_card"))
}

/// The step `count` as first deployed: a number.
#[step(name = "count")]
async fn count_as_number() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "count-number"))
}

/// The step `count` after the change: a string. Same name, other output type.
#[step(name = "count")]
async fn count_as_text() -> Result<String, std::io::Error> {
    Ok(bump(run_id(), "count-text").to_string())
}

#[step]
async fn fraud_check() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "fraud_check"))
}

#[step]
async fn ship() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "ship"))
}

/// Code 0: `first`, `second`, wait. Code 1: the two steps swapped.
#[workflow(name = "identity-reordered", events(Go))]
async fn reordered(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    if code_of(ctx.run_id()) == 0 {
        first().await?;
        second().await?;
    } else {
        second().await?;
        first().await?;
    }
    ctx.wait_for_event::<Go>().await?;
    Ok(())
}

/// Code 0: `charge`, wait. Code 1: the step renamed to `charge_card`.
#[workflow(name = "identity-renamed", events(Go))]
async fn renamed(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    if code_of(ctx.run_id()) == 0 {
        charge().await?;
    } else {
        charge_card().await?;
    }
    ctx.wait_for_event::<Go>().await?;
    Ok(())
}

/// Code 0: `count` gives a number. Code 1: `count` gives a string.
#[workflow(name = "identity-retyped", events(Go))]
async fn retyped(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    let counted = if code_of(ctx.run_id()) == 0 {
        count_as_number().await?.to_string()
    } else {
        count_as_text().await?
    };
    ctx.wait_for_event::<Go>().await?;
    Ok(counted)
}

/// Code 0: `ship`, wait. Code 1: a fraud check before shipping, behind a patch. A run
/// starts on the code its input names, until a deploy.
#[workflow(name = "identity-patched", events(Go))]
async fn patched(ctx: WorkflowContext, started_on: u8) -> Result<String, WorkflowError> {
    let code = codes()
        .lock()
        .unwrap()
        .get(&ctx.run_id())
        .copied()
        .unwrap_or(started_on);
    let mut path = Vec::new();
    if code == 1 && ctx.patched("fraud-check").await? {
        fraud_check().await?;
        path.push("fraud_check");
    }
    ship().await?;
    path.push("ship");
    ctx.wait_for_event::<Go>().await?;
    Ok(path.join(","))
}

/// Asks for a patch whose marker would be the second call of a step named `patch`.
#[workflow(name = "identity-digit-patch")]
async fn digit_patch(ctx: WorkflowContext) -> Result<bool, WorkflowError> {
    ctx.patched("1").await
}

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry
        .register::<reordered>()
        .unwrap()
        .register::<renamed>()
        .unwrap()
        .register::<retyped>()
        .unwrap()
        .register::<patched>()
        .unwrap()
        .register::<digit_patch>()
        .unwrap();
    registry
}

fn client(store: &TestStore) -> Client {
    Client::with_registry(store.shared(), Arc::new(registry()))
}

fn spawn_worker(store: &TestStore) -> tasks::WorkerHandle {
    worker(store).registry(registry()).build().unwrap().spawn()
}

const WITHIN: Duration = Duration::from_secs(20);

/// Starts `W` with code 0, waits until it parks on its event, deploys code 1 and lets it go
/// on; returns the run's recorded error and its steps before and after.
async fn change_code_under<W: tasks::Workflow<Input = ()>>(
    backend: Backend,
) -> (
    Uuid,
    tasks::ErrorRecord,
    Vec<String>,
    Vec<String>,
    TestStore,
) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = spawn_worker(&store);
    let run = client.start::<W>(()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], WITHIN)
        .await
        .unwrap();
    let names = |steps: Vec<tasks::StepAttempt>| -> Vec<String> {
        steps
            .into_iter()
            .map(|step| format!("{}:{}", step.kind, step.step_name))
            .collect()
    };
    let before = names(run.steps().await.unwrap());
    deploy(run.id(), 1);
    client.send_event(run.id(), &Go).await.unwrap();
    let error = match run.result_within(WITHIN).await {
        Err(RunError::Failed { error, .. }) => error,
        Err(other) => panic!("expected the run to fail, got {other:?}"),
        Ok(_) => panic!("expected the run to fail, it completed"),
    };
    let after = names(run.steps().await.unwrap());
    worker.shutdown().await;
    (run.id(), error, before, after, store)
}

fn assert_nondeterminism(error: &tasks::ErrorRecord, recorded: &str, called: &str) {
    assert_eq!(
        error.kind.as_deref(),
        Some(NonDeterminism::KIND),
        "{error:?}"
    );
    assert!(!error.retryable, "{error:?}");
    assert!(
        error.message.contains(recorded) && error.message.contains(called),
        "the error names both calls: {}",
        error.message
    );
}

async fn a_reordered_step_fails_the_run_and_writes_nothing(backend: Backend) {
    let (run_id, error, before, after, _store) = change_code_under::<reordered>(backend).await;
    assert_nondeterminism(&error, "`first`", "`second`");
    assert_eq!(
        before,
        [
            "function:first",
            "function:second",
            "event:event/identity-go"
        ]
    );
    assert_eq!(after, before, "nothing written for the changed call");
    assert_eq!(calls(run_id, "first"), 1);
    assert_eq!(
        calls(run_id, "second"),
        1,
        "not run again, not handed first's output"
    );
}

async fn a_renamed_step_fails_the_run_and_writes_nothing(backend: Backend) {
    let (run_id, error, before, after, _store) = change_code_under::<renamed>(backend).await;
    assert_nondeterminism(&error, "`charge`", "`charge_card`");
    assert_eq!(after, before);
    assert_eq!(calls(run_id, "charge"), 1);
    assert_eq!(
        calls(run_id, "charge_card"),
        0,
        "the renamed step never ran"
    );
}

async fn a_retyped_step_fails_the_run_and_writes_nothing(backend: Backend) {
    let (run_id, error, before, after, _store) = change_code_under::<retyped>(backend).await;
    assert_nondeterminism(
        &error,
        "Result<u32, std::io::Error>",
        "Result<String, std::io::Error>",
    );
    assert_eq!(after, before);
    assert_eq!(calls(run_id, "count-number"), 1);
    assert_eq!(calls(run_id, "count-text"), 0);
}

async fn a_patch_keeps_old_runs_on_the_old_path_and_new_runs_on_the_new(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = spawn_worker(&store);

    // An old run: shipped before the patch was deployed.
    let old = client.start::<patched>(0).await.unwrap();
    old.wait_for_status(&[RunStatus::Sleeping], WITHIN)
        .await
        .unwrap();
    deploy(old.id(), 1);
    client.send_event(old.id(), &Go).await.unwrap();
    let output = old.result_within(WITHIN).await.unwrap();
    assert_eq!(output, "ship", "the old run replays down the old path");
    assert_eq!(calls(old.id(), "fraud_check"), 0);
    assert_eq!(calls(old.id(), "ship"), 1);
    let kinds: Vec<StepKind> = old
        .steps()
        .await
        .unwrap()
        .iter()
        .map(|step| step.kind)
        .collect();
    assert!(!kinds.contains(&StepKind::Patch), "{kinds:?}");

    // A new run, started on the new code: takes the patch, and its replay after the
    // wait takes it again without running the fraud check twice.
    let new = client.start::<patched>(1).await.unwrap();
    new.wait_for_status(&[RunStatus::Sleeping], WITHIN)
        .await
        .unwrap();
    client.send_event(new.id(), &Go).await.unwrap();
    let output = new.result_within(WITHIN).await.unwrap();
    assert_eq!(output, "fraud_check,ship");
    assert_eq!(calls(new.id(), "fraud_check"), 1);
    assert_eq!(calls(new.id(), "ship"), 1);
    let steps: Vec<String> = new
        .steps()
        .await
        .unwrap()
        .iter()
        .map(|step| format!("{}:{}", step.kind, step.step_name))
        .collect();
    assert_eq!(
        steps,
        [
            "patch:patch:fraud-check",
            "function:fraud_check",
            "function:ship",
            "event:event/identity-go"
        ]
    );
    worker.shutdown().await;
}

/// A patch named with digits alone is refused: its marker, `patch:1`, is the name the
/// second call of a step named `patch` takes.
async fn a_patch_named_with_digits_alone_is_refused(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = spawn_worker(&store);
    let run = client.start::<digit_patch>(()).await.unwrap();
    match run.result_within(WITHIN).await {
        Err(tasks::RunError::Failed { error, .. }) => {
            assert!(
                error.message.contains("invalid patch name \"1\""),
                "{error:?}"
            );
            assert!(!error.retryable, "{error:?}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert!(
        run.steps().await.unwrap().is_empty(),
        "no marker is written"
    );
    worker.shutdown().await;
}

every_store!(
    a_patch_named_with_digits_alone_is_refused,
    a_reordered_step_fails_the_run_and_writes_nothing,
    a_renamed_step_fails_the_run_and_writes_nothing,
    a_retyped_step_fails_the_run_and_writes_nothing,
    a_patch_keeps_old_runs_on_the_old_path_and_new_runs_on_the_new,
);
