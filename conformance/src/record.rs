//! Recording finished step attempts in one write (the worker's step path), and the marker
//! that tells a run's first execution from later ones.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks_core::{
    RecordStepAttempt, RetryPolicy, RunStatus, StepKind, StepStatus, StepUpdate, Store, StoreError,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

fn record_params(
    run: &tasks_core::WorkflowRun,
    holder: &Holder,
    status: StepStatus,
) -> RecordStepAttempt {
    RecordStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: holder.clone(),
        step_name: "charge".into(),
        kind: StepKind::Function,
        config: json!({ "attempt": 1 }),
        status,
        output: (status == StepStatus::Completed).then(|| json!({ "ok": true })),
        error: (status == StepStatus::Failed).then(|| error_value("declined")),
        args: None,
        elapsed: Duration::from_millis(250),
    }
}

/// A completed attempt is stored in one call, with its output and database times.
pub async fn record_step_attempt_stores_a_completed_attempt(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let attempt = recorded(
        store
            .record_step_attempt(record_params(&run, &holder(&run), StepStatus::Completed))
            .await
            .unwrap(),
    );
    assert_eq!(attempt.workflow_run_id, run.id);
    assert_eq!(attempt.step_name, "charge");
    assert_eq!(attempt.status, StepStatus::Completed);
    assert_eq!(attempt.output, Some(json!({ "ok": true })));
    assert_eq!(attempt.error, None);
    assert_eq!(attempt.config, json!({ "attempt": 1 }));
    assert_near_now(attempt.finished_at, "finished_at");
    let took = ms_between(attempt.started_at.unwrap(), attempt.finished_at.unwrap());
    assert!(
        (240..=1_000).contains(&took),
        "started 250 ms before finishing, got {took} ms"
    );
    assert_eq!(store.step_history(run.id).await.unwrap(), vec![attempt]);
}

/// Every kind of attempt a run records, with the call identity replay compares (in its
/// config, under `call`), reads back unchanged: a patch marker (`StepKind::Patch`) too.
pub async fn recorded_kinds_and_call_identities_round_trip(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let call = json!({
        "position": 3,
        "path": "shop::charge",
        "signature": "(&Order, u32) -> Result<Receipt, PaymentError>"
    });
    let step = recorded(
        store
            .record_step_attempt(RecordStepAttempt {
                id: Uuid::now_v7(),
                config: json!({ "attempt": 1, "call": call }),
                ..record_params(&run, &holder(&run), StepStatus::Completed)
            })
            .await
            .unwrap(),
    );
    let marker = recorded(
        store
            .record_step_attempt(RecordStepAttempt {
                id: Uuid::now_v7(),
                step_name: "patch:fraud-check".into(),
                kind: StepKind::Patch,
                config: json!({ "patch": "fraud-check" }),
                output: Some(json!(null)),
                ..record_params(&run, &holder(&run), StepStatus::Completed)
            })
            .await
            .unwrap(),
    );
    assert_eq!(marker.kind, StepKind::Patch);
    assert_eq!(step.config["call"], call);
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(history, vec![step, marker]);
}

/// A step call's arguments, as `#[step]` records them: every JSON shape, markers of
/// arguments not recorded, text in any script.
fn recorded_arguments() -> serde_json::Value {
    json!([
        { "name": "order", "value": { "id": 7, "lines": [1.5, -2, null, true], "note": "café ☕ \"q\"" } },
        { "name": "count", "value": 3 },
        { "name": "pool", "type": "sqlx::PgPool", "unrecorded": "not_serializable" },
        { "name": "(a, b)", "value": [[], {}] },
    ])
}

/// The arguments stored with an attempt read back equal, whichever write stored them (one
/// record, or the run's last steps with its completion), and `None` stays `None`.
pub async fn recorded_arguments_round_trip(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let mut params = record_params(&run, &holder(&run), StepStatus::Failed);
    params.args = Some(recorded_arguments());
    let attempt = recorded(store.record_step_attempt(params).await.unwrap());
    assert_eq!(attempt.args, Some(recorded_arguments()));

    let mut last = record_params(&run, &holder(&run), StepStatus::Completed);
    last.step_name = "ship".into();
    last.args = Some(json!([{ "name": "to", "value": "Zürich" }]));
    let unrecorded = RecordStepAttempt {
        id: Uuid::now_v7(),
        step_name: "secret".into(),
        ..record_params(&run, &holder(&run), StepStatus::Completed)
    };
    store
        .complete_run_with_steps(run.id, &holder(&run), json!(1), vec![last, unrecorded])
        .await
        .unwrap();
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(names(&history), vec!["charge", "ship", "secret"]);
    assert_eq!(history[0], attempt);
    assert_eq!(
        history[1].args,
        Some(json!([{ "name": "to", "value": "Zürich" }]))
    );
    assert_eq!(history[2].args, None);
}

/// Arguments past the limits are refused like any other value, and nothing is stored
/// (`#[step]` never sends such a list: it records a marker instead).
pub async fn recorded_arguments_past_the_limits_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let mut params = record_params(&run, &holder(&run), StepStatus::Completed);
    params.args = Some(
        json!([{ "name": "blob", "value": "x".repeat(tasks_core::limits::MAX_PAYLOAD_BYTES) }]),
    );
    match store.record_step_attempt(params).await {
        Err(StoreError::Limit(error)) => {
            assert_eq!(
                error.field(),
                tasks_core::limits::Field::StepArgs,
                "{error}"
            )
        }
        other => panic!("expected a limit error, got {other:?}"),
    }
    let mut params = record_params(&run, &holder(&run), StepStatus::Completed);
    params.args = Some(json!([{ "name": "nul", "value": "a\u{0}b" }]));
    assert_err!(
        store.record_step_attempt(params).await,
        StoreError::Limit(_)
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
}

/// A failed attempt is stored with its error.
pub async fn record_step_attempt_stores_a_failed_attempt(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let attempt = recorded(
        store
            .record_step_attempt(record_params(&run, &holder(&run), StepStatus::Failed))
            .await
            .unwrap(),
    );
    assert_eq!(attempt.status, StepStatus::Failed);
    assert_eq!(attempt.error, Some(error_value("declined")));
    assert_eq!(attempt.output, None);
}

/// Only finished statuses can be recorded.
pub async fn record_step_attempt_rejects_unfinished_statuses(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    assert_err!(
        store
            .record_step_attempt(record_params(&run, &holder(&run), StepStatus::Running))
            .await,
        StoreError::InvalidArgument(_)
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
}

/// Recording is fenced: another worker loses, a finished run refuses, a missing run is not
/// found, and nothing is written in any of these cases.
pub async fn record_step_attempt_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    assert_err!(
        store
            .record_step_attempt(record_params(
                &run,
                &Holder::new("someone-else", run.claim_epoch),
                StepStatus::Completed
            ))
            .await,
        StoreError::LeaseLost { id, .. } if *id == run.id
    );
    let completed = create_completed(&store).await;
    assert_err!(
        store
            .record_step_attempt(record_params(
                &completed,
                &holder(&completed),
                StepStatus::Completed
            ))
            .await,
        StoreError::WrongState {
            status: RunStatus::Completed,
            ..
        }
    );
    let mut ghost = run.clone();
    ghost.id = Uuid::now_v7();
    assert_err!(
        store
            .record_step_attempt(record_params(&ghost, &holder(&run), StepStatus::Completed))
            .await,
        StoreError::RunNotFound { .. }
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    assert!(store.step_history(completed.id).await.unwrap().is_empty());
}

/// A step that finishes after its run was paused or canceled is kept, marked like the run,
/// without its result; the outcome is `Interrupted`, not an error.
pub async fn record_step_attempt_after_pause_or_cancel_is_interrupted(setup: impl Setup) {
    let store = setup.store().await;
    for (status, step_status) in [
        (RunStatus::Paused, StepStatus::Paused),
        (RunStatus::Canceled, StepStatus::Canceled),
    ] {
        let run = create_claimed(&store).await;
        if status == RunStatus::Paused {
            store.lifecycle().unwrap().pause_run(run.id).await.unwrap();
        } else {
            store.lifecycle().unwrap().cancel_run(run.id).await.unwrap();
        }
        let update = store
            .record_step_attempt(record_params(&run, &holder(&run), StepStatus::Completed))
            .await
            .unwrap();
        assert_eq!(update, StepUpdate::Interrupted { run_status: status });
        let history = store.step_history(run.id).await.unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].status, step_status);
        assert_eq!(history[0].output, None);
        assert_eq!(history[0].step_name, "charge");
    }
}

/// A claim says whether it is the run's first execution (workers then skip loading a
/// history that cannot exist); no later claim says so: not after a sleep, a retry or a
/// pause. The first claim stamps `started_at` and `updated_at` with the same time and has
/// `attempts == 1`.
pub async fn first_claim_is_recognisable(setup: impl Setup) {
    let store = setup.store().await;
    let claim = |store| async move {
        let mut claimed = LeaseStore::claim_runs(store, &new_worker(), LONG_LEASE, 1)
            .await
            .expect("claim_runs");
        assert_eq!(claimed.len(), 1, "one claimable run expected");
        claimed.remove(0)
    };

    let created = create_pending(&store).await;
    let first = claim(&store).await;
    assert_eq!(first.run.id, created.id);
    assert!(first.first_execution, "first claim: {first:?}");
    assert_eq!(first.run.attempts, 1);
    assert_eq!(first.run.started_at, Some(first.run.updated_at));

    // Woken from a sleep: same attempt, but an older start.
    let claimed = first.run;
    let until = chrono::Utc::now() + chrono::Duration::milliseconds(300);
    store
        .sleep_run(claimed.id, &holder(&claimed), until)
        .await
        .unwrap();
    sleep_past(until).await;
    let woken = claim(&store).await;
    assert_eq!(woken.run.id, claimed.id);
    assert!(!woken.first_execution, "woken from a sleep: {woken:?}");

    // Retried after a failure.
    let immediate = RetryPolicy::new(3).with_initial_interval(Duration::ZERO);
    store
        .create_run(with_policy(immediate, None))
        .await
        .unwrap();
    let run = claim(&store).await.run;
    store.fail_run(fail_params(&run, "boom")).await.unwrap();
    let retried = claim(&store).await;
    assert_eq!(retried.run.id, run.id);
    assert!(!retried.first_execution, "retried: {retried:?}");

    // Resumed after a pause.
    let run = create_claimed(&store).await;
    store.lifecycle().unwrap().pause_run(run.id).await.unwrap();
    store.lifecycle().unwrap().resume_run(run.id).await.unwrap();
    let resumed = claim(&store).await;
    assert_eq!(resumed.run.id, run.id);
    assert!(!resumed.first_execution, "resumed: {resumed:?}");
}

/// A run completes together with its last finished attempts: the attempts are in the
/// history, oldest first, and the run is completed with its output.
pub async fn complete_run_with_steps_writes_steps_and_completes(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let mut second = record_params(&run, &holder(&run), StepStatus::Completed);
    second.step_name = "ship".into();
    second.output = Some(json!("shipped"));
    let done = store
        .complete_run_with_steps(
            run.id,
            &holder(&run),
            json!({ "receipt": 7 }),
            vec![
                record_params(&run, &holder(&run), StepStatus::Completed),
                second,
            ],
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.output, Some(json!({ "receipt": 7 })));
    assert_near_now(done.finished_at, "finished_at");
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(names(&history), vec!["charge", "ship"]);
    assert!(history.iter().all(|a| a.status == StepStatus::Completed));
    assert_eq!(history[0].output, Some(json!({ "ok": true })));
    assert_eq!(history[1].output, Some(json!("shipped")));
    assert_eq!(store.get_run(run.id).await.unwrap(), Some(done));

    // Without steps it is a plain completion.
    let plain = create_claimed(&store).await;
    let done = store
        .complete_run_with_steps(plain.id, &holder(&plain), json!(1), Vec::new())
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert!(store.step_history(plain.id).await.unwrap().is_empty());
}

/// The combined write is fenced like its parts: another worker's call writes nothing and
/// is `LeaseLost`; after a pause the attempts are kept marked paused (as a record would
/// be) and the completion is refused as `WrongState`.
pub async fn complete_run_with_steps_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    assert_err!(
        store
            .complete_run_with_steps(
                run.id,
                &Holder::new("someone-else", run.claim_epoch),
                json!(1),
                vec![record_params(
                    &run,
                    &Holder::new("someone-else", run.claim_epoch),
                    StepStatus::Completed
                )],
            )
            .await,
        StoreError::LeaseLost { id, .. } if *id == run.id
    );
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );

    store.lifecycle().unwrap().pause_run(run.id).await.unwrap();
    assert_err!(
        store
            .complete_run_with_steps(
                run.id,
                &holder(&run),
                json!(1),
                vec![record_params(&run, &holder(&run), StepStatus::Completed)],
            )
            .await,
        StoreError::WrongState {
            status: RunStatus::Paused,
            ..
        }
    );
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].status, StepStatus::Paused);
    assert_eq!(history[0].output, None);
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Paused
    );
}

/// Attempts given with a completion must be finished and belong to that run and worker;
/// otherwise nothing is written and the run keeps running.
pub async fn complete_run_with_steps_rejects_bad_attempts(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let other = create_claimed(&store).await;
    let bad = [
        record_params(&run, &holder(&run), StepStatus::Running),
        record_params(&other, &holder(&run), StepStatus::Completed),
        record_params(
            &run,
            &Holder::new("someone-else", run.claim_epoch),
            StepStatus::Completed,
        ),
        // The same worker by another claim.
        record_params(
            &run,
            &Holder::new(owner(&run), run.claim_epoch + 1),
            StepStatus::Completed,
        ),
    ];
    for attempt in bad {
        assert_err!(
            store
                .complete_run_with_steps(
                    run.id,
                    &holder(&run),
                    json!(1),
                    vec![
                        record_params(&run, &holder(&run), StepStatus::Completed),
                        attempt
                    ],
                )
                .await,
            StoreError::InvalidArgument(_)
        );
    }
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    assert!(store.step_history(other.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// A record carries an id chosen once, and a retry of it (the same id: its first try was
/// stored but its answer lost) stores nothing more: it is answered with the stored attempt,
/// while the run is still held and after the run completed alike.
pub async fn a_repeated_record_is_stored_once(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let params = record_params(&run, &holder(&run), StepStatus::Completed);
    let first = recorded(store.record_step_attempt(params.clone()).await.unwrap());
    assert_eq!(
        first.id, params.id,
        "the attempt is stored under the caller's id"
    );
    let again = recorded(store.record_step_attempt(params.clone()).await.unwrap());
    assert_eq!(again, first);
    assert_eq!(
        store.step_history(run.id).await.unwrap(),
        vec![first.clone()]
    );

    store
        .complete_run(run.id, &holder(&run), json!(1))
        .await
        .unwrap();
    let late = recorded(store.record_step_attempt(params).await.unwrap());
    assert_eq!(
        late, first,
        "a retry after the completion is answered the same"
    );
    assert_eq!(store.step_history(run.id).await.unwrap(), vec![first]);

    // A failed attempt likewise.
    let failing = create_claimed(&store).await;
    let params = record_params(&failing, &holder(&failing), StepStatus::Failed);
    let first = recorded(store.record_step_attempt(params.clone()).await.unwrap());
    let again = recorded(store.record_step_attempt(params).await.unwrap());
    assert_eq!(again, first);
    assert_eq!(store.step_history(failing.id).await.unwrap().len(), 1);
}

/// An attempt id the store holds for another run is refused, and nothing is written.
pub async fn a_record_with_another_runs_attempt_id_is_refused(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let other = create_claimed(&store).await;
    let params = record_params(&run, &holder(&run), StepStatus::Completed);
    store.record_step_attempt(params.clone()).await.unwrap();
    let mut stolen = record_params(&other, &holder(&other), StepStatus::Completed);
    stolen.id = params.id;
    assert_err!(
        store.record_step_attempt(stolen.clone()).await,
        StoreError::InvalidArgument(_)
    );
    assert!(store.step_history(other.id).await.unwrap().is_empty());
    let mut create = step_params(&other, "nap");
    create.id = params.id;
    assert_err!(
        store.create_step_attempt(create).await,
        StoreError::InvalidArgument(_)
    );
    assert!(store.step_history(other.id).await.unwrap().is_empty());
    assert_eq!(store.step_history(run.id).await.unwrap().len(), 1);
}

/// A completion retried after its steps were stored (by an earlier try that went through
/// the separate writes, or by the whole earlier try) stores each step once: the run
/// completes with its steps, and a retry of the completed call writes nothing more. For a
/// child run too, whose completion also wakes its parent.
pub async fn a_retried_completion_stores_its_steps_once(setup: impl Setup) {
    let store = setup.store().await;
    let plain = create_claimed(&store).await;
    let parent = create_claimed(&store).await;
    let child = store
        .children()
        .unwrap()
        .start_child(tasks_core::StartChild {
            call: None,
            run_id: parent.id,
            holder: holder(&parent),
            step_name: "child/a".into(),
            child: tasks_core::CreateRun::new(unique_name()),
            on_parent_cancel: tasks_core::ParentCancel::Cascade,
        })
        .await
        .unwrap()
        .child;
    let child = loop {
        let claimed = claim_one(&store, LONG_LEASE).await;
        if claimed.id == child.id {
            break claimed;
        }
    };
    for run in [plain, child] {
        let last = record_params(&run, &holder(&run), StepStatus::Completed);
        let mut ship = record_params(&run, &holder(&run), StepStatus::Completed);
        ship.step_name = "ship".into();
        // The first try stored its first step, then failed.
        store.record_step_attempt(last.clone()).await.unwrap();
        let steps = vec![last.clone(), ship.clone()];
        let done = store
            .complete_run_with_steps(run.id, &holder(&run), json!(2), steps.clone())
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        let history = store.step_history(run.id).await.unwrap();
        assert_eq!(names(&history), vec!["charge", "ship"], "run {}", run.id);
        assert_eq!(
            history.iter().map(|step| step.id).collect::<Vec<_>>(),
            vec![last.id, ship.id]
        );
        // The completion committed, and its answer was lost: the retry stores nothing.
        let _ = store
            .complete_run_with_steps(run.id, &holder(&run), json!(2), steps)
            .await;
        assert_eq!(store.step_history(run.id).await.unwrap(), history);
        assert_eq!(
            store.get_run(run.id).await.unwrap().unwrap().status,
            RunStatus::Completed
        );
    }
}

/// A running attempt (a durable sleep) created again under its id is the same attempt.
pub async fn a_repeated_create_is_stored_once(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let params = step_params(&run, "nap");
    let first = store.create_step_attempt(params.clone()).await.unwrap();
    assert_eq!(first.id, params.id);
    let again = store.create_step_attempt(params).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(store.step_history(run.id).await.unwrap(), vec![first]);
}
