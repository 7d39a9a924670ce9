//! The fence of a worker's writes is its claim, not its worker id: every claim of a run
//! increments the run's claim epoch, and a write carrying the [`Holder`] of an earlier claim
//! is refused, even when the same worker claimed the run again.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tasks_core::{
    CreateRun, FailRun, LeaseStore, ParentCancel, RecordStepAttempt, RunStatus, RunStore, SetState,
    StartChild, StepKind, StepStatus, StepStore, Store, StoreError, WaitForChildren, WaitForEvent,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A finished step attempt of `run`, written by `holder`.
fn record(run_id: Uuid, holder: &Holder, name: &str) -> RecordStepAttempt {
    RecordStepAttempt {
        id: Uuid::now_v7(),
        run_id,
        holder: holder.clone(),
        step_name: name.to_owned(),
        kind: StepKind::Function,
        config: json!({}),
        status: StepStatus::Completed,
        output: Some(json!(name)),
        error: None,
        args: None,
        elapsed: Duration::from_millis(1),
    }
}

/// Every claim takes a new claim epoch, whatever it takes the run from (a start, an expired
/// lease, a sleep that ended), and nothing else changes it.
pub async fn every_claim_takes_a_new_epoch(setup: impl Setup) {
    let store = setup.store().await;
    let created = create_pending(&store).await;
    assert_eq!(created.claim_epoch, 0, "a run never claimed");
    let worker = new_worker();
    let first = store
        .claim_run(&worker, SHORT_LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.id, created.id);
    assert_eq!(first.claim_epoch, 1, "the first claim");
    let extended = store
        .extend_lease(first.id, &holder(&first), SHORT_LEASE)
        .await
        .unwrap();
    assert_eq!(extended.claim_epoch, 1, "an extension is no claim");
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let taken_over = store.claim_run(&worker, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(
        taken_over.claim_epoch, 2,
        "the takeover of an expired lease"
    );
    let slept = store
        .sleep_run(taken_over.id, &holder(&taken_over), Utc::now())
        .await
        .unwrap();
    assert_eq!(slept.claim_epoch, 2, "a sleep keeps the epoch");
    let woken = store.claim_run(&worker, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(woken.claim_epoch, 3, "the wake-up from a sleep");
    let failed = store
        .fail_run(FailRun {
            force: true,
            ..fail_params(&woken, "boom")
        })
        .await
        .unwrap();
    assert_eq!(failed.claim_epoch, 3);
    let retried = store
        .lifecycle()
        .unwrap()
        .retry_run(failed.id)
        .await
        .unwrap();
    assert_eq!(
        retried.claim_epoch, 3,
        "an operator's retry never lowers it"
    );
    let again = store.claim_run(&worker, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(again.claim_epoch, 4);
    assert_eq!(store.get_run(again.id).await.unwrap(), Some(again));
}

/// A worker claims a run (epoch e1), its lease expires, and the same worker claims it again
/// (epoch e2). Every leased write carrying e1 is refused with `LeaseLost`, naming the
/// worker and e1, and changes nothing: not the run, not its steps, its state or its
/// children. The same writes carrying e2 go through.
pub async fn a_stale_claim_of_the_same_worker_cannot_write(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    let worker = new_worker();
    let first = store
        .claim_run(&worker, SHORT_LEASE)
        .await
        .unwrap()
        .unwrap();
    let id = first.id;
    // Written under the first claim: a running attempt (a durable sleep's) to finish later.
    let started = start_step(&store, &first, "sleep").await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = store.claim_run(&worker, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(second.id, id);
    assert_eq!(
        second.worker_id, first.worker_id,
        "the same worker claimed it again"
    );
    assert!(second.claim_epoch > first.claim_epoch);

    let (stale, current) = (holder(&first), holder(&second));
    let before = store.get_run(id).await.unwrap().unwrap();
    let history = store.step_history(id).await.unwrap();
    macro_rules! lease_lost {
        ($call:expr) => {
            assert_err!(
                $call,
                StoreError::LeaseLost { id: got, worker_id, claim_epoch }
                    if *got == id && *worker_id == worker && *claim_epoch == stale.claim_epoch
            )
        };
    }
    let later = Utc::now() + chrono::Duration::seconds(60);
    lease_lost!(store.extend_lease(id, &stale, LONG_LEASE).await);
    lease_lost!(store.sleep_run(id, &stale, later).await);
    lease_lost!(store.complete_run(id, &stale, json!("stale")).await);
    lease_lost!(
        store
            .complete_run_with_steps(id, &stale, json!("stale"), vec![record(id, &stale, "last")])
            .await
    );
    for force in [false, true] {
        lease_lost!(
            store
                .fail_run(FailRun {
                    force,
                    ..fail_params(&first, "stale")
                })
                .await
        );
    }
    lease_lost!(
        store
            .release_run(id, &stale, Duration::ZERO, json!(null))
            .await
    );
    lease_lost!(store.create_step_attempt(step_params(&first, "s2")).await);
    lease_lost!(
        store
            .complete_step_attempt(id, started.id, &stale, json!("stale"))
            .await
    );
    lease_lost!(
        store
            .record_step_attempt(record(id, &stale, "charge"))
            .await
    );
    lease_lost!(
        store
            .events()
            .unwrap()
            .wait_for_event(WaitForEvent {
                call: None,
                run_id: id,
                holder: stale.clone(),
                step_name: "event/approval".into(),
                topic: "approval".into(),
                timeout: None,
            })
            .await
    );
    lease_lost!(
        store
            .published_state()
            .unwrap()
            .set_state(SetState {
                call: None,
                run_id: id,
                holder: stale.clone(),
                step_name: "state/progress".into(),
                key: "progress".into(),
                value: json!(1),
            })
            .await
    );
    let child = |holder: &Holder| StartChild {
        call: None,
        run_id: id,
        holder: holder.clone(),
        step_name: "child/a".into(),
        child: CreateRun::new(unique_name()),
        on_parent_cancel: ParentCancel::Cascade,
    };
    lease_lost!(store.children().unwrap().start_child(child(&stale)).await);
    let wait = |holder: &Holder| WaitForChildren {
        run_id: id,
        holder: holder.clone(),
        step_names: vec!["child/a".into()],
    };
    lease_lost!(
        store
            .children()
            .unwrap()
            .wait_for_children(wait(&stale))
            .await
    );

    // Nothing changed.
    assert_eq!(store.get_run(id).await.unwrap(), Some(before));
    assert_eq!(store.step_history(id).await.unwrap(), history);
    let state = store.published_state().unwrap();
    assert_eq!(state.get_state(id, "progress").await.unwrap(), None);
    assert_eq!(
        store.count_runs(&[RunStatus::Pending]).await.unwrap(),
        [(RunStatus::Pending, 0)],
        "no child was started"
    );

    // The current claim writes.
    store
        .extend_lease(id, &current, LONG_LEASE)
        .await
        .expect("the current claim extends its lease");
    let finished = recorded(
        store
            .complete_step_attempt(id, started.id, &current, json!("slept"))
            .await
            .unwrap(),
    );
    assert_eq!(finished.status, StepStatus::Completed);
    recorded(
        store
            .record_step_attempt(record(id, &current, "charge"))
            .await
            .unwrap(),
    );
    state
        .set_state(SetState {
            call: None,
            run_id: id,
            holder: current.clone(),
            step_name: "state/progress".into(),
            key: "progress".into(),
            value: json!(1),
        })
        .await
        .expect("the current claim publishes");
    store
        .children()
        .unwrap()
        .start_child(child(&current))
        .await
        .expect("the current claim starts a child");
    let completed = store
        .complete_run_with_steps(
            id,
            &current,
            json!("fresh"),
            vec![record(id, &current, "last")],
        )
        .await
        .unwrap();
    assert_eq!(completed.status, RunStatus::Completed);
    assert_eq!(completed.output, Some(json!("fresh")));
    let names: Vec<String> = store
        .step_history(id)
        .await
        .unwrap()
        .into_iter()
        .map(|step| step.step_name)
        .collect();
    assert_eq!(
        names,
        ["sleep", "charge", "state/progress", "child/a", "last"]
    );
}
