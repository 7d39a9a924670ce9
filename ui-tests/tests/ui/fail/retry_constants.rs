use tasks::{step, workflow, WorkflowContext, WorkflowError};

const ATTEMPTS: u32 = 0;

#[workflow(retry(max_attempts = ATTEMPTS))]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(retry(backoff = 0.5 * 1.0))]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

const SHORT: std::time::Duration = std::time::Duration::from_millis(10);

#[step(retry(initial_interval = std::time::Duration::from_secs(60), max_interval = SHORT))]
async fn refund(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
