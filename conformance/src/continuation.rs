//! Continue-as-new: [`ContinueStore::continue_run`] and [`ContinueStore::lineage_head`], and
//! events sent to a run that continued ([`EventStore::send_event`] follows the lineage).
//!
//! [`EventStore::send_event`]: tasks_core::EventStore::send_event

use std::time::Duration;

use serde_json::json;
#[cfg(doc)]
use tasks_core::ContinueStore;
use tasks_core::continuation::{ContinueRun, ContinuedRun};
use tasks_core::transition::CONTINUED;
use tasks_core::{
    Concurrency, CreateRun, EventTarget, ListRuns, ParentCancel, RunStatus, SendEvent, StartChild,
    Store, StoreError, WaitForEvent, WorkflowRun,
};
use tasks_core::{LeaseStore, RunStore, StepStore};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// The hand-over of the claimed run `run` to a successor with `input`.
fn continuing(run: &WorkflowRun, input: serde_json::Value) -> ContinueRun {
    ContinueRun {
        run_id: run.id,
        holder: holder(run),
        input,
    }
}

async fn continued<S: Store + ?Sized>(store: &S, params: ContinueRun) -> ContinuedRun {
    store
        .continuation()
        .unwrap()
        .continue_run(params)
        .await
        .expect("continue_run")
}

/// Claims the pending run `id`, which must be the only claimable run.
async fn claim<S: Store + ?Sized>(store: &S, id: Uuid) -> WorkflowRun {
    let claimed = store
        .claim_run(&new_worker(), LONG_LEASE)
        .await
        .unwrap()
        .expect("a claimable run");
    assert_eq!(claimed.id, id);
    claimed
}

fn send(target: impl Into<EventTarget>, topic: &str, n: u64) -> SendEvent {
    SendEvent {
        target: target.into(),
        topic: topic.to_owned(),
        payload: json!({ "n": n }),
        dedup_key: None,
    }
}

async fn count_runs<S: Store + ?Sized>(store: &S) -> usize {
    store
        .list_runs(ListRuns {
            limit: Some(100),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
        .len()
}

/// The run lands `completed` without an output, naming its successor, its idempotency
/// key handed over; the successor is pending with the new input, copies what the contract
/// says, and names the run it continued and the lineage. The lineage's head moves along.
pub async fn continue_run_hands_over_to_a_successor(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let first = store
        .create_run(CreateRun {
            version: Some("v2".into()),
            input: Some(json!({ "round": 1 })),
            context: Some(json!({ "tenant": "t" })),
            idempotency_key: Some("lineage-key".into()),
            priority: 3,
            concurrency: Some(Concurrency::new("key-a", 2)),
            queue: Some("continue/queue".into()),
            deadline_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
            ..CreateRun::new(&name)
        })
        .await
        .unwrap();
    let claimed = claim(&store, first.id).await;
    let ContinuedRun {
        finished,
        successor,
    } = continued(&store, continuing(&claimed, json!({ "round": 2 }))).await;

    assert_eq!(CONTINUED.differs(&finished), None, "{finished:?}");
    assert_eq!(finished.id, first.id);
    assert_eq!(finished.status, RunStatus::Completed);
    assert_eq!(finished.output, None);
    assert_eq!(finished.continued_as_run_id, Some(successor.id));
    assert_eq!(
        finished.idempotency_key, None,
        "the key moved to the successor"
    );
    assert_eq!(
        store.get_run(first.id).await.unwrap(),
        Some(finished.clone())
    );

    assert_ne!(successor.id, first.id);
    assert_eq!(successor.status, RunStatus::Pending);
    assert_eq!(successor.input, Some(json!({ "round": 2 })));
    assert_eq!(successor.workflow_name, name);
    assert_eq!(successor.version.as_deref(), Some("v2"));
    assert_eq!(successor.context, first.context);
    assert_eq!(successor.config, first.config);
    assert_eq!(successor.queue, "continue/queue");
    assert_eq!(successor.idempotency_key.as_deref(), Some("lineage-key"));
    assert_eq!(successor.attempts, 0);
    assert_eq!(
        successor.deadline_at, None,
        "a deadline is the finished run's"
    );
    assert_eq!(successor.parent_run_id, None);
    assert_eq!(successor.lineage_root_id, Some(first.id));
    assert_eq!(successor.lineage_id(), first.id);
    assert_eq!(successor.continued_from_run_id, Some(first.id));
    assert_eq!(successor.continued_as_run_id, None);
    assert_near_now(successor.available_at, "available_at");
    assert_eq!(
        store.get_run(successor.id).await.unwrap(),
        Some(successor.clone())
    );
    assert!(store.step_history(successor.id).await.unwrap().is_empty());
    // The successor keeps the key's concurrency limit.
    let keyed = store
        .list_runs(ListRuns {
            concurrency_key: Some("key-a".into()),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data;
    assert!(keyed.iter().any(|run| run.id == successor.id), "{keyed:?}");

    let lineage = store.continuation().unwrap();
    assert_eq!(
        lineage.lineage_head(first.id).await.unwrap(),
        Some(successor.clone())
    );
    // A second hand-over: the lineage is still the first run's.
    let second = claim(&store, successor.id).await;
    let third = continued(&store, continuing(&second, json!({ "round": 3 }))).await;
    assert_eq!(third.successor.lineage_root_id, Some(first.id));
    assert_eq!(third.successor.continued_from_run_id, Some(successor.id));
    assert_eq!(
        lineage
            .lineage_head(first.id)
            .await
            .unwrap()
            .map(|run| run.id),
        Some(third.successor.id)
    );
    assert_eq!(count_runs(&store).await, 3);
}

/// A hand-over is fenced like a completion: a stale claim, a run that is not running and an
/// unknown run are refused, and nothing is written.
pub async fn continue_run_is_fenced(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let mut stale = continuing(&claimed, json!(1));
    stale.holder = Holder::new(owner(&claimed), claimed.claim_epoch - 1);
    assert_err!(
        store.continuation().unwrap().continue_run(stale).await,
        StoreError::LeaseLost { .. }
    );
    let mut other = continuing(&claimed, json!(1));
    other.holder = Holder::new(new_worker(), claimed.claim_epoch);
    assert_err!(
        store.continuation().unwrap().continue_run(other).await,
        StoreError::LeaseLost { .. }
    );
    let mut unknown = continuing(&claimed, json!(1));
    unknown.run_id = Uuid::now_v7();
    assert_err!(
        store.continuation().unwrap().continue_run(unknown).await,
        StoreError::RunNotFound { .. }
    );
    let unchanged = store.get_run(claimed.id).await.unwrap().unwrap();
    assert_eq!(unchanged.status, RunStatus::Running);
    assert_eq!(unchanged.continued_as_run_id, None);
    assert_eq!(count_runs(&store).await, 1, "no successor was created");

    let done = continued(&store, continuing(&claimed, json!(1))).await;
    // A repeat of the same claim finds the run finished.
    assert_err!(
        store
            .continuation()
            .unwrap()
            .continue_run(continuing(&claimed, json!(1)))
            .await,
        StoreError::WrongState {
            status: RunStatus::Completed,
            ..
        }
    );
    let pending = done.successor;
    assert_err!(
        store
            .continuation()
            .unwrap()
            .continue_run(ContinueRun {
                run_id: pending.id,
                holder: Holder::new("w", 1),
                input: json!(2),
            })
            .await,
        StoreError::WrongState {
            status: RunStatus::Pending,
            ..
        }
    );
    assert_eq!(count_runs(&store).await, 2);
}

/// A child run cannot continue as new (its parent waits for its output); a value past the
/// limits is refused before anything is written.
pub async fn continue_run_refuses_children_and_bad_input(setup: impl Setup) {
    let store = setup.store().await;
    let parent = create_claimed(&store).await;
    let child = store
        .children()
        .unwrap()
        .start_child(StartChild {
            call: None,
            run_id: parent.id,
            holder: holder(&parent),
            step_name: "child/a".into(),
            child: CreateRun::new(unique_name()),
            on_parent_cancel: ParentCancel::Cascade,
        })
        .await
        .unwrap()
        .child;
    let child = claim(&store, child.id).await;
    assert_err!(
        store
            .continuation()
            .unwrap()
            .continue_run(continuing(&child, json!(1)))
            .await,
        StoreError::InvalidArgument(message) if message.contains("child")
    );
    assert_eq!(
        store.get_run(child.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
    let mut huge = json!(0);
    for _ in 0..=tasks_core::limits::MAX_JSON_DEPTH {
        huge = json!([huge]);
    }
    assert_err!(
        store
            .continuation()
            .unwrap()
            .continue_run(continuing(&parent, huge))
            .await,
        StoreError::Limit(_)
    );
    assert_eq!(
        store.get_run(parent.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert_eq!(count_runs(&store).await, 2, "no successor was created");
}

/// Events the finished run did not consume move to the successor; consumed ones stay with
/// the run that consumed them.
pub async fn unconsumed_events_move_to_the_successor(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let events = store.events().unwrap();
    events
        .send_event(send(claimed.id, "topic", 1))
        .await
        .unwrap();
    events
        .send_event(send(claimed.id, "topic", 2))
        .await
        .unwrap();
    events
        .send_event(send(claimed.id, "other", 3))
        .await
        .unwrap();
    // The run consumes the first event of `topic`.
    let wait = events
        .wait_for_event(WaitForEvent {
            run_id: claimed.id,
            holder: holder(&claimed),
            step_name: "event/topic".into(),
            topic: "topic".into(),
            timeout: None,
            call: None,
        })
        .await
        .unwrap();
    assert!(matches!(wait, tasks_core::EventWait::Done(_)), "{wait:?}");
    let done = continued(&store, continuing(&claimed, json!(null))).await;
    let kept = events.list_events(claimed.id).await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].payload, json!({ "n": 1 }));
    assert!(kept[0].consumed_at.is_some());
    let moved = events.list_events(done.successor.id).await.unwrap();
    let mut payloads: Vec<_> = moved
        .iter()
        .map(|event| event.payload["n"].clone())
        .collect();
    payloads.sort_by_key(|n| n.as_u64());
    assert_eq!(payloads, vec![json!(2), json!(3)]);
    assert!(moved.iter().all(|event| event.consumed_at.is_none()));
    assert!(
        moved
            .iter()
            .all(|event| event.workflow_run_id == done.successor.id)
    );
}

/// An event sent to a run that continued, by id or by the key its lineage holds, reaches
/// the lineage's current run; once the lineage finished for good, a send is refused.
pub async fn sends_to_a_continued_run_reach_the_lineage_head(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let first = store
        .create_run(CreateRun {
            idempotency_key: Some("k".into()),
            ..CreateRun::new(&name)
        })
        .await
        .unwrap();
    let claimed = claim(&store, first.id).await;
    let second = continued(&store, continuing(&claimed, json!(2)))
        .await
        .successor;
    let events = store.events().unwrap();
    let sent = events.send_event(send(first.id, "t", 1)).await.unwrap();
    assert_eq!(sent.event.workflow_run_id, second.id);
    let second = claim(&store, second.id).await;
    let third = continued(&store, continuing(&second, json!(3)))
        .await
        .successor;
    for target in [
        EventTarget::Run(first.id),
        EventTarget::Run(second.id),
        EventTarget::Run(third.id),
        EventTarget::Key {
            workflow_name: name.clone(),
            idempotency_key: "k".into(),
        },
    ] {
        let sent = events
            .send_event(send(target.clone(), "t", 2))
            .await
            .unwrap();
        assert_eq!(sent.event.workflow_run_id, third.id, "sent to {target:?}");
    }
    assert_eq!(events.list_events(third.id).await.unwrap().len(), 5);
    // The lineage ends: its last run completes for good.
    let third = claim(&store, third.id).await;
    store
        .complete_run(third.id, &holder(&third), json!("done"))
        .await
        .unwrap();
    assert_err!(
        events.send_event(send(first.id, "t", 3)).await,
        StoreError::WrongState {
            status: RunStatus::Completed,
            ..
        }
    );
}

/// A send to the id of a lineage's first run reaches the lineage's current run after the
/// first run was purged; a send to an id that names no run and no lineage is
/// `RunNotFound`.
pub async fn sends_to_a_purged_first_run_reach_the_lineage_head(setup: impl Setup) {
    let store = setup.store().await;
    let claimed = create_claimed(&store).await;
    let successor = continued(&store, continuing(&claimed, json!(2)))
        .await
        .successor;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let purged = store
        .retention()
        .unwrap()
        .purge_runs(&tasks_core::PurgeRuns::older_than(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        purged, 1,
        "the finished first run is purged, its successor lives"
    );
    assert_eq!(store.get_run(claimed.id).await.unwrap(), None);
    let events = store.events().unwrap();
    let sent = events.send_event(send(claimed.id, "t", 1)).await.unwrap();
    assert_eq!(sent.event.workflow_run_id, successor.id);
    assert_err!(
        events.send_event(send(Uuid::now_v7(), "t", 1)).await,
        StoreError::RunNotFound { .. }
    );
}

/// The head of a lineage nobody started is `None`; the head of a run that never continued
/// is itself.
pub async fn lineage_head_of_a_plain_run(setup: impl Setup) {
    let store = setup.store().await;
    let lineage = store.continuation().unwrap();
    assert_eq!(lineage.lineage_head(Uuid::now_v7()).await.unwrap(), None);
    let run = create_pending(&store).await;
    assert_eq!(lineage.lineage_head(run.id).await.unwrap(), Some(run));
}

/// Sends racing a hand-over: every send succeeds, and every event ends on the successor
/// (none consumed), whichever side of the hand-over it landed on.
pub async fn sends_racing_a_hand_over_are_not_lost(setup: impl Setup) {
    let store = std::sync::Arc::new(setup.store().await);
    for round in 0..5 {
        let claimed = create_claimed(&*store).await;
        let sends: Vec<_> = (0..8)
            .map(|n| {
                let store = store.clone();
                let target = claimed.id;
                tokio::spawn(async move {
                    if n % 2 == 1 {
                        tokio::time::sleep(Duration::from_millis(n)).await;
                    }
                    store
                        .events()
                        .unwrap()
                        .send_event(send(target, "race", n))
                        .await
                })
            })
            .collect();
        let done = continued(&*store, continuing(&claimed, json!(round))).await;
        for sent in sends {
            sent.await.unwrap().expect("a send racing the hand-over");
        }
        let events = store.events().unwrap();
        assert!(events.list_events(claimed.id).await.unwrap().is_empty());
        assert_eq!(
            events.list_events(done.successor.id).await.unwrap().len(),
            8,
            "round {round}"
        );
        // Done with this lineage: its run is the next claim's otherwise.
        let successor = claim(&*store, done.successor.id).await;
        store
            .complete_run(successor.id, &holder(&successor), json!(null))
            .await
            .unwrap();
    }
}
