use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(retry(initial_interval = "5x", max_interval = "1.5s"))]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(retry(initial_interval = "30s1m", max_interval = 10))]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

#[step(retry(initial_interval = "", max_interval = "1m 30s"))]
async fn refund(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
