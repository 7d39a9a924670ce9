use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(nmae = "checkout", retry(attempts = 3, backoff_coefficient = 2.0))]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(version = "2", deadline = "1s")]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
