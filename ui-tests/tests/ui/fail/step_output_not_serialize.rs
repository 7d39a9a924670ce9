use tasks::{step, WorkflowError};

#[derive(serde::Deserialize)]
struct Receipt {
    total: u64,
}

#[step]
async fn charge(amount: u64) -> Result<Receipt, WorkflowError> {
    Ok(Receipt { total: amount })
}

fn main() {}
