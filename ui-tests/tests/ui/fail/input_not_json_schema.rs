use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
}

#[workflow]
async fn checkout(_ctx: WorkflowContext, order: Order) -> Result<u64, WorkflowError> {
    Ok(order.id)
}

fn main() {}
