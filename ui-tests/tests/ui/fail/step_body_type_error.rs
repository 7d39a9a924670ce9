//! A type error in a step's body is reported in the body, not on the attribute.

use tasks::{step, WorkflowError};

#[step]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    let doubled: String = amount * 2;
    Ok(doubled)
}

fn main() {}
