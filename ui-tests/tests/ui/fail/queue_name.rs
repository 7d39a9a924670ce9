use tasks::{step, workflow, WorkflowContext, WorkflowError};

// A queue follows the rules of names: letters, digits, `_`, `-`, `.` and `/`.
#[workflow(queue = "e mails")]
async fn send(_ctx: WorkflowContext, to: u64) -> Result<u64, WorkflowError> {
    Ok(to)
}

#[workflow(queue = "")]
async fn empty(_ctx: WorkflowContext, to: u64) -> Result<u64, WorkflowError> {
    Ok(to)
}

// A step's queue is its workflow's.
#[step(queue = "emails")]
async fn deliver(to: u64) -> Result<u64, WorkflowError> {
    Ok(to)
}

fn main() {}
