use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(retry(
    max_attempts = 0,
    backoff = 0.5,
    initial_interval = "5m",
    max_interval = "1m"
))]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(retry = 3)]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

#[step(retry(max_attempts = "3", backoff = -2.0))]
async fn refund(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
