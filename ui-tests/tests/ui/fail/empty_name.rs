use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(name = "", version = " ")]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(name = "")]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
