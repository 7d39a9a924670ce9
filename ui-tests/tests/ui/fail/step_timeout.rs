use std::time::Duration;

use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[step(timeout = "soon")]
async fn unparsable() -> Result<(), WorkflowError> {
    Ok(())
}

#[step(timeout = "0s")]
async fn zero() -> Result<(), WorkflowError> {
    Ok(())
}

#[step(timeout = 30)]
async fn bare_number() -> Result<(), WorkflowError> {
    Ok(())
}

#[step(timeout = Duration::ZERO)]
async fn zero_expression() -> Result<(), WorkflowError> {
    Ok(())
}

#[step(timeout = "1s", timeout = "2s")]
async fn twice() -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(timeout = "1s")]
async fn flow(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

fn main() {}
