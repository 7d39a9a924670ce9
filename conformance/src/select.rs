//! Selects: [`SelectStore::wait_for_any`]. A look answers which topics hold an unconsumed
//! event and which children have ended, consuming and completing nothing; with nothing
//! ready it parks the run so that a send on one of its topics (any topic, for several),
//! the end of one of its children or its deadline wakes it.

#[cfg(doc)]
use tasks_core::SelectStore;
use tasks_core::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks_core::select::{AnyWait, Readiness, WaitForAny};
use tasks_core::{
    CreateRun, EventTarget, ParentCancel, RunStatus, SendEvent, StartChild, Store, StoreError,
    WorkflowRun, limits,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// The look of the claimed run `run` at `topics` and the children of `child_steps`.
fn look(run: &WorkflowRun, topics: &[&str], child_steps: &[&str], park: bool) -> WaitForAny {
    WaitForAny {
        run_id: run.id,
        holder: holder(run),
        topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        child_steps: child_steps.iter().map(|c| (*c).to_owned()).collect(),
        until: limits::LATEST,
        park,
    }
}

async fn send<S: Store + ?Sized>(store: &S, run_id: Uuid, topic: &str) -> bool {
    store
        .events()
        .unwrap()
        .send_event(SendEvent {
            target: EventTarget::Run(run_id),
            topic: topic.to_owned(),
            payload: json!({ "topic": topic }),
            dedup_key: None,
        })
        .await
        .expect("send_event")
        .woke
}

#[track_caller]
fn ready(outcome: AnyWait) -> Readiness {
    match outcome {
        AnyWait::Ready(readiness) => readiness,
        AnyWait::Parked(run) => panic!("expected something ready, the run parked: {run:?}"),
    }
}

#[track_caller]
fn parked(outcome: AnyWait) -> WorkflowRun {
    match outcome {
        AnyWait::Parked(run) => *run,
        AnyWait::Ready(readiness) => panic!("expected the run to park: {readiness:?}"),
    }
}

/// Claims the one claimable run of the store again (after a wake-up).
async fn reclaim<S: Store + ?Sized>(store: &S, id: Uuid) -> WorkflowRun {
    let claimed = store
        .claim_run(&new_worker(), LONG_LEASE)
        .await
        .unwrap()
        .expect("the run should be claimable");
    assert_eq!(claimed.id, id);
    claimed
}

/// A look answers the topics holding an unconsumed event, in the order asked, and
/// consumes nothing; the run stays running.
pub async fn select_answers_the_topics_with_events(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    send(&store, run.id, "b").await;
    send(&store, run.id, "a").await;
    let readiness = ready(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&run, &["a", "b", "c"], &[], true))
            .await
            .unwrap(),
    );
    assert_eq!(readiness.topics, vec!["a".to_owned(), "b".to_owned()]);
    assert!(readiness.children.is_empty());
    assert_near_now(Some(readiness.now), "the store's clock");
    let events = store.events().unwrap().list_events(run.id).await.unwrap();
    assert!(events.iter().all(|event| event.consumed_at.is_none()));
    assert!(store.step_history(run.id).await.unwrap().is_empty());
    let still = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(still.status, RunStatus::Running);
    // Only looking, with nothing ready, does not park either.
    let empty = ready(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&run, &["c"], &[], false))
            .await
            .unwrap(),
    );
    assert!(empty.topics.is_empty());
    assert_eq!(
        store.get_run(run.id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// With nothing ready the run parks (sleeping, no worker, until the deadline). Parked on
/// several topics, a send on any topic wakes it; the next look finds the event.
pub async fn select_on_several_topics_is_woken_by_any(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let parked_run = parked(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&run, &["a", "b"], &[], true))
            .await
            .unwrap(),
    );
    assert_eq!(parked_run.status, RunStatus::Sleeping);
    assert_eq!(parked_run.worker_id, None);
    assert_eq!(parked_run.available_at, Some(limits::LATEST));
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none(),
        "a parked select is not claimable"
    );
    assert!(
        send(&store, run.id, "b").await,
        "a send on its second topic"
    );
    let woken = store.get_run(run.id).await.unwrap().unwrap();
    assert_near_now(woken.available_at, "available_at after the send");
    let again = reclaim(&store, run.id).await;
    let readiness = ready(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&again, &["a", "b"], &[], true))
            .await
            .unwrap(),
    );
    assert_eq!(readiness.topics, vec!["b".to_owned()]);
}

/// Parked on one topic, a send on another topic does not wake the run; after a look that
/// found something, the run no longer waits on its topic: a later durable sleep is not
/// woken by a send on it.
pub async fn select_on_one_topic_and_its_wait_is_cleared(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    parked(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&run, &["a"], &[], true))
            .await
            .unwrap(),
    );
    assert!(!send(&store, run.id, "z").await, "another topic");
    assert!(send(&store, run.id, "a").await, "its topic");
    let again = reclaim(&store, run.id).await;
    ready(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&again, &["a"], &[], true))
            .await
            .unwrap(),
    );
    let until = chrono::Utc::now() + chrono::TimeDelta::hours(1);
    store
        .sleep_run(again.id, &holder(&again), until)
        .await
        .unwrap();
    assert!(
        !send(&store, run.id, "a").await,
        "a durable sleep after the select is not woken by its topic"
    );
}

/// A select parks until its deadline, and is claimable once it has passed; the next look
/// answers with the store's clock past the deadline.
pub async fn select_parks_until_its_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let until = chrono::Utc::now() + chrono::TimeDelta::milliseconds(600);
    let parked_run = parked(
        store
            .select()
            .unwrap()
            .wait_for_any(WaitForAny {
                until,
                ..look(&run, &["a"], &[], true)
            })
            .await
            .unwrap(),
    );
    assert_eq!(parked_run.available_at.map(micros), Some(micros(until)));
    sleep_past(until).await;
    let again = reclaim(&store, run.id).await;
    let readiness = ready(
        store
            .select()
            .unwrap()
            .wait_for_any(WaitForAny {
                until,
                ..look(&again, &["a"], &[], true)
            })
            .await
            .unwrap(),
    );
    assert!(readiness.topics.is_empty());
    assert!(readiness.now >= until, "the deadline is due at the look");
}

/// A select waiting for a child parks until the child ends, which wakes it; the next look
/// answers the child, whose step it does not complete. An unknown child step is refused.
pub async fn select_is_woken_by_a_child_that_ends(setup: impl Setup) {
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
        .unwrap();
    assert_err!(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&parent, &[], &["child/unknown"], true))
            .await,
        StoreError::UnknownStep { .. }
    );
    parked(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&parent, &["a"], &["child/a"], true))
            .await
            .unwrap(),
    );
    store
        .lifecycle()
        .unwrap()
        .cancel_run(child.child.id)
        .await
        .unwrap();
    let woken = store.get_run(parent.id).await.unwrap().unwrap();
    assert_eq!(woken.status, RunStatus::Sleeping);
    assert_near_now(woken.available_at, "available_at after the child's end");
    let again = reclaim(&store, parent.id).await;
    let readiness = ready(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&again, &["a"], &["child/a"], true))
            .await
            .unwrap(),
    );
    assert_eq!(readiness.children, vec!["child/a".to_owned()]);
    let steps = store.step_history(parent.id).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(
        steps[0].status,
        tasks_core::StepStatus::Running,
        "a look completes no child step"
    );
}

/// A look is fenced on the run's lease: a holder of an earlier claim is refused and the run
/// is left as it was; a bad topic is refused before any write.
pub async fn select_is_fenced_and_checked(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let stale = WaitForAny {
        holder: Holder::new("someone-else", run.claim_epoch),
        ..look(&run, &["a"], &[], true)
    };
    assert!(store.select().unwrap().wait_for_any(stale).await.is_err());
    assert_err!(
        store
            .select()
            .unwrap()
            .wait_for_any(look(&run, &[""], &[], true))
            .await,
        StoreError::Limit(_)
    );
    let still = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(still.status, RunStatus::Running);
    assert_eq!(still.worker_id, run.worker_id);
}
