//! `retry(...)` values and step timeouts given as `const` expressions instead of literals.

use std::time::Duration;

use tasks::{Workflow, WorkflowContext, WorkflowError, step, workflow};

const ATTEMPTS: u32 = 4;
const BACKOFF: f64 = 1.5;

mod intervals {
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(60);
}

#[workflow(retry(
    max_attempts = ATTEMPTS + 1,
    initial_interval = Duration::from_secs(1),
    backoff = BACKOFF,
    max_interval = intervals::MAX,
))]
async fn report(_ctx: WorkflowContext, day: String) -> Result<String, WorkflowError> {
    fetch(&day).await
}

#[step(retry(initial_interval = Duration::from_millis(250), max_interval = "2s"), timeout = intervals::MAX)]
async fn fetch(day: &str) -> Result<String, WorkflowError> {
    Ok(day.to_uppercase())
}

#[step(timeout = "1m30s")]
async fn parse(day: &str) -> Result<usize, std::io::Error> {
    Ok(day.len())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Outside a run a step is a plain call: no timeout applies.
    assert_eq!(parse("monday").await.unwrap(), 6);
    let retry = report::definition().retry_policy.expect("retry was given");
    assert_eq!(retry.max_attempts, 5);
    assert_eq!(retry.initial_interval, Duration::from_secs(1));
    assert_eq!(retry.backoff_coefficient, 1.5);
    assert_eq!(retry.max_interval, Duration::from_secs(60));
}
