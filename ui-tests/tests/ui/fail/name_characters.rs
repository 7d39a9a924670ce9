use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[workflow(name = " check out", version = "2\n")]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

// `:` is reserved: the runtime names repeated calls `charge`, `charge:1`, ...
#[step(name = "charge:1")]
async fn charge(amount: u64) -> Result<u64, WorkflowError> {
    Ok(amount)
}

fn main() {}
