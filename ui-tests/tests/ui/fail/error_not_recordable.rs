use tasks::{step, workflow, WorkflowContext};

#[derive(Debug)]
struct Declined;

#[step]
async fn charge(amount: u64) -> Result<u64, Declined> {
    Ok(amount)
}

#[workflow]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, String> {
    Ok(order)
}

fn main() {}
