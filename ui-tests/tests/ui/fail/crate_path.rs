use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(crate = "my crate::tasks", crate = "::tasks")]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step(crate = tasks)]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

#[step(crate = "")]
async fn refund(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

#[step(crate = "tasks::<u8>")]
async fn void(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

// Well-formed but wrong: reported once, on the path, which shows the expansion uses it.
#[workflow(crate = "crate::missing::tasks")]
async fn misplaced(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

fn main() {}
