//! End to end: child workflows run by a real worker, against each store (Postgres and
//! SQLite): a child's result, a child's failure handled by its parent, a fan-out of 50
//! children and their fan-in, the cancel cascade, and a replay (and a retry) that does not
//! start a child twice. (The SIGKILL case is in `e2e_recovery.rs`.)

use crate::support;

use std::time::Duration;

use support::{Backend, bump, calls, client, worker};
use tasks::store::ParentCancel;
use tasks::{
    ChildError, ChildOptions, ListRuns, RunStatus, StepKind, StepStatus, WorkflowContext,
    WorkflowError, step, workflow,
};

/// Squares its input; 1013 fails for good.
#[workflow(name = "e2e-children-square")]
async fn square(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    bump(ctx.run_id(), "square");
    if n == 1013 {
        return Err(WorkflowError::msg("unlucky").non_retryable());
    }
    Ok(n * n)
}

/// Sleeps for `ms` milliseconds, durably.
#[workflow(name = "e2e-children-nap")]
async fn nap(ctx: WorkflowContext, ms: u64) -> Result<(), WorkflowError> {
    ctx.sleep("nap", Duration::from_millis(ms)).await
}

#[step]
async fn before_child(run: tasks::uuid::Uuid) -> Result<(), std::io::Error> {
    bump(run, "before");
    Ok(())
}

/// A step, then the square of `n` by a child; a failed child is handled.
#[workflow(name = "e2e-children-one")]
async fn one_child(ctx: WorkflowContext, n: u64) -> Result<String, WorkflowError> {
    bump(ctx.run_id(), "body");
    before_child(ctx.run_id()).await?;
    match ctx.child::<square>(n).await {
        Ok(squared) => Ok(squared.to_string()),
        Err(ChildError::Failed { error, .. }) => Ok(format!("child failed: {}", error.message)),
        Err(other) => Err(other.into()),
    }
}

/// Starts a square child for each of 1..=n, then joins them all and sums.
#[workflow(name = "e2e-children-fan-out")]
async fn fan_out(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    bump(ctx.run_id(), "body");
    let mut handles = Vec::new();
    for i in 1..=n {
        handles.push(ctx.spawn_child::<square>(i).await?);
    }
    let mut sum = 0;
    for result in ctx.join_all(&handles).await {
        sum += result?;
    }
    Ok(sum)
}

/// Starts a long nap that cascades and one detached from the cancel, then waits for both.
#[workflow(name = "e2e-children-cascade")]
async fn cascade(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    let attached = ctx.spawn_child::<nap>(60_000).await?;
    let detached = ctx
        .spawn_child_with::<nap>(
            60_000,
            ChildOptions::new()
                .name("detached")
                .on_parent_cancel(ParentCancel::Detach),
        )
        .await?;
    for result in ctx.join_all(&[attached, detached]).await {
        result?;
    }
    Ok(())
}

/// A child, then a transient failure on the first attempt: the retry replays the child.
#[workflow(name = "e2e-children-retry")]
async fn retry_after_child(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    let squared = ctx.child::<square>(n).await?;
    if bump(ctx.run_id(), "after-child") == 1 {
        return Err(WorkflowError::msg("transient"));
    }
    Ok(squared)
}

/// Joins a child that naps for `ms`; a failed child is handled.
#[workflow(name = "e2e-children-napper")]
async fn napper(ctx: WorkflowContext, ms: u64) -> Result<String, WorkflowError> {
    match ctx.child::<nap>(ms).await {
        Ok(()) => Ok("rested".into()),
        Err(ChildError::Failed { error, .. }) => Ok(format!("child failed: {}", error.message)),
        Err(other) => Err(other.into()),
    }
}

/// A child whose row cannot be decoded when it wakes is quarantined by the claim (failed,
/// kind `corrupt`), and that wakes its parked parent, which reads the failure.
async fn a_quarantined_child_wakes_its_parent(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = napper::start(&client(&store), 1500).await.unwrap();
    let started = std::time::Instant::now();
    let child = loop {
        let children = children_of(&store, run.id()).await;
        if let Some(child) = children.iter().find(|c| c.status == RunStatus::Sleeping) {
            break child.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the child never slept"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    store.poison_input(child.id).await;
    let out = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert!(
        out.starts_with("child failed:") && out.contains("cannot be decoded"),
        "{out}"
    );
    worker.shutdown().await;
}

async fn children_of(
    store: &support::TestStore,
    parent: tasks::uuid::Uuid,
) -> Vec<tasks::WorkflowRun> {
    store
        .list_runs(ListRuns {
            parent_run_id: Some(parent),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
}

async fn a_child_returns_its_result(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = one_child::start(&client, 7).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "49");
    let steps = run.steps().await.unwrap();
    let kinds: Vec<(&str, StepKind, StepStatus)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind, s.status))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("before_child", StepKind::Function, StepStatus::Completed),
            (
                "child/e2e-children-square",
                StepKind::Child,
                StepStatus::Completed
            ),
        ]
    );
    let child_step = &steps[1];
    assert!(child_step.finished_at.unwrap() >= child_step.started_at.unwrap());
    let children = children_of(&store, run.id()).await;
    assert_eq!(children.len(), 1, "one child: {children:?}");
    let child = &children[0];
    assert_eq!(child.workflow_name, "e2e-children-square");
    assert_eq!(child.status, RunStatus::Completed);
    assert_eq!(child.parent_run_id, Some(run.id()));
    assert_eq!(child.parent_step_attempt_id, Some(child_step.id));
    assert_eq!(child_step.child_workflow_run_id, Some(child.id));
    // The parent parked and was replayed after the child finished; nothing ran twice.
    assert_eq!(calls(child.id, "square"), 1);
    assert_eq!(calls(run.id(), "before"), 1);
    assert!(calls(run.id(), "body") >= 1);
    let parent = store.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(
        parent.attempts, 1,
        "waking from the join continues the attempt"
    );
    worker.shutdown().await;
}

async fn a_child_failure_is_handled_by_the_parent(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = one_child::start(&client, 1013).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "child failed: unlucky");
    let children = children_of(&store, run.id()).await;
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].status, RunStatus::Failed);
    worker.shutdown().await;
}

async fn fan_out_of_50_children_and_fan_in(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = fan_out::start(&client, 50).await.unwrap();
    let output = run.result_within(Duration::from_secs(60)).await.unwrap();
    assert_eq!(output, (1..=50u64).map(|i| i * i).sum::<u64>());
    let children = children_of(&store, run.id()).await;
    assert_eq!(children.len(), 50);
    for child in &children {
        assert_eq!(child.status, RunStatus::Completed);
        assert_eq!(calls(child.id, "square"), 1, "each child ran once");
    }
    // One park for the whole fan-in: the body ran at most three times (the first run, the
    // wake-up after the last child, and a spare for a wake-up by a finishing child the
    // join did not wait for yet), not once per child.
    let bodies = calls(run.id(), "body");
    assert!(bodies <= 3, "the parent ran {bodies} times");
    let steps = run.steps().await.unwrap();
    assert_eq!(steps.len(), 50);
    assert!(
        steps
            .iter()
            .all(|s| s.kind == StepKind::Child && s.status == StepStatus::Completed)
    );
    worker.shutdown().await;
}

async fn canceling_a_parent_cascades_to_its_children(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = cascade::start(&client, ()).await.unwrap();
    // Both children start and nap; the parent parks in its join.
    eventually!(Duration::from_secs(20), {
        let parent = store.get_run(run.id()).await.unwrap().unwrap();
        let children = children_of(&store, run.id()).await;
        (parent.status == RunStatus::Sleeping
            && children.len() == 2
            && children.iter().all(|c| c.status == RunStatus::Sleeping))
        .then_some(())
    });
    client.cancel(run.id()).await.unwrap();
    let children = children_of(&store, run.id()).await;
    let attached = children
        .iter()
        .find(|c| c.cancel_with_parent)
        .expect("the cascading child");
    let detached = children
        .iter()
        .find(|c| !c.cancel_with_parent)
        .expect("the detached child");
    assert_eq!(attached.status, RunStatus::Canceled);
    assert_eq!(
        detached.status,
        RunStatus::Sleeping,
        "detached: still napping"
    );
    assert_eq!(
        store.get_run(run.id()).await.unwrap().unwrap().status,
        RunStatus::Canceled
    );
    client.cancel(detached.id).await.unwrap();
    worker.shutdown().await;
}

async fn a_retry_replays_the_child_without_starting_it_again(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = retry_after_child::start(&client, 9).await.unwrap();
    let output = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, 81);
    let children = children_of(&store, run.id()).await;
    assert_eq!(children.len(), 1, "the retry did not start a second child");
    assert_eq!(calls(children[0].id, "square"), 1);
    assert_eq!(calls(run.id(), "after-child"), 2);
    let parent = store.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(parent.attempts, 2, "the transient failure was retried");
    worker.shutdown().await;
}

/// An input whose `Serialize` writes a field its `Deserialize` does not read: stored, it
/// would not decode when the child executes.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
struct Lopsided {
    n: u32,
}

impl serde::Serialize for Lopsided {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut fields = serializer.serialize_struct("Lopsided", 1)?;
        fields.serialize_field("m", &self.n)?;
        fields.end()
    }
}

#[workflow(name = "e2e-children-lopsided")]
async fn lopsided(_ctx: WorkflowContext, input: Lopsided) -> Result<u32, WorkflowError> {
    Ok(input.n)
}

/// Starts a lopsided child and reports how its start was refused.
#[workflow(name = "e2e-children-lopsided-parent")]
async fn lopsided_parent(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    match ctx.spawn_child::<lopsided>(Lopsided { n: 7 }).await {
        Ok(_) => Ok("started".into()),
        Err(ChildError::Input { workflow, reason }) => Ok(format!("{workflow}: {reason}")),
        Err(other) => Err(other.into()),
    }
}

async fn a_child_input_that_would_not_decode_is_refused(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = lopsided_parent::start(&client, ()).await.unwrap();
    let refusal = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert!(
        refusal
            .starts_with("e2e-children-lopsided: does not decode into the workflow's input type"),
        "{refusal}"
    );
    assert!(
        children_of(&store, run.id()).await.is_empty(),
        "no child was stored"
    );
    worker.shutdown().await;
}

every_store! {
    a_child_input_that_would_not_decode_is_refused,
    a_child_returns_its_result,
    a_child_failure_is_handled_by_the_parent,
    fan_out_of_50_children_and_fan_in,
    canceling_a_parent_cascades_to_its_children,
    a_retry_replays_the_child_without_starting_it_again,
    ;
    sql:
    a_quarantined_child_wakes_its_parent,
}
