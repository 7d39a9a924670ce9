use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: u64,
}

#[workflow]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<Receipt, WorkflowError> {
    Ok(Receipt { id: order })
}

fn main() {}
