//! End to end: concurrent branches of a workflow on other tokio tasks
//! ([`WorkflowContext::spawn`]) on each store — their steps are recorded under names scoped
//! by the branch, replayed after the execution stops without running again, and a branch
//! still running when the execution stops is aborted without writing.

use crate::support;

use std::time::Duration;

use support::{Backend, calls, client, worker};
use tasks::{StepKind, StepStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[step]
async fn leg(branch: String, i: u32, millis: u64) -> Result<String, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(millis)).await;
    support::bump(run_id(), &format!("leg:{branch}:{i}"));
    Ok(format!("{branch}{i}"))
}

/// Branch `a` runs two quick legs, then a slow one; branch `b` runs a leg and then takes a
/// durable nap, which stops the first execution while `a`'s slow leg runs. The second
/// execution replays both branches with another interleaving.
#[workflow(name = "e2e-spawn-branches")]
async fn branches(ctx: WorkflowContext, _input: ()) -> Result<Vec<String>, WorkflowError> {
    let a = ctx.spawn("a", async {
        let mut out = vec![leg("a".into(), 0, 10).await?, leg("a".into(), 1, 10).await?];
        out.push(leg("a".into(), 2, 3000).await?);
        Ok::<_, WorkflowError>(out)
    })?;
    let b = ctx.spawn("b", async {
        let ctx = WorkflowContext::current().expect("a branch runs inside its workflow");
        let first = leg("b".into(), 0, 600).await?;
        ctx.sleep("nap", Duration::from_millis(300)).await?;
        let second = leg("b".into(), 1, 10).await?;
        Ok::<_, WorkflowError>(vec![first, second])
    })?;
    assert_eq!(a.name(), "a");
    let mut out = a.await?;
    out.extend(b.await?);
    Ok(out)
}

async fn branch_steps_are_scoped_memoized_and_replayed(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = branches::start(&client(&store), ()).await.unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(30)).await.unwrap(),
        ["a0", "a1", "a2", "b0", "b1"]
    );
    for leg in ["a:0", "a:1", "b:0", "b:1"] {
        assert_eq!(
            calls(run.id(), &format!("leg:{leg}")),
            1,
            "leg {leg} ran once: the replay read its record"
        );
    }
    // The slow leg was aborted with the first execution (no record, no call counted) and
    // ran once in the second.
    assert_eq!(calls(run.id(), "leg:a:2"), 1);
    let steps = run.steps().await.unwrap();
    let mut names: Vec<&str> = steps.iter().map(|s| s.step_name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["a/leg", "a/leg:1", "a/leg:2", "b/leg", "b/leg:1", "b/nap"],
        "names depend on the branch, not on the interleaving: {steps:?}"
    );
    for step in &steps {
        assert_eq!(step.status, StepStatus::Completed, "{step:?}");
    }
    let nap = steps.iter().find(|s| s.step_name == "b/nap").unwrap();
    assert_eq!(nap.kind, StepKind::Sleep);
    worker.shutdown().await;
}

/// A workflow that returns while a branch still runs: the branch is aborted and never
/// writes its step.
#[workflow(name = "e2e-spawn-abandoned")]
async fn abandoned(ctx: WorkflowContext, _input: ()) -> Result<String, WorkflowError> {
    let slow = ctx.spawn("slow", leg("slow".into(), 0, 1500))?;
    let quick = leg("main".into(), 0, 10).await?;
    // Leaked on purpose: the execution ends before the branch.
    std::mem::forget(slow);
    Ok(quick)
}

async fn branches_end_with_the_execution(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = abandoned::start(&client(&store), ()).await.unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        "main0"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(calls(run.id(), "leg:slow:0"), 0, "the branch was aborted");
    let steps = run.steps().await.unwrap();
    assert_eq!(
        steps
            .iter()
            .map(|s| s.step_name.as_str())
            .collect::<Vec<_>>(),
        ["leg"],
        "only the workflow's own step was written"
    );
    worker.shutdown().await;
}

every_store!(
    branch_steps_are_scoped_memoized_and_replayed,
    branches_end_with_the_execution,
);
