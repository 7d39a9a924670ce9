//! Retry from the failure ([`LifecycleStore::retry_run`]): a failed or canceled run becomes pending
//! again with its step history kept, and every other state is refused. Fork
//! ([`LifecycleStore::fork_run`]): a new run with a copy of a finished run's history before a step.

use std::time::Duration;
#[cfg(doc)]
use tasks_core::LifecycleStore;
use tasks_core::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks_core::{
    ListRuns, Operation, RecordStepAttempt, RunStatus, StepKind, StepStatus, Store, StoreError,
    WorkflowRun,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// Asserts what every retry leaves behind.
#[track_caller]
fn assert_retried(run: &WorkflowRun, id: Uuid) {
    assert_eq!(run.id, id);
    assert_eq!(run.status, RunStatus::Pending);
    assert_eq!(run.attempts, 0, "the run's own attempts start over");
    assert_eq!(run.worker_id, None);
    assert_eq!(run.output, None);
    assert_eq!(run.error, None);
    assert_eq!(run.finished_at, None);
    assert_near_now(run.available_at, "available_at");
    assert_near_now(run.retried_at, "retried_at");
}

/// A finished attempt of `step_name` for the run's worker.
fn record(run: &WorkflowRun, step_name: &str, status: StepStatus) -> RecordStepAttempt {
    let completed = status == StepStatus::Completed;
    RecordStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: holder(run),
        step_name: step_name.into(),
        kind: StepKind::Function,
        config: json!({}),
        status,
        output: completed.then(|| json!("done")),
        error: (!completed).then(|| json!({ "message": "boom" })),
        args: Some(json!([{ "name": "step", "value": step_name }])),
        elapsed: Duration::from_millis(1),
    }
}

/// A failed run is pending again at once, keeps its step history and is claimed as a new
/// first attempt.
pub async fn retry_failed_run_keeps_its_history(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    store
        .record_step_attempt(record(&claimed, "a", StepStatus::Completed))
        .await
        .unwrap();
    store
        .record_step_attempt(record(&claimed, "b", StepStatus::Failed))
        .await
        .unwrap();
    store
        .fail_run(tasks_core::FailRun {
            run_id: claimed.id,
            holder: holder(&claimed),
            error: json!({ "message": "boom" }),
            force: true,
        })
        .await
        .unwrap();

    let retried = store
        .lifecycle()
        .unwrap()
        .retry_run(claimed.id)
        .await
        .unwrap();
    assert_retried(&retried, claimed.id);
    assert_eq!(retried.config, claimed.config);
    assert_eq!(retried.input, claimed.input);
    assert_eq!(
        store.get_run(claimed.id).await.unwrap(),
        Some(retried.clone())
    );

    let history = store.step_history(claimed.id).await.unwrap();
    let kept: Vec<_> = history
        .iter()
        .map(|step| (step.step_name.as_str(), step.status))
        .collect();
    assert_eq!(
        kept,
        [("a", StepStatus::Completed), ("b", StepStatus::Failed)]
    );
    assert!(
        history
            .iter()
            .all(|step| step.created_at <= retried.retried_at.unwrap()),
        "the history was recorded before the retry"
    );

    let again = claim_one(&store, LONG_LEASE).await;
    assert_eq!(again.id, claimed.id);
    assert_eq!(again.status, RunStatus::Running);
    assert_eq!(again.attempts, 1);
    assert_eq!(again.retried_at, retried.retried_at);
}

/// A canceled run can be retried too.
pub async fn retry_canceled_run(setup: impl Setup) {
    let store = setup.store().await;
    let canceled = create_canceled(&store).await;
    let retried = store
        .lifecycle()
        .unwrap()
        .retry_run(canceled.id)
        .await
        .unwrap();
    assert_retried(&retried, canceled.id);
    assert_eq!(claim_one(&store, LONG_LEASE).await.id, canceled.id);
}

/// Live and completed runs are the wrong state, and so is a second retry of a run that is
/// live again; nothing changes.
pub async fn retry_refuses_live_and_completed_runs(setup: impl Setup) {
    let store = setup.store().await;
    // Claimed runs first: a claim takes any pending run of the namespace.
    let running = create_claimed(&store).await;
    let completed = create_completed(&store).await;
    let (_, sleeping) = create_sleeping(&store).await;
    let pending = create_pending(&store).await;
    let paused = create_pending(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    for run in [&pending, &running, &completed, &sleeping, &paused] {
        let before = store.get_run(run.id).await.unwrap();
        assert_err!(
            store.lifecycle().unwrap().retry_run(run.id).await,
            StoreError::WrongState { id, operation: Operation::RetryRun, status }
                if *id == run.id && *status == before.as_ref().unwrap().status
        );
        assert_eq!(store.get_run(run.id).await.unwrap(), before, "unchanged");
    }

    let store = setup.store().await;
    let failed = create_failed(&store).await;
    store
        .lifecycle()
        .unwrap()
        .retry_run(failed.id)
        .await
        .unwrap();
    assert_err!(
        store.lifecycle().unwrap().retry_run(failed.id).await,
        StoreError::WrongState {
            operation: Operation::RetryRun,
            status: RunStatus::Pending,
            ..
        }
    );
}

/// An unknown run, or one of another namespace, is not found.
pub async fn retry_unknown_run_is_not_found(setup: impl Setup) {
    let store = setup.store().await;
    let id = Uuid::now_v7();
    assert_err!(
        store.lifecycle().unwrap().retry_run(id).await,
        StoreError::RunNotFound { id: missing } if *missing == id
    );
    let failed = create_failed(&store).await;
    let other = store.scoped(&Uuid::new_v4().to_string()).unwrap();
    assert_err!(
        other
            .contract()
            .lifecycle()
            .unwrap()
            .retry_run(failed.id)
            .await,
        StoreError::RunNotFound { .. }
    );
    assert_eq!(
        store.get_run(failed.id).await.unwrap().unwrap().status,
        RunStatus::Failed
    );
}

/// A completed run with attempts `a` (completed), `b` (failed, then completed) and `c`
/// (completed).
async fn finished_with_history<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let claimed = create_claimed(store).await;
    for (name, status) in [
        ("a", StepStatus::Completed),
        ("b", StepStatus::Failed),
        ("b", StepStatus::Completed),
        ("c", StepStatus::Completed),
    ] {
        store
            .record_step_attempt(record(&claimed, name, status))
            .await
            .unwrap();
    }
    store
        .complete_run(claimed.id, &holder(&claimed), json!("done"))
        .await
        .unwrap()
}

/// The `(step_name, status)` history of a run.
async fn history<S: Store + ?Sized>(store: &S, run_id: Uuid) -> Vec<(String, StepStatus)> {
    store
        .step_history(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|step| (step.step_name, step.status))
        .collect()
}

/// A fork is a new pending run of the same workflow and input with a copy of the history
/// before the step, recording where it came from; the source is unchanged.
pub async fn fork_copies_the_history_before_the_step(setup: impl Setup) {
    let store = setup.store().await;
    let source = finished_with_history(&store).await;
    let source_history = history(&store, source.id).await;

    let forked = store
        .lifecycle()
        .unwrap()
        .fork_run(source.id, "b")
        .await
        .unwrap();
    assert_ne!(forked.id, source.id);
    assert_eq!(forked.status, RunStatus::Pending);
    assert_eq!(forked.workflow_name, source.workflow_name);
    assert_eq!(forked.version, source.version);
    assert_eq!(forked.input, source.input);
    assert_eq!(forked.config, source.config);
    assert_eq!(forked.attempts, 0);
    assert_eq!(forked.output, None);
    assert_eq!(forked.idempotency_key, None);
    assert_eq!(forked.forked_from_run_id, Some(source.id));
    assert_eq!(forked.forked_from_step.as_deref(), Some("b"));
    assert_near_now(forked.available_at, "available_at");
    assert_eq!(
        store.get_run(forked.id).await.unwrap(),
        Some(forked.clone())
    );

    let copied = store.step_history(forked.id).await.unwrap();
    assert_eq!(copied.len(), 1);
    let original = &store.step_history(source.id).await.unwrap()[0];
    assert_eq!(copied[0].step_name, "a");
    assert_eq!(copied[0].status, StepStatus::Completed);
    assert_eq!(copied[0].output, original.output);
    assert_eq!(
        copied[0].args, original.args,
        "the recorded arguments come along"
    );
    assert!(original.args.is_some());
    assert_eq!(copied[0].workflow_run_id, forked.id);
    assert_ne!(copied[0].id, original.id);

    // From `c`: both attempts of `b` come along, in order.
    let later = store
        .lifecycle()
        .unwrap()
        .fork_run(source.id, "c")
        .await
        .unwrap();
    let expected: Vec<(String, StepStatus)> = source_history[..3].to_vec();
    assert_eq!(history(&store, later.id).await, expected);

    // The source is as it was, and the fork is claimable.
    assert_eq!(history(&store, source.id).await, source_history);
    assert_eq!(store.get_run(source.id).await.unwrap(), Some(source));
    let claimed = store
        .claim_runs(&new_worker(), LONG_LEASE, 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        !claimed[0].first_execution,
        "a fork's first claim must load the copied history"
    );
}

/// Forking a live run is the wrong state; an unknown run or step is not found; nothing is
/// created.
pub async fn fork_refuses_live_runs_and_unknown_steps(setup: impl Setup) {
    let store = setup.store().await;
    let source = finished_with_history(&store).await;
    let running = create_claimed(&store).await;
    let pending = create_pending(&store).await;
    let before = store
        .list_runs(ListRuns::default())
        .await
        .unwrap()
        .data
        .len();

    for run in [&running, &pending] {
        assert_err!(
            store.lifecycle().unwrap().fork_run(run.id, "step").await,
            StoreError::WrongState { operation: Operation::ForkRun, id, .. } if *id == run.id
        );
    }
    assert_err!(
        store.lifecycle().unwrap().fork_run(source.id, "b:1").await,
        StoreError::UnknownStep { run_id, step_name } if *run_id == source.id && step_name == "b:1"
    );
    let unknown = Uuid::now_v7();
    assert_err!(
        store.lifecycle().unwrap().fork_run(unknown, "a").await,
        StoreError::RunNotFound { id } if *id == unknown
    );
    assert_err!(
        store
            .lifecycle()
            .unwrap()
            .fork_run(source.id, "bad\0name")
            .await,
        StoreError::Limit(_)
    );
    let other = store.scoped(&Uuid::new_v4().to_string()).unwrap();
    assert_err!(
        other
            .contract()
            .lifecycle()
            .unwrap()
            .fork_run(source.id, "a")
            .await,
        StoreError::RunNotFound { .. }
    );
    let after = store
        .list_runs(ListRuns::default())
        .await
        .unwrap()
        .data
        .len();
    assert_eq!(after, before, "nothing was created");
}
