use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow]
#[step]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step]
#[tasks::workflow]
async fn charge(_ctx: WorkflowContext, amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

#[workflow]
#[workflow(name = "again")]
async fn twice(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

fn main() {}
