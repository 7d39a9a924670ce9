//! End to end: events sent to runs executed by a real worker, against each store (Postgres
//! and SQLite): sent before the wait, after it (woken by a notification, not by polling), a
//! timeout, a duplicate send, JSON sends validated against the declared payload, refusals,
//! and memoization across the wait. (The SIGKILL case is in `e2e_recovery.rs`.)

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, bump, calls, client, worker};
use tasks::store::CreateRun;
use tasks::{
    ClientError, Event, EventTarget, RunStatus, StepKind, StepStatus, StoreError, WorkflowContext,
    WorkflowError, step, workflow,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Approval {
    approved: bool,
    by: String,
}

impl Event for Approval {
    const TOPIC: &'static str = "e2e-approval";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Note {
    text: String,
}

impl Event for Note {
    const TOPIC: &'static str = "e2e-note";
}

fn run_id() -> tasks::uuid::Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[step]
async fn before_wait() -> Result<u32, std::io::Error> {
    Ok(bump(run_id(), "before"))
}

#[step]
async fn after_wait(by: String) -> Result<String, std::io::Error> {
    bump(run_id(), "after");
    Ok(format!("approved by {by}"))
}

/// A step, a wait for an approval, a step.
#[workflow(name = "e2e-approval", events(Approval))]
async fn approval(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    before_wait().await?;
    let approval = ctx.wait_for_event::<Approval>().await?;
    if !approval.approved {
        return Err(WorkflowError::msg("rejected").non_retryable());
    }
    Ok(after_wait(approval.by).await?)
}

/// Waits for an approval for `ms` milliseconds.
#[workflow(name = "e2e-approval-timeout", events(Approval))]
async fn approval_timeout(
    ctx: WorkflowContext,
    ms: u64,
) -> Result<Option<Approval>, WorkflowError> {
    Ok(ctx
        .wait_for_event_timeout::<Approval>(Duration::from_millis(ms))
        .await?
        .received())
}

/// Two waits on one topic: the second gives up after half a second.
#[workflow(name = "e2e-notes", events(Note, Approval))]
async fn notes(ctx: WorkflowContext) -> Result<Vec<Option<String>>, WorkflowError> {
    let first = ctx.wait_for_event::<Note>().await?;
    let second = ctx
        .wait_for_event_timeout::<Note>(Duration::from_millis(500))
        .await?
        .received();
    Ok(vec![Some(first.text), second.map(|note| note.text)])
}

async fn an_event_sent_before_the_wait_is_delivered(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = approval::start(&client, ()).await.unwrap();
    let yes = Approval {
        approved: true,
        by: "ann".into(),
    };
    let sent = client.send_event(run.id(), &yes).await.unwrap();
    assert!(!sent.woke, "the run has not reached its wait");
    let worker = worker(&store).build().unwrap().spawn();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "approved by ann");
    let steps = run.steps().await.unwrap();
    let kinds: Vec<(&str, StepKind, StepStatus)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind, s.status))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("before_wait", StepKind::Function, StepStatus::Completed),
            ("event/e2e-approval", StepKind::Event, StepStatus::Completed),
            ("after_wait", StepKind::Function, StepStatus::Completed),
        ]
    );
    assert_eq!(calls(run.id(), "before"), 1);
    worker.shutdown().await;
}

async fn an_event_sent_after_the_wait_wakes_the_run_by_notification(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = approval::start(&client, ()).await.unwrap();
    // An idle poll far longer than the test: only the send's notification can wake the
    // worker in time. (Its first claim, at start, takes the run.)
    let worker = worker(&store)
        .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
        .build()
        .unwrap()
        .spawn();
    run.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(20))
        .await
        .unwrap();
    let sent = client
        .send_event(
            run.id(),
            &Approval {
                approved: true,
                by: "bo".into(),
            },
        )
        .await
        .unwrap();
    assert!(sent.woke);
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "approved by bo");
    // The step before the wait ran once, although the run was replayed after the wake-up.
    assert_eq!(calls(run.id(), "before"), 1);
    assert_eq!(calls(run.id(), "after"), 1);
    let finished = store.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(finished.attempts, 1, "waking continues the attempt");
    worker.shutdown().await;
}

async fn a_wait_times_out(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = approval_timeout::start(&client, 300).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, None);
    let steps = run.steps().await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].output, Some(json!({ "timedOut": true })));
    // In time, the event is delivered.
    let run = approval_timeout::start(&client, 60_000).await.unwrap();
    let yes = Approval {
        approved: true,
        by: "cy".into(),
    };
    client.send_event(run.id(), &yes).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, Some(yes));
    worker.shutdown().await;
}

async fn a_duplicate_send_is_delivered_once(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = notes::start(&client, ()).await.unwrap();
    let note = Note {
        text: "hello".into(),
    };
    let first = client
        .send_event(run.id(), &note)
        .dedup_key("webhook-1")
        .await
        .unwrap();
    let second = client
        .send_event(run.id(), &note)
        .dedup_key("webhook-1")
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(second.event.id, first.event.id);
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, vec![Some("hello".to_owned()), None]);
    assert_eq!(
        store
            .events()
            .unwrap()
            .list_events(run.id())
            .await
            .unwrap()
            .len(),
        1
    );
    worker.shutdown().await;
}

async fn json_sends_are_validated_against_the_declared_payload(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = notes::start(&client, ()).await.unwrap();

    // Every violation, by path.
    let refused = client
        .send_event_by_topic(
            run.id(),
            "e2e-approval",
            json!({ "approved": "yes", "by": 7 }),
        )
        .await
        .unwrap_err();
    match &refused {
        ClientError::InvalidEvent { violations, .. } => {
            let mut paths: Vec<&str> = violations.iter().map(|v| v.path.as_str()).collect();
            paths.sort_unstable();
            assert_eq!(paths, vec!["/approved", "/by"], "{refused}");
        }
        other => panic!("expected InvalidEvent, got {other:?}"),
    }
    // A topic the workflow does not declare.
    let undeclared = client
        .send_event_by_topic(run.id(), "payment", json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&undeclared, ClientError::UndeclaredEvent { topic, declared, .. }
            if topic == "payment" && declared == &vec!["e2e-approval", "e2e-note"]),
        "{undeclared:?}"
    );
    // An unknown run.
    let unknown = tasks::uuid::Uuid::now_v7();
    assert!(matches!(
        client
            .send_event_by_topic(unknown, "e2e-note", json!({ "text": "x" }))
            .await,
        Err(ClientError::Store(StoreError::RunNotFound { .. }))
    ));
    assert!(
        store
            .events()
            .unwrap()
            .list_events(run.id())
            .await
            .unwrap()
            .is_empty()
    );

    // A valid one, then one addressed by workflow and idempotency key.
    client
        .send_event_by_topic(run.id(), "e2e-note", json!({ "text": "one" }))
        .await
        .unwrap();
    let keyed_run = client
        .start_by_name("e2e-notes", json!(null))
        .idempotency_key("order-9")
        .await
        .unwrap();
    let target = EventTarget::Key {
        workflow_name: "e2e-notes".into(),
        idempotency_key: "order-9".into(),
    };
    let sent = client
        .send_event_by_topic(target.clone(), "e2e-note", json!({ "text": "two" }))
        .await
        .unwrap();
    assert_eq!(sent.event.workflow_run_id, keyed_run.id());
    assert!(matches!(
        client
            .send_event_by_topic(target, "e2e-note", json!({ "text": 2 }))
            .await,
        Err(ClientError::InvalidEvent { .. })
    ));

    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        vec![Some("one".to_owned()), None]
    );
    assert_eq!(
        keyed_run
            .result_within(Duration::from_secs(20))
            .await
            .unwrap(),
        json!(["two", null])
    );
    worker.shutdown().await;
}

async fn sends_to_finished_runs_are_refused(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = approval_timeout::start(&client, 0).await.unwrap();
    run.result_within(Duration::from_secs(20)).await.unwrap();
    let note = Approval {
        approved: true,
        by: "late".into(),
    };
    let refused = client.send_event(run.id(), &note).await.unwrap_err();
    assert!(
        matches!(
            refused,
            ClientError::Store(StoreError::WrongState {
                status: RunStatus::Completed,
                ..
            })
        ),
        "{refused:?}"
    );
    let canceled = store
        .create_run(CreateRun::new("e2e-approval"))
        .await
        .unwrap();
    store
        .lifecycle()
        .unwrap()
        .cancel_run(canceled.id)
        .await
        .unwrap();
    assert!(matches!(
        client.send_event(canceled.id, &note).await,
        Err(ClientError::Store(StoreError::WrongState {
            status: RunStatus::Canceled,
            ..
        }))
    ));
    assert!(
        store
            .events()
            .unwrap()
            .list_events(run.id())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .events()
            .unwrap()
            .list_events(canceled.id)
            .await
            .unwrap()
            .is_empty()
    );
    worker.shutdown().await;
}

every_store!(
    an_event_sent_before_the_wait_is_delivered,
    an_event_sent_after_the_wait_wakes_the_run_by_notification,
    a_wait_times_out,
    a_duplicate_send_is_delivered_once,
    json_sends_are_validated_against_the_declared_payload,
    sends_to_finished_runs_are_refused,
);
