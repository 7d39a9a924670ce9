//! End to end: the recorded values of a workflow (`ctx.now()`, `ctx.random_u64()`,
//! `ctx.uuid()`, `ctx.rng()`), against each store (Postgres and SQLite): every replay sees
//! the first execution's values (after a failed attempt, after a durable sleep), a fork
//! keeps those recorded before its step and draws the rest anew, and inside a step body the
//! calls draw fresh values that are not recorded. A worker process SIGKILLed after drawing
//! values and before finishing leaves them recorded: the worker that takes the run over
//! replays the same values (on the SQL stores, which two processes share).

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

/// `test_worker`'s `test-recorded` draws a UUID, a random number, the time and a seeded
/// number, hands them to a step that records them as an effect (`drawn <values>`), then runs
/// a slow step. Its worker process is SIGKILLed inside the slow step: the run taken over by
/// a second process returns the values the first one drew (read back from the effect its
/// step body wrote), every value is recorded once, and the step that saw them did not run
/// again.
async fn a_worker_killed_after_drawing_values_leaves_them_to_its_successor(backend: Backend) {
    use crate::e2e_recovery::{completed_run, effect_counts, effects_pool, spawn_worker};
    use tasks::store::CreateRun;

    let store = backend.store().await;
    let effects = effects_pool().await;
    let run = store
        .create_run(CreateRun {
            input: Some(serde_json::json!({
                "effects_database_url": tasks_tests::database_url(),
                "slow_millis": 120_000,
            })),
            ..CreateRun::new("test-recorded")
        })
        .await
        .unwrap();
    let mut first = spawn_worker(&store.url(), store.namespace(), 1_000);
    // The slow step began: the values and the step that saw them are durable (each write
    // of a run goes after the records held before it).
    let drawn = eventually!(Duration::from_secs(30), {
        let counts = effect_counts(&effects, run.id).await;
        let drawn = counts
            .keys()
            .find_map(|label| label.strip_prefix("drawn ").map(str::to_owned));
        drawn.filter(|_| counts.contains_key("slow"))
    });
    first.0.kill().expect("SIGKILL the first worker");
    first.0.wait().unwrap();
    let stranded = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(
        stranded.status,
        RunStatus::Running,
        "killed before finishing"
    );
    let recorded_at_kill: Vec<String> = store
        .step_history(run.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|step| step.status == StepStatus::Completed)
        .map(|step| step.step_name)
        .collect();
    for name in [
        "ctx.uuid",
        "ctx.random",
        "ctx.now",
        "ctx.rng",
        "record_effect",
    ] {
        assert!(
            recorded_at_kill.iter().any(|recorded| recorded == name),
            "{name} recorded before the kill: {recorded_at_kill:?}"
        );
    }

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let finished = completed_run(&store, run.id).await;
    assert_ne!(finished.worker_id, stranded.worker_id, "taken over");
    assert_eq!(
        finished.output,
        Some(serde_json::json!(drawn)),
        "the successor replayed the values the killed worker drew"
    );
    let counts = effect_counts(&effects, run.id).await;
    assert_eq!(counts[&format!("drawn {drawn}")], 1, "{counts:?}");
    assert_eq!(counts.len(), 2, "no other values were drawn: {counts:?}");
    assert_eq!(
        counts["slow"], 2,
        "the step in flight at the kill ran again"
    );
    let steps = store.step_history(run.id).await.unwrap();
    for name in ["ctx.uuid", "ctx.random", "ctx.now", "ctx.rng"] {
        let records = steps.iter().filter(|step| step.step_name == name).count();
        assert_eq!(records, 1, "{name} recorded once");
    }
}

every_store!(
    replays_return_the_values_of_the_first_execution;
    sql: a_worker_killed_after_drawing_values_leaves_them_to_its_successor
);
