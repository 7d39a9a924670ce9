use tasks::{workflow, WorkflowContext, WorkflowError};

#[workflow]
async fn no_parameters() -> Result<u64, WorkflowError> {
    Ok(1)
}

#[workflow]
async fn no_context(order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[workflow]
async fn context_second(order: u64, _ctx: WorkflowContext) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[workflow]
async fn context_borrowed(_ctx: &WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

fn main() {}
