//! A worker process for the crash-recovery test: it runs `test-effects` runs until it is
//! killed. Every step records a side effect in `tasks_test.effects`, so the test can prove
//! that no completed step ran again after a takeover.
//!
//! Usage: `test_worker <store-url> <namespace> <lease-ms> [<concurrency>]`
//!
//! `<store-url>` is any URL [`tasks::connect`] takes (`postgres://…`, `sqlite:///path`): the
//! store under test. The effects table is always in Postgres, at the URL each run carries in
//! its input (`effects_database_url`), independent of the store.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};
use tasks::{Worker, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct EffectsInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    steps: u32,
    step_millis: u64,
}

/// Records one side effect, then takes `millis` to finish.
#[step(retry(max_attempts = 1))]
async fn record_effect(
    effects_database_url: &str,
    run_id: Uuid,
    label: String,
    millis: u64,
) -> Result<i32, Box<dyn std::error::Error + Send + Sync>> {
    // Boxed: a step's final error is replayed, and `sqlx::Error` cannot be rebuilt.
    let count = insert_effect(effects_database_url, run_id, &label).await?;
    tokio::time::sleep(Duration::from_millis(millis)).await;
    Ok(count)
}

/// Counts one more effect `label` of `run_id`; returns the new count.
async fn insert_effect(
    effects_database_url: &str,
    run_id: Uuid,
    label: &str,
) -> Result<i32, Box<dyn std::error::Error + Send + Sync>> {
    let mut conn = PgConnection::connect(effects_database_url).await?;
    let (count,): (i32,) = sqlx::query_as(
        "INSERT INTO tasks_test.effects (run_id, step, count) VALUES ($1, $2, 1)
         ON CONFLICT (run_id, step) DO UPDATE SET count = tasks_test.effects.count + 1
         RETURNING count",
    )
    .bind(run_id)
    .bind(label)
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(count)
}

/// Records the effect `slow`; the first time only, then takes `millis` (where the kill
/// test of recorded values kills its worker).
#[step(retry(max_attempts = 1))]
async fn slow_the_first_time(
    effects_database_url: &str,
    run_id: Uuid,
    millis: u64,
) -> Result<i32, Box<dyn std::error::Error + Send + Sync>> {
    let count = insert_effect(effects_database_url, run_id, "slow").await?;
    if count == 1 {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
    Ok(count)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct RecordedInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    /// How long the slow step takes the first time.
    slow_millis: u64,
}

/// Draws recorded values (a UUID, a random number, the time, a seeded generator's first
/// number), hands them to a step that records them as the effect `drawn <values>`, then
/// runs a slow step (the kill test of recorded values): returns the values as the
/// execution that finished saw them.
#[workflow(name = "test-recorded")]
async fn recorded(ctx: WorkflowContext, input: RecordedInput) -> Result<String, WorkflowError> {
    use tasks::rand::RngCore as _;
    let url = &input.effects_database_url;
    let id = ctx.uuid().await?;
    let random = ctx.random_u64().await?;
    let now = ctx.now().await?;
    let seeded = ctx.rng().await?.next_u64();
    let drawn = format!(
        "{id} {random} {} {seeded}",
        now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    );
    record_effect(url, ctx.run_id(), format!("drawn {drawn}"), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    slow_the_first_time(url, ctx.run_id(), input.slow_millis)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(drawn)
}

#[workflow(name = "test-effects")]
async fn effects(ctx: WorkflowContext, input: EffectsInput) -> Result<u32, WorkflowError> {
    for i in 0..input.steps {
        record_effect(
            &input.effects_database_url,
            ctx.run_id(),
            format!("step-{i:03}"),
            input.step_millis,
        )
        .await
        .map_err(WorkflowError::from_boxed)?;
    }
    Ok(input.steps)
}

/// An approval sent to `test-approval` runs (the recovery test of events).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct TestApproval {
    by: String,
}

impl tasks::Event for TestApproval {
    const TOPIC: &'static str = "test-approval";
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct ApprovalInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
}

/// Records an effect, waits for an approval, records another effect, returns who approved.
#[workflow(name = "test-approval", events(TestApproval))]
async fn approval(ctx: WorkflowContext, input: ApprovalInput) -> Result<String, WorkflowError> {
    let url = &input.effects_database_url;
    record_effect(url, ctx.run_id(), "before".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    let approval = ctx.wait_for_event::<TestApproval>().await?;
    record_effect(url, ctx.run_id(), "after".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(approval.by)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct SelectInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    /// The select's timer.
    timer_millis: u64,
}

/// Records an effect, waits for an approval or the timer, whichever comes first, records
/// another effect, returns the winner.
#[workflow(name = "test-select", events(TestApproval))]
async fn select(ctx: WorkflowContext, input: SelectInput) -> Result<String, WorkflowError> {
    let url = &input.effects_database_url;
    record_effect(url, ctx.run_id(), "before".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    let winner = ctx
        .select("decision")
        .event(|approval: TestApproval| format!("approved by {}", approval.by))
        .timer(Duration::from_millis(input.timer_millis), || {
            "expired".to_owned()
        })
        .await?;
    record_effect(url, ctx.run_id(), "after".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(winner)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct ChildInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    /// How long the child's work step takes.
    work_millis: u64,
}

/// A child (the recovery test of children): records that it started, works for a while,
/// returns its run id.
#[workflow(name = "test-child")]
async fn child(ctx: WorkflowContext, input: ChildInput) -> Result<String, WorkflowError> {
    let url = &input.effects_database_url;
    record_effect(url, ctx.run_id(), "child-start".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    record_effect(url, ctx.run_id(), "child-work".into(), input.work_millis)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(ctx.run_id().to_string())
}

/// Records an effect, runs `test-child` and waits for it, records another effect, returns
/// the child's output.
#[workflow(name = "test-parent")]
async fn parent(ctx: WorkflowContext, input: ChildInput) -> Result<String, WorkflowError> {
    let url = input.effects_database_url.clone();
    record_effect(&url, ctx.run_id(), "before".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    let output = ctx.child::<child>(input).await?;
    record_effect(&url, ctx.run_id(), "after".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(output)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct NapInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    /// How long the durable sleep between the two steps lasts.
    nap_millis: u64,
}

/// Records an effect, sleeps durably (the run leaves its worker), records another effect
/// (the PgBouncer test).
#[workflow(name = "test-nap")]
async fn nap(ctx: WorkflowContext, input: NapInput) -> Result<u64, WorkflowError> {
    let url = &input.effects_database_url;
    record_effect(url, ctx.run_id(), "before".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    ctx.sleep("nap", Duration::from_millis(input.nap_millis))
        .await?;
    record_effect(url, ctx.run_id(), "after".into(), 0)
        .await
        .map_err(WorkflowError::from_boxed)?;
    Ok(input.nap_millis)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct ContinueInput {
    /// The Postgres database holding `tasks_test.effects`.
    effects_database_url: String,
    /// Iterations done by the lineage's earlier runs.
    done: u32,
    /// Iterations in all.
    total: u32,
    /// Iterations per run, before it continues as new.
    per_run: u32,
}

/// Runs `per_run` iterations (each a step recording an effect under the lineage's id and
/// the iteration's number), then continues as new, until `total` iterations are done
/// (the continue-as-new kill test); returns the number of runs of the lineage.
#[workflow(name = "test-continue")]
async fn keep_going(ctx: WorkflowContext, input: ContinueInput) -> Result<u32, WorkflowError> {
    let url = input.effects_database_url.clone();
    let mut done = input.done;
    for _ in 0..input.per_run {
        if done == input.total {
            break;
        }
        record_effect(&url, ctx.lineage_id(), format!("iteration-{done:03}"), 0)
            .await
            .map_err(WorkflowError::from_boxed)?;
        done += 1;
    }
    if done == input.total {
        return Ok(done.div_ceil(input.per_run.max(1)));
    }
    ctx.continue_as_new::<keep_going>(ContinueInput { done, ..input })
        .await
}

/// Started by the schedule of the three-process schedules test: returns the slot it was
/// started for, as the run sees it.
#[workflow(name = "test-tick")]
async fn tick(ctx: WorkflowContext) -> Result<Option<String>, WorkflowError> {
    Ok(ctx
        .scheduled_at()
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(namespace), Some(lease)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: test_worker <store-url> <namespace> <lease-ms> [<concurrency>]".into());
    };
    let store = tasks::connect(&url).await?.scoped(&namespace)?;
    let mut worker = Worker::builder(store);
    if let Some(concurrency) = args.next() {
        worker = worker.concurrency(concurrency.parse()?);
    }
    let worker = worker
        .lease(Duration::from_millis(lease.parse()?))
        .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
        .build()?;
    println!("ready {}", worker.id());
    worker.run_until_ctrl_c().await?;
    Ok(())
}
