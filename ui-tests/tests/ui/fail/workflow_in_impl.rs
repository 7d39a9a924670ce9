use tasks::{workflow, WorkflowContext, WorkflowError};

struct Shop;

impl Shop {
    /// A workflow written as an associated function: refused with one error.
    #[workflow(name = "shop-checkout")]
    async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
        Ok(order)
    }

    fn fee() -> u64 {
        3
    }
}

trait Flows {
    #[workflow]
    async fn refund(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
        Ok(order)
    }
}

/// The same at module level is fine, and may call the block's functions.
#[workflow(name = "shop-checkout-free")]
async fn checkout_free(_ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
    Ok(order + Shop::fee())
}

fn main() {}
