use tasks::{step, workflow, WorkflowContext};

#[workflow]
async fn no_return(_ctx: WorkflowContext, order: u64) {
    let _ = order;
}

#[workflow]
async fn plain_value(_ctx: WorkflowContext, order: u64) -> u64 {
    order
}

#[workflow]
async fn alias(_ctx: WorkflowContext, order: u64) -> std::io::Result<u64> {
    Ok(order)
}

#[workflow]
async fn opaque(_ctx: WorkflowContext, order: u64) -> Result<u64, impl std::error::Error> {
    Ok::<_, std::io::Error>(order)
}

#[step]
async fn option(amount: u64) -> Option<u64> {
    Some(amount)
}

fn main() {}
