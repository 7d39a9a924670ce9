use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Receipt {
    total: u64,
}

#[workflow]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<Receipt, WorkflowError> {
    Ok(Receipt { total: order })
}

fn main() {}
