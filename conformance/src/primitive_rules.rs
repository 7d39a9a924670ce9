//! The rules of the durable primitives, held against the store like `rules`: the event
//! wait (`events::wait_step`), state versions (`state::next_version`), the schedule put
//! (`schedule::keeps_slot`), a parent's countdown (`transition::parent_countdown`) and an
//! idempotency key's lapse (`idempotency::KeyHold`), each case's expected outcome computed
//! by the core's rule.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::json;
use tasks_core::events::{WaitStep, decode_output, wait_step};
use tasks_core::idempotency::{IdempotencyScope, KeyHold};
use tasks_core::schedule::keeps_slot;
use tasks_core::state::next_version;
use tasks_core::transition::parent_countdown;
use tasks_core::{
    CatchUp, ChildWait, ClaimFilter, CreateRun, EventTarget, EventWait, FailRun, LeaseStore,
    NewSchedule, ParentCancel, RunStatus, RunStore, SendEvent, SetState, StartChild, Store,
    WaitForChildren, WaitForEvent, WorkflowRun,
};

use super::Setup;
use super::support::*;

fn fail(run: &WorkflowRun, force: bool) -> FailRun {
    FailRun {
        force,
        ..fail_params(run, "boom")
    }
}

/// An event wait consumes, parks or times out as `wait_step` decides, from whether an event
/// was sent before it and its timeout.
pub async fn event_waits_follow_the_core_rule(setup: impl Setup) {
    let store = setup.store().await;
    let events = store.events().unwrap();
    // (an event sent before the wait, the wait's timeout)
    let cases = [
        (true, Some(Duration::ZERO)),
        (true, Some(Duration::from_secs(60))),
        (false, Some(Duration::from_secs(60))),
        (false, Some(Duration::ZERO)),
        (false, None),
    ];
    for (sent, timeout) in cases {
        let run = create_claimed(&store).await;
        if sent {
            events
                .send_event(SendEvent {
                    target: EventTarget::Run(run.id),
                    topic: "t".into(),
                    payload: json!(1),
                    dedup_key: None,
                })
                .await
                .unwrap();
        }
        let now = Utc::now();
        // No timeout waits until the latest instant a store holds.
        let until = timeout.map_or(tasks_core::limits::LATEST, |timeout| {
            now + TimeDelta::from_std(timeout).unwrap()
        });
        let expected = wait_step(sent, until, now);
        let outcome = events
            .wait_for_event(WaitForEvent {
                call: None,
                run_id: run.id,
                holder: holder(&run),
                step_name: "event/t".into(),
                topic: "t".into(),
                timeout,
            })
            .await
            .unwrap();
        let what = format!("sent {sent}, timeout {timeout:?}");
        match (expected, outcome) {
            (WaitStep::Park, EventWait::Parked(run)) => {
                assert_eq!(run.status, RunStatus::Sleeping, "{what}");
            }
            (WaitStep::Consume, EventWait::Done(attempt)) => {
                let output = attempt.output.unwrap_or_default();
                assert!(
                    decode_output(&output).unwrap().is_some(),
                    "{what}: {output}"
                );
            }
            (WaitStep::TimeOut, EventWait::Done(attempt)) => {
                let output = attempt.output.unwrap_or_default();
                assert!(
                    decode_output(&output).unwrap().is_none(),
                    "{what}: {output}"
                );
            }
            (expected, outcome) => panic!("{what}: expected {expected:?}, got {outcome:?}"),
        }
    }
}

/// Each publication of a key gives it the version `next_version` says, from 1, key by key.
pub async fn state_versions_follow_the_core_rule(setup: impl Setup) {
    let store = setup.store().await;
    let state = store.published_state().unwrap();
    let run = create_claimed(&store).await;
    let mut last = [None, None];
    for (step, key) in [(0, 0), (1, 0), (2, 1), (3, 0), (4, 1)] {
        let set = state
            .set_state(SetState {
                run_id: run.id,
                holder: holder(&run),
                step_name: format!("state/{step}"),
                key: format!("key-{key}"),
                value: json!(step),
                call: None,
            })
            .await
            .unwrap();
        assert!(set.published);
        let stored = state
            .get_state(run.id, &format!("key-{key}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.version, next_version(last[key]), "step {step}");
        last[key] = Some(stored.version);
    }
}

/// A change a put makes to a schedule.
type Change = fn(&mut NewSchedule);

/// A put over a schedule keeps its slot exactly when `keeps_slot` says: an unchanged cron
/// expression and timezone, whatever else changed.
pub async fn schedule_put_keeps_the_slot_as_the_core_rule_says(setup: impl Setup) {
    let store = setup.store().await;
    let schedules = store.schedules().unwrap();
    let first = |now: chrono::DateTime<Utc>| Some(micros(now + TimeDelta::hours(1)));
    let again = |now: chrono::DateTime<Utc>| Some(micros(now + TimeDelta::hours(2)));
    let base = NewSchedule {
        name: "nightly".into(),
        workflow_name: unique_name(),
        version: None,
        cron: "0 0 * * * *".into(),
        timezone: "UTC".into(),
        input: json!({}),
        catch_up: CatchUp::default(),
    };
    let changes: [(&str, Change); 5] = [
        ("nothing", |_| {}),
        ("the input", |new| new.input = json!({ "changed": true })),
        ("the workflow", |new| new.workflow_name = "other".into()),
        ("the cron expression", |new| {
            new.cron = "0 30 * * * *".into()
        }),
        ("the timezone", |new| new.timezone = "Europe/Paris".into()),
    ];
    for (index, (what, change)) in changes.into_iter().enumerate() {
        let name = format!("schedule-{index}");
        let created = schedules
            .create_schedule(
                NewSchedule {
                    name: name.clone(),
                    ..base.clone()
                },
                &first,
            )
            .await
            .unwrap();
        let mut new = NewSchedule {
            name,
            ..base.clone()
        };
        change(&mut new);
        let kept = keeps_slot(&created.cron, &created.timezone, &new);
        let put = schedules.put_schedule(new, &again).await.unwrap();
        assert_eq!(
            put.next_slot == created.next_slot,
            kept,
            "a put that changed {what}: {:?} then {:?}",
            created.next_slot,
            put.next_slot
        );
    }
}

/// The claim of the run of workflow `name` (the only one), by a new worker.
async fn claim_of<S: Store + ?Sized>(store: &S, name: &str) -> WorkflowRun {
    let filter = ClaimFilter {
        queues: None,
        workflows: Some(vec![name.to_owned()]),
    };
    let mut claimed = store
        .claim_runs_filtered(&new_worker(), LONG_LEASE, 1, &filter)
        .await
        .unwrap();
    claimed.pop().expect("the run is claimable").run
}

/// A parent parked on its children is counted down by each child's end, however it ends,
/// and wakes (claimable now) exactly when `parent_countdown` says: with its last child.
pub async fn parent_countdown_follows_the_core_rule(setup: impl Setup) {
    let store = setup.store().await;
    let children = store.children().unwrap();
    let parent = create_claimed(&store).await;
    let steps = ["child/a", "child/b", "child/c"];
    let mut workflows = Vec::new();
    for step in steps {
        let workflow = unique_name();
        children
            .start_child(StartChild {
                call: None,
                run_id: parent.id,
                holder: holder(&parent),
                step_name: step.to_owned(),
                child: CreateRun::new(workflow.clone()),
                on_parent_cancel: ParentCancel::Cascade,
            })
            .await
            .unwrap();
        workflows.push(workflow);
    }
    let parked = match children
        .wait_for_children(WaitForChildren {
            run_id: parent.id,
            holder: holder(&parent),
            step_names: steps.iter().map(|step| (*step).to_owned()).collect(),
        })
        .await
        .unwrap()
    {
        ChildWait::Parked(run) => run,
        ChildWait::Done(steps) => panic!("no child has ended: {steps:?}"),
    };
    let mut awaiting = u32::try_from(steps.len()).unwrap();
    let mut status = parked.status;
    for (index, workflow) in workflows.iter().enumerate() {
        let child = claim_of(&store, workflow).await;
        match index {
            0 => {
                store
                    .complete_run(child.id, &holder(&child), json!(1))
                    .await
                    .unwrap();
            }
            1 => {
                store
                    .lifecycle()
                    .unwrap()
                    .cancel_run(child.id)
                    .await
                    .unwrap();
            }
            _ => {
                store.fail_run(fail(&child, true)).await.unwrap();
            }
        }
        let (left, wakes) = parent_countdown(awaiting, status, 1);
        let now = store.get_run(parent.id).await.unwrap().unwrap();
        let woken = now.available_at.is_some_and(|at| at <= Utc::now());
        assert_eq!(
            woken, wakes,
            "child {index} ended, {awaiting} awaited: woken {woken}, the rule says {wakes}"
        );
        awaiting = left;
        status = now.status;
    }
}

/// A start with an idempotency key finds the run holding it, or creates a new run once the
/// holder's hold lapsed, as `KeyHold::lapsed` says: for ever, while active, for a time.
pub async fn idempotency_keys_lapse_as_the_core_rule_says(setup: impl Setup) {
    let store = setup.store().await;
    let ttl = Duration::from_millis(300);
    let cases = [
        (IdempotencyScope::ForEver, false),
        (IdempotencyScope::ForEver, true),
        (IdempotencyScope::WhileActive, false),
        (IdempotencyScope::WhileActive, true),
        (IdempotencyScope::Ttl(ttl), false),
    ];
    for (scope, finish) in cases {
        let workflow = unique_name();
        let start = || CreateRun {
            idempotency_key: Some("the-key".into()),
            idempotency_scope: scope,
            ..CreateRun::new(workflow.clone())
        };
        let holder = store.create_run(start()).await.unwrap();
        let hold = match scope {
            IdempotencyScope::WhileActive => KeyHold::WhileActive,
            IdempotencyScope::Ttl(ttl) => {
                let until = holder.created_at + TimeDelta::from_std(ttl).unwrap();
                sleep_past(until).await;
                KeyHold::Until(until)
            }
            _ => KeyHold::ForEver,
        };
        if finish {
            let claimed = claim_of(&store, &workflow).await;
            store
                .complete_run(claimed.id, &super::support::holder(&claimed), json!(null))
                .await
                .unwrap();
        }
        let status = store.get_run(holder.id).await.unwrap().unwrap().status;
        let lapsed = hold.lapsed(status, Utc::now());
        let second = store.create_run(start()).await.unwrap();
        assert_eq!(
            second.id != holder.id,
            lapsed,
            "{scope:?}, holder {status:?}: a new run iff the hold lapsed"
        );
    }
}
