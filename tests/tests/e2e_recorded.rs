//! End to end: the recorded values of a workflow (`ctx.now()`, `ctx.random_u64()`,
//! `ctx.uuid()`, `ctx.rng()`), against each store (Postgres and SQLite): every replay sees
//! the first execution's values (after a failed attempt, after a durable sleep), a fork
//! keeps those recorded before its step and draws the rest anew, and inside a step body the
//! calls draw fresh values that are not recorded.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, bump, calls, client, worker};
use tasks::rand::Rng as _;
use tasks::{RunStatus, StepKind, StepStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

/// What one execution drew before its durable sleep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Drawn {
    /// `ctx.now()`, RFC 3339.
    now: String,
    random: u64,
    /// `ctx.uuid()`.
    uuid: String,
    /// Four draws of `ctx.rng()`.
    seeded: Vec<u64>,
    /// Two `ctx.uuid()` called inside a step body.
    in_step: (String, String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Output {
    drawn: Drawn,
    /// `ctx.now()` after the sleep.
    later: String,
}

/// What every execution of each run drew, in order.
fn seen() -> &'static Mutex<HashMap<Uuid, Vec<Drawn>>> {
    static SEEN: OnceLock<Mutex<HashMap<Uuid, Vec<Drawn>>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn run_id() -> Uuid {
    WorkflowContext::current().unwrap().run_id()
}

/// A step between the first values and the rest: it makes the first ones durable before
/// the rest are drawn.
#[step(name = "e2e_recorded_mark")]
async fn mark() -> Result<(), WorkflowError> {
    bump(run_id(), "mark");
    Ok(())
}

/// Calls `ctx.uuid()` twice in its body: two fresh ids, recorded only as its output.
#[step(name = "e2e_recorded_in_step")]
async fn uuids_in_step() -> Result<(String, String), WorkflowError> {
    bump(run_id(), "in_step");
    let ctx = WorkflowContext::current().unwrap();
    Ok((ctx.uuid().await?.to_string(), ctx.uuid().await?.to_string()))
}

/// Draws every kind of value, fails its first attempt, sleeps, and reads the clock again.
#[workflow(
    name = "e2e-recorded-values",
    retry(max_attempts = 2, initial_interval = "10ms")
)]
async fn recorded_values(ctx: WorkflowContext) -> Result<Output, WorkflowError> {
    let now = ctx.now().await?;
    let random = ctx.random_u64().await?;
    mark().await?;
    let uuid = ctx.uuid().await?;
    let mut rng = ctx.rng().await?;
    let seeded = (0..4).map(|_| rng.random()).collect();
    let in_step = uuids_in_step().await?;
    let drawn = Drawn {
        now: now.to_rfc3339(),
        random,
        uuid: uuid.to_string(),
        seeded,
        in_step,
    };
    seen()
        .lock()
        .unwrap()
        .entry(ctx.run_id())
        .or_default()
        .push(drawn.clone());
    if bump(ctx.run_id(), "execution") == 1 {
        return Err(WorkflowError::msg("the first attempt fails after drawing"));
    }
    ctx.sleep("nap", Duration::from_millis(300)).await?;
    let later = ctx.now().await?.to_rfc3339();
    Ok(Output { drawn, later })
}

fn instant(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

async fn replays_return_the_values_of_the_first_execution(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let before = Utc::now();
    let run = recorded_values::start(&client, ()).await.unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    let output = run.result_within(Duration::from_secs(30)).await.unwrap();

    // Three executions (the failed attempt, its retry that parked in the sleep, the wake-up
    // after it) drew the same values.
    let executions = seen().lock().unwrap()[&run.id()].clone();
    assert_eq!(executions.len(), 3, "{executions:#?}");
    assert!(executions.iter().all(|drawn| *drawn == output.drawn));
    assert_eq!(calls(run.id(), "mark"), 1);
    assert_eq!(calls(run.id(), "in_step"), 1);

    let drawn = &output.drawn;
    let now = instant(&drawn.now);
    let later = instant(&output.later);
    // The store's clock, close to this process's (generous bounds: one machine).
    assert!(
        now > before - chrono::TimeDelta::seconds(60),
        "{now} {before}"
    );
    assert!(now < Utc::now() + chrono::TimeDelta::seconds(60), "{now}");
    assert!(
        later - now >= chrono::TimeDelta::milliseconds(300),
        "{now} then {later}: the second read is after the sleep"
    );
    let uuid: Uuid = drawn.uuid.parse().unwrap();
    assert_eq!(uuid.get_version_num(), 7);
    let (seconds, _) = uuid.get_timestamp().unwrap().to_unix();
    assert!(seconds.abs_diff(u64::try_from(now.timestamp()).unwrap()) <= 1);
    assert_ne!(drawn.seeded[0], drawn.seeded[1]);
    assert_ne!(drawn.in_step.0, drawn.in_step.1, "fresh ids in a step body");

    // The history: each value once, under its own name, with the value as output; the
    // calls in the step body recorded nothing of their own.
    let steps = run.steps().await.unwrap();
    let completed: Vec<(&str, StepKind)> = steps
        .iter()
        .filter(|step| step.status == StepStatus::Completed)
        .map(|step| (step.step_name.as_str(), step.kind))
        .collect();
    let mut names: Vec<&str> = completed.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ctx.now",
            "ctx.now:1",
            "ctx.random",
            "ctx.rng",
            "ctx.uuid",
            "e2e_recorded_in_step",
            "e2e_recorded_mark",
            "nap",
        ]
    );
    assert_eq!(steps.len(), completed.len(), "nothing recorded twice");
    let output_of = |name: &str| {
        steps
            .iter()
            .find(|step| step.step_name == name)
            .and_then(|step| step.output.clone())
            .unwrap()
    };
    assert_eq!(output_of("ctx.uuid"), serde_json::json!(drawn.uuid));
    assert_eq!(
        output_of("ctx.random"),
        serde_json::json!(drawn.random.to_string())
    );
    assert_eq!(instant(output_of("ctx.now").as_str().unwrap()), now);
    let call = &steps
        .iter()
        .find(|step| step.step_name == "ctx.now")
        .unwrap()
        .config["call"];
    assert_eq!(call["path"], "tasks::WorkflowContext::now");
    assert_eq!(call["position"], 0);

    // A fork from `ctx.uuid` keeps the values recorded before it and draws the rest anew.
    let forked = client.fork(run.id(), "ctx.uuid").await.unwrap();
    let fork = client.handle::<Output>(forked.id);
    let fork_output = fork.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(fork_output.drawn.now, drawn.now);
    assert_eq!(fork_output.drawn.random, drawn.random);
    assert_ne!(fork_output.drawn.uuid, drawn.uuid);
    assert_ne!(fork_output.drawn.seeded, drawn.seeded);
    let fork_executions = seen().lock().unwrap()[&forked.id].clone();
    assert!(
        fork_executions
            .iter()
            .all(|seen| *seen == fork_output.drawn),
        "{fork_executions:#?}"
    );
    assert_eq!(
        client.get_run(forked.id).await.unwrap().unwrap().status,
        RunStatus::Completed
    );
    worker.shutdown().await;
}

every_store!(replays_return_the_values_of_the_first_execution);
