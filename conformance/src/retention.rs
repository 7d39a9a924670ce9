//! Retention ([`RetentionStore::purge_runs`]): finished runs are deleted by status and age, in
//! bounded batches, with their step attempts and events, and the links other runs keep to
//! them are cleared; live runs and other namespaces are never touched, and a run retried
//! while a purge runs is either live again or gone, never both. The retention turn
//! ([`RetentionStore::take_retention_turn`]) goes to one caller per period.

use std::sync::Arc;
use std::time::Duration;
#[cfg(doc)]
use tasks_core::RetentionStore;
use tasks_core::{LeaseStore, RunStore, StepStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::{
    EventTarget, LimitError, PurgeRuns, RecordStepAttempt, RunStatus, SendEvent, StepKind,
    StepStatus, Store, StoreError, WorkflowRun, limits::Field,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// Every terminal run finished before now.
fn everything() -> PurgeRuns {
    PurgeRuns::older_than(Duration::ZERO)
}

/// Whether the run still exists.
async fn exists<S: Store + ?Sized>(store: &S, run: &WorkflowRun) -> bool {
    store.get_run(run.id).await.unwrap().is_some()
}

/// A completed attempt of `step_name` for the run's worker.
fn completed_step(run: &WorkflowRun, step_name: &str) -> RecordStepAttempt {
    RecordStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: holder(run),
        step_name: step_name.into(),
        kind: StepKind::Function,
        config: json!({}),
        status: StepStatus::Completed,
        output: Some(json!("done")),
        error: None,
        args: None,
        elapsed: Duration::from_millis(1),
    }
}

/// Runs finished before the cutoff are deleted, later ones are kept; an age is measured by
/// the store's clock.
pub async fn purge_selects_by_age(setup: impl Setup) {
    let store = setup.store().await;
    let old = create_completed(&store).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let recent = create_completed(&store).await;

    let hour = Duration::from_secs(3600);
    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&PurgeRuns::older_than(hour))
            .await
            .unwrap(),
        0
    );
    assert!(exists(&store, &old).await && exists(&store, &recent).await);

    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&PurgeRuns::finished_before(cutoff))
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&store, &old).await, "finished before the cutoff");
    assert!(exists(&store, &recent).await, "finished after the cutoff");

    // Older than 200 ms by the store's clock: only once that much time has passed.
    let age = PurgeRuns::older_than(Duration::from_secs(30));
    assert_eq!(
        store.retention().unwrap().purge_runs(&age).await.unwrap(),
        0
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let age = PurgeRuns::older_than(Duration::from_millis(200));
    assert_eq!(
        store.retention().unwrap().purge_runs(&age).await.unwrap(),
        1
    );
    assert!(!exists(&store, &recent).await);
}

/// Only the statuses asked for are deleted; no status means every terminal one.
pub async fn purge_selects_by_status(setup: impl Setup) {
    let store = setup.store().await;
    let completed = create_completed(&store).await;
    let failed = create_failed(&store).await;
    let canceled = create_canceled(&store).await;

    let failed_only = everything().statuses([RunStatus::Failed]);
    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&failed_only)
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&store, &failed).await);
    assert!(exists(&store, &completed).await && exists(&store, &canceled).await);

    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        2
    );
    assert!(!exists(&store, &completed).await && !exists(&store, &canceled).await);
}

/// A batch deletes at most its size; repeated batches delete the rest, then nothing.
pub async fn purge_works_in_batches(setup: impl Setup) {
    let store = setup.store().await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(create_completed(&store).await);
    }
    let batches = everything().batch_size(2);
    let mut sizes = Vec::new();
    for _ in 0..4 {
        sizes.push(
            store
                .retention()
                .unwrap()
                .purge_runs(&batches)
                .await
                .unwrap(),
        );
    }
    assert_eq!(sizes, [2, 2, 1, 0]);
    for run in &runs {
        assert!(!exists(&store, run).await);
    }
}

/// A purged run takes its step attempts and events with it; a run forked from it stays,
/// with its own copied steps and `forked_from_step`, and without the dangling id.
pub async fn purge_removes_steps_events_and_links(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let step = store
        .record_step_attempt(completed_step(&claimed, "a"))
        .await
        .unwrap();
    let tasks_core::StepUpdate::Recorded(step) = step else {
        panic!("the step should be recorded, got {step:?}");
    };
    store
        .record_step_attempt(completed_step(&claimed, "b"))
        .await
        .unwrap();
    store
        .events()
        .unwrap()
        .send_event(SendEvent {
            target: EventTarget::Run(claimed.id),
            topic: "topic".into(),
            payload: json!({ "n": 1 }),
            dedup_key: Some("once".into()),
        })
        .await
        .unwrap();
    store
        .complete_run(claimed.id, &holder(&claimed), json!("out"))
        .await
        .unwrap();
    let fork = store
        .lifecycle()
        .unwrap()
        .fork_run(claimed.id, "b")
        .await
        .unwrap();
    assert_eq!(fork.forked_from_run_id, Some(claimed.id));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let purged = store
        .retention()
        .unwrap()
        .purge_runs(&PurgeRuns::older_than(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(purged, 1, "the source only: the fork is live");
    assert!(!exists(&store, &claimed).await);
    assert_eq!(store.get_step_attempt(step.id).await.unwrap(), None);
    assert!(store.step_history(claimed.id).await.unwrap().is_empty());
    assert!(
        store
            .events()
            .unwrap()
            .list_events(claimed.id)
            .await
            .unwrap()
            .is_empty()
    );

    let fork = store
        .get_run(fork.id)
        .await
        .unwrap()
        .expect("the fork stays");
    assert_eq!(fork.forked_from_run_id, None, "the link to the purged run");
    assert_eq!(fork.forked_from_step.as_deref(), Some("b"));
    let copied = store.step_history(fork.id).await.unwrap();
    assert_eq!(names(&copied), ["a"], "the fork keeps its copied history");

    // An event sent to the purged run's id again is refused like any unknown run's.
    assert_err!(
        store
            .events()
            .unwrap()
            .send_event(SendEvent {
                target: EventTarget::Run(claimed.id),
                topic: "topic".into(),
                payload: json!(2),
                dedup_key: Some("once".into()),
            })
            .await,
        StoreError::RunNotFound { .. }
    );
}

/// Pending, running, sleeping and paused runs are never deleted, whatever their age.
pub async fn purge_never_touches_live_runs(setup: impl Setup) {
    let store = setup.store().await;
    let running = create_claimed(&store).await;
    let (_, sleeping) = create_sleeping(&store).await;
    let paused = create_pending(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    let pending = create_pending(&store).await;
    let done = create_canceled(&store).await;

    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&store, &done).await);
    for (run, status) in [
        (&running, RunStatus::Running),
        (&sleeping, RunStatus::Sleeping),
        (&paused, RunStatus::Paused),
        (&pending, RunStatus::Pending),
    ] {
        let now = store
            .get_run(run.id)
            .await
            .unwrap()
            .expect("a live run stays");
        assert_eq!(now.status, status);
    }
}

/// A purge that asks for a live status, a batch size out of range or a cutoff past the
/// limits is refused before anything is deleted.
pub async fn purge_refuses_bad_filters(setup: impl Setup) {
    let store = setup.store().await;
    let done = create_completed(&store).await;
    for status in [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Sleeping,
        RunStatus::Paused,
    ] {
        assert_err!(
            store
                .retention().unwrap().purge_runs(&everything().statuses([RunStatus::Completed, status]))
                .await,
            StoreError::NotTerminal { status: refused } if *refused == status
        );
    }
    for size in [0, tasks_core::retention::MAX_PURGE_BATCH + 1] {
        assert_err!(
            store
                .retention()
                .unwrap()
                .purge_runs(&everything().batch_size(size))
                .await,
            StoreError::Limit(LimitError::OutOfRange {
                field: Field::BatchSize,
                ..
            })
        );
    }
    let too_old = tasks_core::limits::MAX_DURATION + Duration::from_secs(1);
    assert_err!(
        store
            .retention()
            .unwrap()
            .purge_runs(&PurgeRuns::older_than(too_old))
            .await,
        StoreError::Limit(LimitError::DurationTooLong { .. })
    );
    assert!(exists(&store, &done).await, "nothing was deleted");
}

/// A purge deletes only its own namespace's runs.
pub async fn purge_is_scoped_to_namespace(setup: impl Setup) {
    let store = setup.store().await;
    let other = store.scoped(&unique_namespace()).unwrap();
    let mine = create_completed(&store).await;
    let theirs = create_completed(other.contract()).await;

    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&store, &mine).await);
    assert!(
        exists(other.contract(), &theirs).await,
        "another namespace's run stays"
    );
    assert_eq!(
        other
            .contract()
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        1
    );
}

/// Retries racing purges of the same failed runs: every run ends either retried and live
/// (the retry won, and the purge's fenced delete kept it) or deleted with its retry refused
/// as not found (the purge won). Never retried and deleted.
pub async fn purge_racing_retries_keeps_retried_runs(setup: impl Setup) {
    let store = Arc::new(setup.store().await);
    let mut failed = Vec::new();
    for _ in 0..24 {
        failed.push(create_failed(&*store).await);
    }
    let purger = {
        let store = store.clone();
        tokio::spawn(async move {
            let small = everything().batch_size(3);
            let mut purged = 0;
            loop {
                let batch = store.retention().unwrap().purge_runs(&small).await.unwrap();
                purged += batch;
                if batch == 0 {
                    return purged;
                }
            }
        })
    };
    let retries: Vec<_> = failed
        .iter()
        .map(|run| {
            let store = store.clone();
            let id = run.id;
            tokio::spawn(async move { (id, store.lifecycle().unwrap().retry_run(id).await) })
        })
        .collect();
    let mut retried = 0;
    for retry in retries {
        let (id, outcome) = retry.await.unwrap();
        let now = store.get_run(id).await.unwrap();
        match outcome {
            Ok(run) => {
                assert_eq!(run.status, RunStatus::Pending);
                let now = now.expect("a retried run must survive the purge");
                assert!(!now.status.is_terminal(), "still live: {now:?}");
                retried += 1;
            }
            Err(StoreError::RunNotFound { .. }) => {
                assert_eq!(now, None, "a refused retry means the run was purged");
            }
            Err(error) => panic!("unexpected retry error: {error:?}"),
        }
    }
    let purged = purger.await.unwrap();
    // The purge may finish before some retries start; those are then refused.
    let gone = failed.len() as u64 - retried;
    assert!(purged >= gone, "purged {purged}, retries refused {gone}");
    assert_eq!(purged + retried, failed.len() as u64);
}

/// One caller takes the retention turn per period: the others get `None` until it is due
/// again, and turns are counted per namespace.
pub async fn retention_turn_goes_to_one_worker_per_period(setup: impl Setup) {
    let store = Arc::new(setup.store().await);
    let period = Duration::from_millis(1_500);
    let first = new_worker();
    let second = new_worker();
    assert_eq!(
        store
            .retention()
            .unwrap()
            .take_retention_turn(&first, period)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .retention()
            .unwrap()
            .take_retention_turn(&second, period)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .retention()
            .unwrap()
            .take_retention_turn(&first, period)
            .await
            .unwrap(),
        None
    );

    // Another namespace has turns of its own.
    let other = store.scoped(&unique_namespace()).unwrap();
    assert_eq!(
        other
            .contract()
            .retention()
            .unwrap()
            .take_retention_turn(&second, period)
            .await
            .unwrap(),
        Some(1)
    );

    tokio::time::sleep(period + Duration::from_millis(300)).await;
    // Due again: many concurrent callers, one winner.
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .retention()
                    .unwrap()
                    .take_retention_turn(&new_worker(), period)
                    .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for caller in callers {
        if let Some(turn) = caller.await.unwrap().unwrap() {
            won.push(turn);
        }
    }
    assert_eq!(won, [2], "exactly one caller takes the second turn");

    assert_err!(
        store
            .retention()
            .unwrap()
            .take_retention_turn(
                &first,
                tasks_core::limits::MAX_DURATION + Duration::from_secs(1)
            )
            .await,
        StoreError::Limit(_)
    );
}

/// A finished child run is kept while its parent is live (the parent may still join it and
/// read its outcome), and goes with the next purge once the parent finished.
pub async fn purge_keeps_children_of_live_parents(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let started = store
        .children()
        .unwrap()
        .start_child(tasks_core::StartChild {
            call: None,
            run_id: parent.id,
            holder: holder(&parent),
            step_name: "child".into(),
            child: tasks_core::CreateRun::new(unique_name()),
            on_parent_cancel: tasks_core::ParentCancel::Cascade,
        })
        .await
        .unwrap();
    let child = store
        .lifecycle()
        .unwrap()
        .cancel_run(started.child.id)
        .await
        .unwrap();
    assert_eq!(child.status, RunStatus::Canceled);
    let unrelated = create_canceled(&store).await;

    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        1
    );
    assert!(!exists(&store, &unrelated).await);
    assert!(
        exists(&store, &child).await,
        "a finished child of a live parent is kept"
    );

    store
        .complete_run(parent.id, &holder(&parent), json!("out"))
        .await
        .unwrap();
    assert_eq!(
        store
            .retention()
            .unwrap()
            .purge_runs(&everything())
            .await
            .unwrap(),
        2
    );
    assert!(!exists(&store, &child).await);
    assert!(!exists(&store, &parent).await);
}
