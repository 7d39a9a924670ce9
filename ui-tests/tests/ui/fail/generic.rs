use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow]
async fn checkout<T>(_ctx: WorkflowContext, order: T) -> Result<T, WorkflowError> {
    Ok(order)
}

#[workflow]
async fn borrowed<'a>(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

#[step]
async fn charge<'a, T: Clone, const N: usize>(amount: &'a T) -> Result<[u8; N], WorkflowError> {
    let _ = amount;
    Ok([0; N])
}

fn main() {}
