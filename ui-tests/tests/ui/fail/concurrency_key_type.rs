use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub customer: String,
}

pub struct Invoice {
    pub customer: String,
}

fn customer_of_invoice(invoice: &Invoice) -> String {
    invoice.customer.clone()
}

#[workflow(concurrency(key = customer_of_invoice, limit = 2))]
async fn wrong_argument(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

pub struct Customer;

fn customer(_order: &Order) -> Customer {
    Customer
}

#[workflow(concurrency(key = customer, limit = 2))]
async fn key_not_display(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = |invoice: &Invoice| invoice.customer.clone(), limit = 2))]
async fn closure_argument(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

const NONE: u32 = 0;

#[workflow(concurrency(key = |order: &Order| order.customer.clone(), limit = NONE))]
async fn limit_constant(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

fn main() {}
