use tasks::{step, workflow, WorkflowContext, WorkflowError};

struct Shop;

impl Shop {
    #[workflow]
    async fn checkout(&self, _ctx: WorkflowContext, order: u64) -> Result<u64, WorkflowError> {
        Ok(order)
    }

    #[step]
    async fn charge(self, amount: u64) -> Result<u64, WorkflowError> {
        Ok(amount)
    }

    #[step]
    async fn refund(&mut self, amount: u64) -> Result<u64, WorkflowError> {
        Ok(amount)
    }
}

fn main() {}
