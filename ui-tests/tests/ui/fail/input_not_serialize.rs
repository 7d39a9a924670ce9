use tasks::{workflow, WorkflowContext, WorkflowError};

// Deserialize and JsonSchema are not enough: `start` serializes the input to store it.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Order {
    id: u64,
}

#[workflow]
async fn checkout(_ctx: WorkflowContext, order: Order) -> Result<u64, WorkflowError> {
    Ok(order.id)
}

fn main() {}
