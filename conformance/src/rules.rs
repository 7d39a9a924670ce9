//! The rules of `tasks_core::transition` and of the records, held against the store: each
//! case's expected outcome is computed by the core's pure rule (a transition's landing, the
//! attempt counting, the deadline give-up, the fork boundary, the purge's links; the
//! primitives' rules are in `primitive_rules`), so a store that keeps a rule in SQL is held
//! to the same definition as one that runs it in code.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::json;
use tasks_core::transition::{
    BACKED_OFF, CANCELED, CLAIMED, COMPLETED, EXPIRED, FAILED_FOR_GOOD, Landing, PAUSED, RELEASED,
    RESUMED, RETRIED, SLEEPING, claimed_attempts, first_execution, fork_boundary, gives_up,
    released_attempts, retry_after,
};
use tasks_core::{
    CreateRun, FailRun, LeaseStore, PurgeRuns, RecordStepAttempt, RetryPolicy, RunStatus, RunStore,
    StepKind, StepStatus, StepStore, Store, StoreError, WorkflowRun,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

#[track_caller]
fn assert_landed(run: &WorkflowRun, landing: &Landing, what: &str) {
    if let Some(difference) = landing.differs(run) {
        panic!("{what}: {difference} ({run:?})");
    }
}

fn fail(run: &WorkflowRun, force: bool) -> FailRun {
    FailRun {
        force,
        ..fail_params(run, "boom")
    }
}

/// Every transition leaves the run where its landing says: its status, its cleared
/// columns empty, its stamped columns set.
pub async fn transitions_land_where_the_core_says(setup: impl Setup) {
    let store = setup.store().await;
    let lifecycle = store.lifecycle().unwrap();

    let claimed = create_claimed(&store).await;
    assert_landed(&claimed, &CLAIMED, "a claim");
    let until = Utc::now() + TimeDelta::seconds(60);
    let slept = store
        .sleep_run(claimed.id, &holder(&claimed), until)
        .await
        .unwrap();
    assert_landed(&slept, &SLEEPING, "a sleep");

    let claimed = create_claimed(&store).await;
    let completed = store
        .complete_run(claimed.id, &holder(&claimed), json!({ "ok": true }))
        .await
        .unwrap();
    assert_landed(&completed, &COMPLETED, "a completion");

    let claimed = create_claimed(&store).await;
    let failed = store.fail_run(fail(&claimed, true)).await.unwrap();
    assert_landed(&failed, &FAILED_FOR_GOOD, "a forced failure");
    let retried = lifecycle.retry_run(failed.id).await.unwrap();
    assert_landed(&retried, &RETRIED, "an operator's retry");
    // Pending runs are canceled once checked, so that each claim below takes its own run.
    lifecycle.cancel_run(retried.id).await.unwrap();

    let claimed = create_claimed(&store).await;
    let backed_off = store.fail_run(fail(&claimed, false)).await.unwrap();
    assert_landed(&backed_off, &BACKED_OFF, "a failure that is retried");
    lifecycle.cancel_run(backed_off.id).await.unwrap();

    let claimed = create_claimed(&store).await;
    let released = store
        .release_run(claimed.id, &holder(&claimed), Duration::ZERO, json!({}))
        .await
        .unwrap();
    assert_landed(&released, &RELEASED, "a release");
    lifecycle.cancel_run(released.id).await.unwrap();

    for from in ["pending", "running", "sleeping"] {
        let run = match from {
            "pending" => create_pending(&store).await,
            "running" => create_claimed(&store).await,
            _ => create_sleeping(&store).await.1,
        };
        let paused = lifecycle.pause_run(run.id).await.unwrap();
        assert_landed(&paused, &PAUSED, &format!("a pause of a {from} run"));
        let resumed = lifecycle.resume_run(run.id).await.unwrap();
        assert_landed(&resumed, &RESUMED, &format!("a resume of a {from} run"));
        let canceled = lifecycle.cancel_run(run.id).await.unwrap();
        assert_landed(&canceled, &CANCELED, &format!("a cancel of a {from} run"));
    }

    let doomed = store
        .create_run(CreateRun {
            deadline_at: Some(Utc::now() + TimeDelta::milliseconds(300)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    sleep_past(doomed.deadline_at.unwrap()).await;
    store
        .claim_runs(&new_worker(), LONG_LEASE, 10)
        .await
        .unwrap();
    let expired = store.get_run(doomed.id).await.unwrap().unwrap();
    assert_landed(&expired, &EXPIRED, "a deadline's expiry");
}

/// A failed attempt is retried or fails for good as `retry_after` and `gives_up` decide:
/// the policy's attempts, a forced failure, and a retry that would start at or after the
/// deadline.
pub async fn fail_gives_up_as_the_core_rule_decides(setup: impl Setup) {
    let store = setup.store().await;
    // (attempts allowed, first backoff, deadline from now, forced)
    let cases: &[(u32, u64, Option<i64>, bool)] = &[
        (3, 1_000, None, false),
        (1, 1_000, None, false),
        (3, 1_000, None, true),
        (3, 1_000, Some(60), false),
        (3, 120_000, Some(60), false),
    ];
    for &(attempts, backoff_ms, deadline_s, force) in cases {
        let policy =
            RetryPolicy::new(attempts).with_initial_interval(Duration::from_millis(backoff_ms));
        let deadline = deadline_s.map(|s| Utc::now() + TimeDelta::seconds(s));
        let run = store
            .create_run(with_policy(policy, deadline))
            .await
            .unwrap();
        let claimed = claim_one(&store, LONG_LEASE).await;
        assert_eq!(claimed.id, run.id);
        let delay = retry_after(&claimed, force);
        let retry_at = delay.map(|delay| Utc::now() + TimeDelta::from_std(delay).unwrap());
        let expected = if gives_up(retry_at, claimed.deadline_at) {
            &FAILED_FOR_GOOD
        } else {
            &BACKED_OFF
        };
        let failed = store.fail_run(fail(&claimed, force)).await.unwrap();
        let what = format!(
            "{attempts} attempts, backoff {backoff_ms} ms, deadline {deadline_s:?} s, \
             forced {force}"
        );
        assert_landed(&failed, expected, &what);
    }
}

/// Claims count attempts as `claimed_attempts` says (a wake from a sleep continues the
/// attempt), a release gives one back (`released_attempts`), and a claim says it is the
/// first execution as `first_execution` does.
pub async fn attempts_count_as_the_core_rule_says(setup: impl Setup) {
    let store = setup.store().await;
    let run = store
        .create_run(with_policy(
            RetryPolicy::new(5).with_initial_interval(Duration::from_millis(1)),
            None,
        ))
        .await
        .unwrap();
    let mut before = run.clone();
    let claim = |before: &WorkflowRun| {
        let (status, attempts) = (before.status, before.attempts);
        let store = &store;
        async move {
            let worker = new_worker();
            let claimed = store
                .claim_runs(&worker, LONG_LEASE, 1)
                .await
                .unwrap()
                .pop()
                .expect("the run is claimable");
            assert_eq!(
                claimed.run.attempts,
                claimed_attempts(status, attempts),
                "a claim of a {status:?} run with {attempts} attempts"
            );
            // A claim sets `updated_at` to its clock.
            assert_eq!(
                claimed.first_execution,
                first_execution(&claimed.run, claimed.run.updated_at),
                "{:?}",
                claimed.run
            );
            claimed
        }
    };
    let first = claim(&before).await;
    assert!(first.first_execution);
    let released = store
        .release_run(run.id, &holder(&first.run), Duration::ZERO, json!({}))
        .await
        .unwrap();
    assert_eq!(released.attempts, released_attempts(first.run.attempts));
    before = released;
    let again = claim(&before).await;
    assert!(!again.first_execution, "a claim after a release");
    let until = Utc::now() + TimeDelta::milliseconds(200);
    before = store
        .sleep_run(run.id, &holder(&again.run), until)
        .await
        .unwrap();
    sleep_past(until).await;
    let woken = claim(&before).await;
    before = store.fail_run(fail(&woken.run, false)).await.unwrap();
    assert_eq!(before.status, RunStatus::Pending);
    sleep_past(before.available_at.unwrap()).await;
    let retried = claim(&before).await;
    assert_eq!(retried.run.attempts, 2);
}

/// A fork copies the attempts `fork_boundary` counts (those before the first attempt of its
/// step), and refuses a step the run never reached.
pub async fn fork_copies_what_the_core_boundary_says(setup: impl Setup) {
    let store = setup.store().await;
    let lifecycle = store.lifecycle().unwrap();
    let run = create_claimed(&store).await;
    let recorded = ["a", "b", "c:1", "b", "c"];
    for name in recorded {
        store
            .record_step_attempt(RecordStepAttempt {
                id: Uuid::now_v7(),
                run_id: run.id,
                holder: holder(&run),
                step_name: name.into(),
                kind: StepKind::Function,
                config: json!({}),
                status: StepStatus::Completed,
                output: Some(json!(name)),
                error: None,
                args: None,
                elapsed: Duration::from_millis(1),
            })
            .await
            .unwrap();
        // Distinct creation instants, so the attempts' order is their order of recording.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    store
        .complete_run(run.id, &holder(&run), json!(null))
        .await
        .unwrap();
    for from in ["a", "b", "c:1", "c", "d"] {
        match (
            fork_boundary(recorded, from),
            lifecycle.fork_run(run.id, from).await,
        ) {
            (Some(copied), Ok(fork)) => {
                let steps = store
                    .list_step_attempts(steps_page(&fork, 100))
                    .await
                    .unwrap()
                    .data;
                assert_eq!(
                    names(&steps),
                    recorded[..copied],
                    "a fork from {from} copies the attempts before its first"
                );
            }
            (None, Err(StoreError::UnknownStep { .. })) => {}
            (expected, outcome) => {
                panic!("a fork from {from}: expected {expected:?} attempts, got {outcome:?}")
            }
        }
    }
}

/// A purge of a forked run keeps its fork and clears the fork's link to it, keeping the
/// step it forked from (`unlink_purged_run`).
pub async fn purge_unlinks_as_the_core_rule_says(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    store
        .record_step_attempt(RecordStepAttempt {
            id: Uuid::now_v7(),
            run_id: run.id,
            holder: holder(&run),
            step_name: "a".into(),
            kind: StepKind::Function,
            config: json!({}),
            status: StepStatus::Completed,
            output: Some(json!(1)),
            error: None,
            args: None,
            elapsed: Duration::from_millis(1),
        })
        .await
        .unwrap();
    let source = store
        .complete_run(run.id, &holder(&run), json!(null))
        .await
        .unwrap();
    let fork = store
        .lifecycle()
        .unwrap()
        .fork_run(source.id, "a")
        .await
        .unwrap();
    let mut expected = fork.clone();
    tasks_core::transition::unlink_purged_run(&mut expected, |id| id == source.id, |_| false);
    let purged = store
        .retention()
        .unwrap()
        .purge_runs(&PurgeRuns {
            statuses: vec![RunStatus::Completed],
            ..PurgeRuns::older_than(Duration::ZERO)
        })
        .await
        .unwrap();
    assert_eq!(purged, 1, "the source only: the fork is pending");
    let kept = store.get_run(fork.id).await.unwrap().unwrap();
    assert_eq!(kept.forked_from_run_id, expected.forked_from_run_id);
    assert_eq!(kept.forked_from_step, expected.forked_from_step);
}
