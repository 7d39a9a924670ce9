//! Trace contexts: the W3C trace context a run is created with is stored with
//! it and comes back with every read and every claim, to every worker; a child run and a
//! fork keep theirs.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use serde_json::json;
use tasks_core::{
    CreateRun, ParentCancel, RecordStepAttempt, StartChild, StepKind, StepStatus, Store,
    TraceContext,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

fn trace(tracestate: Option<&str>) -> TraceContext {
    TraceContext::new(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tracestate.map(str::to_owned),
    )
    .expect("a valid trace context")
}

/// A run created with a trace context reads back with it, and every claim of the run hands
/// it to the claiming worker: the first, and the one that takes the run over after a lease
/// ran out. A run created without one has none; a trace context without `tracestate` keeps
/// none.
pub async fn trace_context_is_stored_and_claimed_with_the_run(setup: impl Setup) {
    let store = setup.store().await;
    let with_state = trace(Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
    let created = store
        .create_run(CreateRun {
            trace_context: Some(with_state.clone()),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_eq!(created.trace_context.as_ref(), Some(&with_state));
    assert_eq!(
        store
            .get_run(created.id)
            .await
            .unwrap()
            .unwrap()
            .trace_context,
        Some(with_state.clone())
    );

    let first = claim_one(&store, SHORT_LEASE).await;
    assert_eq!(first.id, created.id);
    assert_eq!(first.trace_context.as_ref(), Some(&with_state));
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let takeover = claim_one(&store, LONG_LEASE).await;
    assert_eq!(takeover.id, created.id);
    assert_ne!(takeover.worker_id, first.worker_id);
    assert_eq!(takeover.trace_context, Some(with_state));

    let without_state = store
        .create_run(CreateRun {
            trace_context: Some(trace(None)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let read = store.get_run(without_state.id).await.unwrap().unwrap();
    assert_eq!(read.trace_context, Some(trace(None)));
    assert_eq!(read.trace_context.unwrap().tracestate(), None);

    let untraced = create_pending(&store).await;
    assert_eq!(untraced.trace_context, None);
    assert_eq!(
        store
            .get_run(untraced.id)
            .await
            .unwrap()
            .unwrap()
            .trace_context,
        None
    );
}

/// A child run is stored with the trace context it was started with, and a fork keeps the
/// trace context of the run it was forked from.
pub async fn children_and_forks_keep_their_trace_context(setup: impl Setup) {
    let store = setup.store().await;
    store
        .create_run(CreateRun {
            trace_context: Some(trace(Some("a=1"))),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let parent = claim_one(&store, LONG_LEASE).await;
    let child_trace = trace(Some("child=1"));
    let started = store
        .children()
        .unwrap()
        .start_child(StartChild {
            run_id: parent.id,
            holder: holder(&parent),
            step_name: "child".to_owned(),
            child: CreateRun {
                trace_context: Some(child_trace.clone()),
                ..CreateRun::new(unique_name())
            },
            on_parent_cancel: ParentCancel::Cascade,
            call: None,
        })
        .await
        .unwrap();
    assert_eq!(started.child.trace_context.as_ref(), Some(&child_trace));
    assert_eq!(
        store
            .get_run(started.child.id)
            .await
            .unwrap()
            .unwrap()
            .trace_context,
        Some(child_trace)
    );

    store
        .record_step_attempt(RecordStepAttempt {
            id: Uuid::now_v7(),
            run_id: parent.id,
            holder: holder(&parent),
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
    let completed = store
        .complete_run(parent.id, &holder(&parent), json!("done"))
        .await
        .unwrap();
    let forked = store
        .lifecycle()
        .unwrap()
        .fork_run(completed.id, "a")
        .await
        .unwrap();
    assert_eq!(forked.trace_context, Some(trace(Some("a=1"))));
}
