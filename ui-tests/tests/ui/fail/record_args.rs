use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[step(record_args = 1)]
async fn number(token: String) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

#[step(record_args = "false")]
async fn string(token: String) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

#[step(record_args)]
async fn bare(token: String) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

#[step(record_args = false, record_args = true)]
async fn twice(token: String) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

#[workflow(record_args = false)]
async fn flow(_ctx: WorkflowContext, token: String) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

fn main() {}
