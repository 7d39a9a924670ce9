use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub customer: String,
}

fn customer_of(order: &Order) -> String {
    order.customer.clone()
}

#[workflow(concurrency(key = customer_of))]
async fn key_without_limit(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = customer_of, limit = 0))]
async fn limit_zero(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(limit = 2))]
async fn limit_without_key(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = "customer", limit = -1, queue = "exports"))]
async fn fixed_key(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency_key = customer_of, concurrency_limit = 2)]
async fn flat(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency = 2)]
async fn not_a_list(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = customer_of, limit = 1, key = customer_of))]
async fn repeated(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

fn main() {}
