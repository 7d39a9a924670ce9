//! The workflows the chaos workers run, and the log of step executions their one step
//! writes.

use std::sync::OnceLock;
use std::time::Duration;

use chrono::Utc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tasks::{Event, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

/// The worker process's connections to `tasks_chaos.executions`, set before its worker
/// starts.
pub static EXECUTIONS: OnceLock<PgPool> = OnceLock::new();

/// The execution log. `started_at` is the worker's clock when the body began, which the
/// checks compare with the database's times: the scripted cluster runs on the same host, so
/// both read one clock. It is not the insert's time, because a worker stopped between the
/// two would log a body it began before the stop as if it began after.
pub const EXECUTIONS_DDL: &str = "
    CREATE SCHEMA IF NOT EXISTS tasks_chaos;
    CREATE TABLE IF NOT EXISTS tasks_chaos.executions (
        run_id UUID NOT NULL,
        step_index BIGINT NOT NULL,
        pid BIGINT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        executed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());";

/// The key every composed run publishes its progress under.
pub const PROGRESS: &str = "progress";

/// The `index`-th call of `logged` in a run resolves to this step name.
pub fn logged_step_name(index: i64) -> String {
    if index == 0 {
        "logged".to_owned()
    } else {
        format!("logged:{index}")
    }
}

/// Logs its execution (by whom, since when), then takes a little while.
#[step(retry(max_attempts = 30, initial_interval = "200ms", backoff = 1.5))]
async fn logged(run_id: Uuid, index: u32) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let started_at = Utc::now();
    // Boxed: a step's final error is replayed, and `sqlx::Error` cannot be rebuilt.
    let pool = EXECUTIONS
        .get()
        .ok_or("this process has no execution log")?;
    sqlx::query(
        "INSERT INTO tasks_chaos.executions (run_id, step_index, pid, started_at)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(run_id)
    .bind(i64::from(index))
    .bind(i64::from(std::process::id()))
    .bind(started_at)
    .execute(pool)
    .await?;
    tokio::time::sleep(Duration::from_millis(random(100..500))).await;
    Ok(index)
}

/// A random number in `range` (the crate has no RNG dependency; v4 UUIDs are random).
pub fn random(range: std::ops::Range<u64>) -> u64 {
    range.start + (Uuid::new_v4().as_u128() as u64) % (range.end - range.start)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepsInput {
    pub steps: u32,
}

/// `steps` logged steps, one after the other.
#[workflow(name = "chaos-steps")]
async fn chaos_steps(ctx: WorkflowContext, input: StepsInput) -> Result<u32, WorkflowError> {
    for index in 0..input.steps {
        logged(ctx.run_id(), index)
            .await
            .map_err(WorkflowError::from_boxed)?;
    }
    Ok(input.steps)
}

/// `steps` logged steps with a pause between them that is no step (an await of the
/// workflow's own). A worker stopped in such a pause resumes into its next step with no
/// record of its own left to write first: only the check of its hold stands between it and
/// the body of a run it lost.
#[workflow(name = "chaos-paced")]
async fn chaos_paced(ctx: WorkflowContext, input: StepsInput) -> Result<u32, WorkflowError> {
    for index in 0..input.steps {
        logged(ctx.run_id(), index)
            .await
            .map_err(WorkflowError::from_boxed)?;
        tokio::time::sleep(Duration::from_millis(random(50..300))).await;
    }
    Ok(input.steps)
}

/// Sent to a composed run before it waits (twice each, with one deduplication key).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Early {
    pub n: u32,
}

impl Event for Early {
    const TOPIC: &'static str = "chaos-early";
}

/// Sent to a composed run once its wait for it has started (twice at once, with one
/// deduplication key).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Late {
    pub n: u32,
}

impl Event for Late {
    const TOPIC: &'static str = "chaos-late";
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ComposedInput {
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComposedOutput {
    /// The outputs of the three children, in call order.
    pub children: Vec<u64>,
    /// The payloads of the events, in the order the run consumed them.
    pub events: Vec<u32>,
}

impl ComposedOutput {
    /// What a composed run of `seed` returns when every primitive did its part once.
    pub fn expected(seed: u64) -> Self {
        ComposedOutput {
            children: (1..=3).map(|k| leaf_output(seed + k)).collect(),
            events: vec![1, 2, 3],
        }
    }
}

fn leaf_output(n: u64) -> u64 {
    n * n
}

/// A child: two logged steps, then the square of its input.
#[workflow(name = "chaos-leaf")]
async fn leaf(ctx: WorkflowContext, n: u64) -> Result<u64, WorkflowError> {
    for index in 0..2 {
        logged(ctx.run_id(), index)
            .await
            .map_err(WorkflowError::from_boxed)?;
    }
    Ok(leaf_output(n))
}

/// Every primitive in one run: a step; two children started and a third run to its end
/// before the two are joined; a publication; two waits for events sent before the run
/// began; a step between them; a publication; a wait for an event sent once the wait has
/// started; a step; a last publication.
#[workflow(name = "chaos-composed", events(Early, Late))]
async fn composed(
    ctx: WorkflowContext,
    input: ComposedInput,
) -> Result<ComposedOutput, WorkflowError> {
    let run = ctx.run_id();
    logged(run, 0).await.map_err(WorkflowError::from_boxed)?;
    let first = ctx.spawn_child::<leaf>(input.seed + 1).await?;
    let second = ctx.spawn_child::<leaf>(input.seed + 2).await?;
    let third = ctx.child::<leaf>(input.seed + 3).await?;
    let mut children = Vec::new();
    for output in ctx.join_all(&[first, second]).await {
        children.push(output?);
    }
    children.push(third);
    ctx.set_state(PROGRESS, &1).await?;
    let mut events = vec![ctx.wait_for_event::<Early>().await?.n];
    logged(run, 1).await.map_err(WorkflowError::from_boxed)?;
    events.push(ctx.wait_for_event::<Early>().await?.n);
    ctx.set_state(PROGRESS, &2).await?;
    events.push(ctx.wait_for_event::<Late>().await?.n);
    logged(run, 2).await.map_err(WorkflowError::from_boxed)?;
    ctx.set_state(PROGRESS, &3).await?;
    Ok(ComposedOutput { children, events })
}
