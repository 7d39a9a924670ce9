//! End to end: `ctx.select` run by a real worker, against each store: each kind of winner
//! (an event, a timer, a child, a branch), ties resolved by declaration order, a run parked
//! on two topics woken by either, what becomes of the losers, and a replay that returns the
//! recorded winner even when another arm has become ready since. (The SIGKILL case is in
//! `e2e_recovery.rs`.)

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, bump, calls, client, worker};
use tasks::{
    ChildError, Event, RunStatus, StepKind, StepStatus, WorkflowContext, WorkflowError, step,
    workflow,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Approve {
    by: String,
}

impl Event for Approve {
    const TOPIC: &'static str = "e2e-select-approve";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Reject {
    reason: String,
}

impl Event for Reject {
    const TOPIC: &'static str = "e2e-select-reject";
}

/// Approval, rejection, or a timer of `ms` milliseconds, whichever comes first.
#[workflow(name = "e2e-select-decide", events(Approve, Reject))]
async fn decide(ctx: WorkflowContext, ms: u64) -> Result<String, WorkflowError> {
    ctx.select("decision")
        .event(|approve: Approve| format!("approved by {}", approve.by))
        .event(|reject: Reject| format!("rejected: {}", reject.reason))
        .timer(Duration::from_millis(ms), || "expired".to_owned())
        .await
}

/// The same arms with the timer declared first: a timer that is due at once wins a tie.
#[workflow(name = "e2e-select-timer-first", events(Approve))]
async fn timer_first(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    ctx.select("decision")
        .timer(Duration::ZERO, || "timer".to_owned())
        .event(|approve: Approve| format!("approved by {}", approve.by))
        .await
}

/// Sleeps `ms` milliseconds, then returns `ms`.
#[workflow(name = "e2e-select-child")]
async fn slow_child(ctx: WorkflowContext, ms: u64) -> Result<u64, WorkflowError> {
    ctx.sleep("nap", Duration::from_millis(ms)).await?;
    Ok(ms)
}

/// A child that sleeps `ms`, against an approval and an hour.
#[workflow(name = "e2e-select-child-parent", events(Approve))]
async fn child_parent(ctx: WorkflowContext, ms: u64) -> Result<String, WorkflowError> {
    let child = ctx.spawn_child::<slow_child>(ms).await?;
    ctx.select("first")
        .event(|approve: Approve| format!("approved by {}", approve.by))
        .child(&child, |result: Result<u64, ChildError>| match result {
            Ok(ms) => format!("child slept {ms}"),
            Err(error) => format!("child: {error}"),
        })
        .timer(Duration::from_secs(3600), || "expired".to_owned())
        .await
}

#[step]
async fn branch_work(run: tasks::uuid::Uuid, ms: u64) -> Result<u64, std::io::Error> {
    bump(run, "branch");
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms * 2)
}

/// A branch whose step takes `ms` milliseconds, against an approval.
#[workflow(name = "e2e-select-branch", events(Approve))]
async fn branch_race(ctx: WorkflowContext, ms: u64) -> Result<String, WorkflowError> {
    let run = ctx.run_id();
    let branch = ctx.spawn("work", async move { branch_work(run, ms).await })?;
    ctx.select("race")
        .event(|approve: Approve| format!("approved by {}", approve.by))
        .branch(branch, |output| match output {
            Ok(value) => format!("branch gave {value}"),
            Err(error) => format!("branch failed: {error}"),
        })
        .await
}

#[step]
async fn after_select(run: tasks::uuid::Uuid) -> Result<(), std::io::Error> {
    bump(run, "after");
    Ok(())
}

/// An approval or a 100 ms timer, then a durable sleep of `ms` that makes the next
/// execution replay the select: it must return the winner it recorded.
#[workflow(name = "e2e-select-replay", events(Approve))]
async fn replayed(ctx: WorkflowContext, ms: u64) -> Result<String, WorkflowError> {
    let winner = ctx
        .select("decision")
        .event(|approve: Approve| format!("approved by {}", approve.by))
        .timer(Duration::from_millis(100), || "expired".to_owned())
        .await?;
    bump(ctx.run_id(), &format!("winner {winner}"));
    ctx.sleep("settle", Duration::from_millis(ms)).await?;
    after_select(ctx.run_id()).await?;
    Ok(winner)
}

fn approve(by: &str) -> Approve {
    Approve { by: by.into() }
}

/// The select's attempt: its status, its recorded winner and the state of every arm.
async fn decision(run: &tasks::RunHandle<String>, name: &str) -> (StepStatus, serde_json::Value) {
    let steps = run.steps().await.unwrap();
    let select = steps
        .iter()
        .find(|step| step.step_name == name)
        .unwrap_or_else(|| panic!("no attempt {name} in {steps:?}"));
    assert_eq!(select.kind, StepKind::Sleep);
    (select.status, select.output.clone().unwrap_or_default())
}

async fn an_event_wins_and_the_other_topic_is_left_alone(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = decide::start(&client, 3_600_000).await.unwrap();
    client.send_event(run.id(), &approve("ann")).await.unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "approved by ann");
    let (status, recorded) = decision(&run, "select/decision").await;
    assert_eq!(status, StepStatus::Completed);
    assert_eq!(
        recorded,
        json!({ "winner": 0, "arms": ["won", "not_consumed", "canceled"] })
    );
    let steps = run.steps().await.unwrap();
    let names: Vec<(&str, StepKind)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind))
        .collect();
    assert_eq!(
        names,
        vec![
            ("select/decision", StepKind::Sleep),
            ("event/e2e-select-approve", StepKind::Event),
        ]
    );
    worker.shutdown().await;
}

async fn a_parked_select_is_woken_by_either_topic(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = decide::start(&client, 3_600_000).await.unwrap();
    eventually!(Duration::from_secs(20), {
        let run = store.get_run(run.id()).await.unwrap().unwrap();
        (run.status == RunStatus::Sleeping).then_some(())
    });
    let sent = client
        .send_event(
            run.id(),
            &Reject {
                reason: "too dear".into(),
            },
        )
        .await
        .unwrap();
    assert!(sent.woke, "a select on two topics is woken by the second");
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "rejected: too dear");
    let (_, recorded) = decision(&run, "select/decision").await;
    assert_eq!(
        recorded,
        json!({ "winner": 1, "arms": ["not_consumed", "won", "canceled"] })
    );
    worker.shutdown().await;
}

async fn a_timer_wins_and_the_event_stays_for_later(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = decide::start(&client, 300).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "expired");
    let (_, recorded) = decision(&run, "select/decision").await;
    assert_eq!(
        recorded,
        json!({ "winner": 2, "arms": ["not_consumed", "not_consumed", "won"] })
    );
    worker.shutdown().await;
}

async fn ties_go_to_the_first_declared_arm(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    // Both events are there before the select looks: the first declared wins, and the
    // second stays unconsumed in the mailbox.
    let run = decide::start(&client, 3_600_000).await.unwrap();
    client
        .send_event(
            run.id(),
            &Reject {
                reason: "late".into(),
            },
        )
        .await
        .unwrap();
    client.send_event(run.id(), &approve("bo")).await.unwrap();
    // The timer declared first, due at once, wins over a waiting event.
    let timer = timer_first::start(&client, ()).await.unwrap();
    client.send_event(timer.id(), &approve("cy")).await.unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        "approved by bo"
    );
    assert_eq!(
        timer.result_within(Duration::from_secs(20)).await.unwrap(),
        "timer"
    );
    let events = store.events().unwrap().list_events(run.id()).await.unwrap();
    let consumed: Vec<(&str, bool)> = events
        .iter()
        .map(|e| (e.topic.as_str(), e.consumed_at.is_some()))
        .collect();
    assert_eq!(
        consumed,
        vec![("e2e-select-reject", false), ("e2e-select-approve", true)]
    );
    let events = store
        .events()
        .unwrap()
        .list_events(timer.id())
        .await
        .unwrap();
    assert!(events.iter().all(|e| e.consumed_at.is_none()), "{events:?}");
    worker.shutdown().await;
}

async fn a_child_wins_and_a_losing_child_keeps_running(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = child_parent::start(&client, 200).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "child slept 200");
    let (_, recorded) = decision(&run, "select/first").await;
    assert_eq!(
        recorded,
        json!({ "winner": 1, "arms": ["not_consumed", "won", "canceled"] })
    );

    // An approval beats a child that sleeps a minute; the child is left running.
    let run = child_parent::start(&client, 60_000).await.unwrap();
    let child_step = eventually!(Duration::from_secs(20), {
        let parked = store.get_run(run.id()).await.unwrap().unwrap().status == RunStatus::Sleeping;
        let steps = store.step_history(run.id()).await.unwrap();
        steps
            .into_iter()
            .find(|s| parked && s.kind == StepKind::Child)
    });
    client.send_event(run.id(), &approve("dee")).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "approved by dee");
    let (_, recorded) = decision(&run, "select/first").await;
    assert_eq!(
        recorded,
        json!({ "winner": 0, "arms": ["won", "running", "canceled"] })
    );
    let child = store
        .get_run(child_step.child_workflow_run_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        !child.status.is_terminal(),
        "the losing child keeps running: {:?}",
        child.status
    );
    worker.shutdown().await;
}

async fn a_branch_wins_or_is_canceled(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = branch_race::start(&client, 50).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "branch gave 100");
    let (_, recorded) = decision(&run, "select/race").await;
    assert_eq!(
        recorded,
        json!({ "winner": 1, "arms": ["not_consumed", "won"] })
    );

    // An approval sent before the select wins; the branch, ten seconds long, is canceled
    // and its step never completes.
    let run = branch_race::start(&client, 10_000).await.unwrap();
    client.send_event(run.id(), &approve("eve")).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "approved by eve");
    let (_, recorded) = decision(&run, "select/race").await;
    assert_eq!(
        recorded,
        json!({ "winner": 0, "arms": ["won", "canceled"] })
    );
    let steps = run.steps().await.unwrap();
    assert!(
        !steps
            .iter()
            .any(|s| s.step_name.starts_with("work/") && s.status == StepStatus::Completed),
        "{steps:?}"
    );
    worker.shutdown().await;
}

async fn a_replay_returns_the_recorded_winner(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let run = replayed::start(&client, 1_000).await.unwrap();
    // The timer wins; while the run sleeps after the select, an approval arrives. The
    // replay of the select returns the timer again and leaves the approval unconsumed.
    eventually!(Duration::from_secs(20), {
        (calls(run.id(), "winner expired") == 1).then_some(())
    });
    client.send_event(run.id(), &approve("fay")).await.unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "expired");
    assert_eq!(calls(run.id(), "winner expired"), 2, "replayed once");
    assert_eq!(calls(run.id(), "winner approved by fay"), 0);
    assert_eq!(calls(run.id(), "after"), 1);
    let events = store.events().unwrap().list_events(run.id()).await.unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].consumed_at.is_none());
    worker.shutdown().await;
}

every_store!(
    an_event_wins_and_the_other_topic_is_left_alone,
    a_parked_select_is_woken_by_either_topic,
    a_timer_wins_and_the_event_stays_for_later,
    ties_go_to_the_first_declared_arm,
    a_child_wins_and_a_losing_child_keeps_running,
    a_branch_wins_or_is_canceled,
    a_replay_returns_the_recorded_winner,
);
