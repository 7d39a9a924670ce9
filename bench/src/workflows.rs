//! The workflows the benchmark runs. Every step is a no-op, so what is measured is the
//! engine's own cost per step: its statements, round trips and commits.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{WorkflowContext, WorkflowError, step, workflow};

/// Input of [`bench_steps()`]: how many no-op steps to run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Steps {
    /// Number of sequential no-op steps.
    pub steps: u32,
}

/// Input of [`bench_replay()`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Replay {
    /// Number of sequential no-op steps before the durable sleep.
    pub steps: u32,
    /// Length of the durable sleep that parks the run after its steps.
    pub sleep_ms: u64,
}

/// A step that does nothing.
#[step]
async fn noop() -> Result<(), std::io::Error> {
    Ok(())
}

/// Runs `steps` no-op steps one after the other (throughput, latency, scale-out).
#[workflow(name = "bench-steps")]
pub async fn bench_steps(_ctx: WorkflowContext, input: Steps) -> Result<u32, WorkflowError> {
    for _ in 0..input.steps {
        noop().await?;
    }
    Ok(input.steps)
}

/// Runs `steps` no-op steps, then parks on a durable sleep (replay). Resuming it replays
/// every step from the stored history before the sleep can finish.
#[workflow(name = "bench-replay")]
pub async fn bench_replay(ctx: WorkflowContext, input: Replay) -> Result<u32, WorkflowError> {
    for _ in 0..input.steps {
        noop().await?;
    }
    ctx.sleep("park", Duration::from_millis(input.sleep_ms))
        .await?;
    Ok(input.steps)
}

/// Input of [`bench_hold()`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Hold {
    /// Number of sequential steps.
    pub steps: u32,
    /// How long each step takes, ms.
    pub step_ms: u64,
}

/// A step that takes `ms` milliseconds.
#[step]
async fn pause(ms: u64) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(())
}

/// Keeps a worker busy for `steps` × `step_ms` (recovery: a run held by a worker that is
/// killed).
#[workflow(name = "bench-hold")]
pub async fn bench_hold(_ctx: WorkflowContext, input: Hold) -> Result<u32, WorkflowError> {
    for _ in 0..input.steps {
        pause(input.step_ms).await?;
    }
    Ok(input.steps)
}

/// The event [`bench_event()`] waits for.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Ping {
    /// Anything.
    pub n: u32,
}

impl tasks::Event for Ping {
    const TOPIC: &'static str = "bench-ping";
}

/// Waits for one [`Ping`] and returns it (latency: event wake-up, send -> wait returns).
#[workflow(name = "bench-event", events(Ping))]
pub async fn bench_event(ctx: WorkflowContext) -> Result<u32, WorkflowError> {
    Ok(ctx.wait_for_event::<Ping>().await?.n)
}

/// A child that returns at once ([`bench_parent()`]'s).
#[workflow(name = "bench-child")]
pub async fn bench_child(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(n)
}

/// Runs one [`bench_child()`] and returns its output (latency: the child round trip, parent
/// start -> child claimed and done -> parent woken and done).
#[workflow(name = "bench-parent")]
pub async fn bench_parent(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(ctx.child::<bench_child>(n).await?)
}
