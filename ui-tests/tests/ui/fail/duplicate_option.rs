use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(name = "checkout", version = "1", name = "checkout", retry(), retry())]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(retry(max_attempts = 2, backoff = 2.0, max_attempts = 3))]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
