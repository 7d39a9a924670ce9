//! A workflow with a bad option still defines its type, so code that uses it reports nothing
//! more than the option.

use tasks::{workflow, Workflow, WorkflowContext, WorkflowError};

#[workflow(nmae = "checkout")]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order)
}

fn input_of<W: Workflow>(input: W::Input) -> W::Input {
    input
}

fn main() {
    let order: u64 = input_of::<checkout>(7);
    let _ = order;
}
