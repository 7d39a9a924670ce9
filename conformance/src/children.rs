//! Child workflows: [`ChildStore::start_child`] and [`ChildStore::wait_for_children`], the parent
//! wake-up in a child's finishing transitions, the cancel cascade and the parent filter of
//! [`RunStore::list_runs`].

use serde_json::json;
#[cfg(doc)]
use tasks_core::ChildStore;
use tasks_core::{
    ChildOutcome, ChildWait, CreateRun, FailRun, ListRuns, ParentCancel, RunStatus, StartChild,
    StartedChild, StepAttempt, StepKind, StepStatus, Store, StoreError, WaitForChildren,
    WorkflowRun,
};
use tasks_core::{LeaseStore, RunStore, StepStore};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// The start of a child of `workflow` from step `step_name` of the claimed run `parent`.
fn start(parent: &WorkflowRun, step_name: &str, policy: ParentCancel) -> StartChild {
    StartChild {
        call: None,
        run_id: parent.id,
        holder: holder(parent),
        step_name: step_name.to_owned(),
        child: CreateRun {
            input: Some(json!({ "n": 1 })),
            ..CreateRun::new(unique_name())
        },
        on_parent_cancel: policy,
    }
}

/// The wait of the claimed run `parent` for the children of `steps`.
fn wait(parent: &WorkflowRun, steps: &[&str]) -> WaitForChildren {
    WaitForChildren {
        run_id: parent.id,
        holder: holder(parent),
        step_names: steps.iter().map(|s| (*s).to_owned()).collect(),
    }
}

async fn started<S: Store + ?Sized>(store: &S, params: StartChild) -> StartedChild {
    store
        .children()
        .unwrap()
        .start_child(params)
        .await
        .expect("start_child")
}

#[track_caller]
fn parked(outcome: ChildWait) -> WorkflowRun {
    match outcome {
        ChildWait::Parked(run) => run,
        ChildWait::Done(steps) => panic!("expected the wait to park, it ended: {steps:?}"),
    }
}

#[track_caller]
fn done(outcome: ChildWait) -> Vec<StepAttempt> {
    match outcome {
        ChildWait::Done(steps) => steps,
        ChildWait::Parked(run) => panic!("expected the wait to be over, it parked: {run:?}"),
    }
}

#[track_caller]
fn outcome(step: &StepAttempt) -> ChildOutcome {
    assert_eq!(step.kind, StepKind::Child);
    assert_eq!(step.status, StepStatus::Completed);
    assert!(step.finished_at.is_some());
    ChildOutcome::from_output(step.output.as_ref().expect("an output"))
        .unwrap_or_else(|| panic!("not a child outcome: {:?}", step.output))
}

/// A child start creates the parent's running step attempt of kind `child` and the pending
/// child run, which records its parent; starting the same step again creates nothing and
/// returns the same child, so a replay never starts a child twice.
pub async fn child_start_is_memoized(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let first = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    assert!(first.created);
    assert_eq!(first.step.kind, StepKind::Child);
    assert_eq!(first.step.status, StepStatus::Running);
    assert_eq!(first.step.step_name, "child/a");
    assert_eq!(first.step.workflow_run_id, parent.id);
    assert_eq!(first.step.child_workflow_run_id, Some(first.child.id));
    assert_eq!(
        first.step.config["workflow"],
        json!(first.child.workflow_name)
    );
    assert_eq!(first.child.status, RunStatus::Pending);
    assert_eq!(first.child.parent_run_id, Some(parent.id));
    assert_eq!(first.child.parent_step_attempt_id, Some(first.step.id));
    assert!(first.child.cancel_with_parent);
    assert_eq!(first.child.input, Some(json!({ "n": 1 })));

    let again = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    assert!(!again.created, "the second start of a step creates nothing");
    assert_eq!(again.child.id, first.child.id);
    assert_eq!(again.step.id, first.step.id);
    let history = store.step_history(parent.id).await.unwrap();
    assert_eq!(history.len(), 1, "one step attempt: {history:?}");

    let detached = started(&store, start(&parent, "child/b", ParentCancel::Detach)).await;
    assert!(detached.created);
    assert!(!detached.child.cancel_with_parent);
    assert_eq!(
        store.get_run(detached.child.id).await.unwrap(),
        Some(detached.child.clone())
    );
}

/// A start is fenced on the parent's lease, and a child with an idempotency key is refused;
/// nothing is written either way.
pub async fn child_start_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let mut stranger = start(&parent, "child/a", ParentCancel::Cascade);
    stranger.holder = Holder::new(new_worker(), parent.claim_epoch);
    assert_err!(
        store.children().unwrap().start_child(stranger).await,
        StoreError::LeaseLost { .. }
    );
    let mut keyed = start(&parent, "child/a", ParentCancel::Cascade);
    keyed.child.idempotency_key = Some("k".into());
    assert_err!(
        store.children().unwrap().start_child(keyed).await,
        StoreError::InvalidArgument(_)
    );
    let mut unknown = start(&parent, "child/a", ParentCancel::Cascade);
    unknown.run_id = Uuid::now_v7();
    assert_err!(
        store.children().unwrap().start_child(unknown).await,
        StoreError::RunNotFound { .. }
    );
    assert!(store.step_history(parent.id).await.unwrap().is_empty());
    let all = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&all.data), vec![parent.id], "no child was created");
}

/// A wait for a live child parks the parent (sleeping, no worker, not claimable); the
/// child's completion makes the parent available, and the next wait returns the child's
/// step completed with its output.
pub async fn child_completion_wakes_the_parent(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let child = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    let parked = parked(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(parked.status, RunStatus::Sleeping);
    assert_eq!(parked.worker_id, None);

    let running_child = claim_one(&store, LONG_LEASE).await;
    assert_eq!(
        running_child.id, child.child.id,
        "only the child is claimable"
    );
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none(),
        "the parked parent is not claimable while its child runs"
    );
    store
        .complete_run(
            running_child.id,
            &holder(&running_child),
            json!({ "sum": 3 }),
        )
        .await
        .unwrap();

    let woken = claim_one(&store, LONG_LEASE).await;
    assert_eq!(
        woken.id, parent.id,
        "the child's completion woke the parent"
    );
    let steps = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&woken, &["child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(
        outcome(&steps[0]),
        ChildOutcome::Completed(json!({ "sum": 3 }))
    );
    // A completed wait is read back as it is.
    let again = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&woken, &["child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(again, steps);
}

/// A wait for several children parks the parent once: it stays parked while any of them is
/// live, and the last one to finish (here by failing for good) wakes it. Outcomes come back
/// in the order the steps were named.
pub async fn parent_wakes_after_its_last_child(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let a = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    let b = started(&store, start(&parent, "child/b", ParentCancel::Cascade)).await;
    parked(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/a", "child/b"]))
            .await
            .unwrap(),
    );
    let worker = new_worker();
    let children = store.claim_runs(&worker, LONG_LEASE, 10).await.unwrap();
    assert_eq!(children.len(), 2, "both children, not the parent");
    store
        .complete_run(a.child.id, &held_by(&store, a.child.id).await, json!("a"))
        .await
        .unwrap();
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none(),
        "one child is still live: the parent stays parked"
    );
    let failed = store
        .fail_run(FailRun {
            run_id: b.child.id,
            holder: held_by(&store, b.child.id).await,
            error: json!({ "message": "boom" }),
            force: true,
        })
        .await
        .unwrap();
    assert_eq!(failed.status, RunStatus::Failed);

    let woken = claim_one(&store, LONG_LEASE).await;
    assert_eq!(woken.id, parent.id);
    let steps = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&woken, &["child/b", "child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(
        outcome(&steps[0]),
        ChildOutcome::Failed(json!({ "message": "boom" }))
    );
    assert_eq!(outcome(&steps[1]), ChildOutcome::Completed(json!("a")));
}

/// A wait for children that already finished does not park; an unknown step and an empty
/// list are refused, and the wait is fenced on the parent's lease.
pub async fn wait_for_finished_children_does_not_park(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let child = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    store
        .lifecycle()
        .unwrap()
        .cancel_run(child.child.id)
        .await
        .unwrap();
    let steps = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(outcome(&steps[0]), ChildOutcome::Canceled);
    assert_eq!(
        store.get_run(parent.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );

    assert_err!(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/nope"]))
            .await,
        StoreError::UnknownStep { .. }
    );
    assert_err!(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &[]))
            .await,
        StoreError::InvalidArgument(_)
    );
    let mut stranger = wait(&parent, &["child/a"]);
    stranger.holder = Holder::new(new_worker(), parent.claim_epoch);
    assert_err!(
        store.children().unwrap().wait_for_children(stranger).await,
        StoreError::LeaseLost { .. }
    );
}

/// Canceling a child wakes its parked parent, which then reads the child as canceled.
pub async fn child_cancel_wakes_the_parent(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let child = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    parked(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/a"]))
            .await
            .unwrap(),
    );
    store
        .lifecycle()
        .unwrap()
        .cancel_run(child.child.id)
        .await
        .unwrap();
    let woken = claim_one(&store, LONG_LEASE).await;
    assert_eq!(woken.id, parent.id, "the child's cancel woke the parent");
    let steps = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&woken, &["child/a"]))
            .await
            .unwrap(),
    );
    assert_eq!(outcome(&steps[0]), ChildOutcome::Canceled);
}

/// Canceling a run cancels, in the same transition, its live children started with the
/// cascade policy and, through them, their own; a detached child and a finished one are
/// left alone.
pub async fn cancel_cascades_to_children(setup: impl Setup) {
    let store = setup.store().await;
    let root = create_claimed(&store).await;
    let child = started(&store, start(&root, "child/a", ParentCancel::Cascade)).await;
    let loose = started(&store, start(&root, "child/b", ParentCancel::Detach)).await;
    let finished = started(&store, start(&root, "child/c", ParentCancel::Cascade)).await;
    // The children run; the first starts a grandchild of its own, the third completes.
    let worker = new_worker();
    let claimed = store.claim_runs(&worker, LONG_LEASE, 10).await.unwrap();
    assert_eq!(claimed.len(), 3, "the three children");
    let running = claimed
        .into_iter()
        .map(|claimed| claimed.run)
        .find(|run| run.id == child.child.id)
        .expect("the child was claimed");
    let grandchild = started(&store, start(&running, "child/g", ParentCancel::Cascade)).await;
    store
        .complete_run(
            finished.child.id,
            &held_by(&store, finished.child.id).await,
            json!("done"),
        )
        .await
        .unwrap();

    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(root.id)
        .await
        .unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
    let status = |id: Uuid| {
        let store = &store;
        async move { store.get_run(id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(child.child.id).await, RunStatus::Canceled);
    assert_eq!(status(grandchild.child.id).await, RunStatus::Canceled);
    assert_eq!(
        status(loose.child.id).await,
        RunStatus::Running,
        "a detached child outlives its parent's cancel"
    );
    assert_eq!(status(finished.child.id).await, RunStatus::Completed);
    // The canceled child's worker finds out at its next write.
    assert_err!(
        store
            .complete_run(child.child.id, &holder(&running), json!(null))
            .await,
        StoreError::WrongState { .. }
    );
}

/// `list_runs` with a parent filter lists exactly the children of that run, in order, and
/// combines with the other filters.
pub async fn runs_are_listed_by_parent(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let a = started(&store, start(&parent, "child/a", ParentCancel::Cascade)).await;
    let b = started(&store, start(&parent, "child/b", ParentCancel::Cascade)).await;
    store
        .lifecycle()
        .unwrap()
        .cancel_run(b.child.id)
        .await
        .unwrap();
    let children = store
        .list_runs(ListRuns {
            parent_run_id: Some(parent.id),
            ..ListRuns::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&children.data), vec![a.child.id, b.child.id]);
    let canceled = store
        .list_runs(ListRuns {
            parent_run_id: Some(parent.id),
            statuses: vec![RunStatus::Canceled],
            ..ListRuns::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&canceled.data), vec![b.child.id]);
    let none = store
        .list_runs(ListRuns {
            parent_run_id: Some(a.child.id),
            ..ListRuns::default()
        })
        .await
        .unwrap();
    assert!(none.data.is_empty());
}

/// Claims for new workers until one returns a run, at most `claims` times: a claim whose
/// deadline sweep woke a parent may leave that parent to the next claim.
async fn claim_within<S: Store + ?Sized>(store: &S, claims: usize) -> Option<WorkflowRun> {
    for _ in 0..claims {
        if let Some(run) = store.claim_run(&new_worker(), LONG_LEASE).await.unwrap() {
            return Some(run);
        }
    }
    None
}

/// Children failed by their deadline (a claim's sweep, [`ChildOutcome::Failed`] with kind
/// `deadline`) wake their parked parent like any other end, even when several of them
/// expire in one sweep; the parent's wait then reads both failures.
pub async fn child_deadline_wakes_the_parent(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let deadline = chrono::Utc::now() + chrono::Duration::milliseconds(400);
    let mut children = Vec::new();
    for step in ["child/a", "child/b"] {
        let mut params = start(&parent, step, ParentCancel::Cascade);
        params.child.deadline_at = Some(deadline);
        children.push(started(&store, params).await.child);
    }
    parked(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&parent, &["child/a", "child/b"]))
            .await
            .unwrap(),
    );
    sleep_past(deadline).await;

    let woken = claim_within(&store, 3)
        .await
        .expect("the expired children woke the parent");
    assert_eq!(woken.id, parent.id, "only the parent is claimable");
    for child in &children {
        let child = store.get_run(child.id).await.unwrap().unwrap();
        assert_eq!(child.status, RunStatus::Failed);
        assert_eq!(child.error.as_ref().unwrap()["kind"], json!("deadline"));
    }
    let steps = done(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&woken, &["child/a", "child/b"]))
            .await
            .unwrap(),
    );
    assert_eq!(steps.len(), 2);
    for step in &steps {
        match outcome(step) {
            ChildOutcome::Failed(error) => assert_eq!(error["kind"], json!("deadline")),
            other => panic!("expected a deadline failure, got {other:?}"),
        }
    }
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none(),
        "nothing else is claimable"
    );
}

/// A cancel racing the completions of the children it cascades to never fails, and neither
/// does a child's completion with anything but "the run is canceled": a child that finishes
/// takes the same locks in the same order as the cancel of its parent (parent first), so
/// the two wait for each other instead of deadlocking. Raced many times.
pub async fn a_cancel_racing_finishing_children_never_fails(setup: impl Setup) {
    let store = std::sync::Arc::new(setup.store().await);
    for round in 0..25 {
        let parent = create_claimed(&*store).await;
        for i in 0..4 {
            started(
                &*store,
                start(&parent, &format!("child/{i}"), ParentCancel::Cascade),
            )
            .await;
        }
        let mut children = Vec::new();
        while children.len() < 4 {
            children.push(claim_one(&*store, LONG_LEASE).await);
        }
        let completions: Vec<_> = children
            .into_iter()
            .map(|child| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .complete_run(child.id, &holder(&child), json!(round))
                        .await
                })
            })
            .collect();
        let cancel = {
            let store = store.clone();
            tokio::spawn(async move { store.lifecycle().unwrap().cancel_run(parent.id).await })
        };
        let canceled = cancel.await.unwrap();
        assert!(
            canceled.is_ok(),
            "round {round}: the cancel failed: {canceled:?}"
        );
        for completion in completions {
            match completion.await.unwrap() {
                Ok(done) => assert_eq!(done.status, RunStatus::Completed),
                Err(StoreError::WrongState {
                    status: RunStatus::Canceled,
                    ..
                }) => {}
                Err(error) => panic!("round {round}: a child's completion failed: {error:?}"),
            }
        }
    }
}
