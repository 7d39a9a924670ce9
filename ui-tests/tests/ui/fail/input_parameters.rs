use tasks::{workflow, WorkflowContext, WorkflowError};

#[workflow]
async fn two_inputs(
    _ctx: WorkflowContext,
    order: u64,
    coupon: String,
    note: String,
) -> Result<u64, WorkflowError> {
    let _ = (coupon, note);
    Ok(order)
}

#[workflow]
async fn borrowed_input(_ctx: WorkflowContext, order: &str) -> Result<u64, WorkflowError> {
    Ok(order.len() as u64)
}

#[workflow]
async fn impl_input(_ctx: WorkflowContext, order: impl Into<u64>) -> Result<u64, WorkflowError> {
    Ok(order.into())
}

fn main() {}
