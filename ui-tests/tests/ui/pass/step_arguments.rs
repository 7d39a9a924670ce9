//! Steps with borrowed, owned, pattern, `mut` and lifetime-bound arguments, and a workflow
//! calling them.

use std::sync::Arc;

use tasks::{WorkflowContext, WorkflowError, step, workflow};

#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub id: u64,
    pub lines: Vec<u64>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PaymentError;

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment declined")
    }
}

impl std::error::Error for PaymentError {}

/// Borrowed and owned arguments.
#[step(
    name = "charge-card",
    retry(max_attempts = 5, initial_interval = "250ms", backoff = 1.5)
)]
pub async fn charge(order: &Order, amount: u64, note: String) -> Result<String, PaymentError> {
    if amount == 0 {
        return Err(PaymentError);
    }
    Ok(format!("{}:{amount}:{note}", order.id))
}

/// Patterns and `mut` bindings stay on the user's parameters.
#[step(retry(max_interval = "1m30s"))]
async fn add((a, b): (u64, u64), mut extra: u64, _: bool) -> Result<u64, WorkflowError> {
    extra += 1;
    Ok(a + b + extra)
}

/// Explicit lifetimes, a `where` clause, `?` on a foreign error and an early `return`.
#[step]
async fn first_line<'a, 'b>(order: &'a Order, label: &'b str) -> Result<u64, WorkflowError>
where
    'a: 'b,
{
    let parsed: u64 = label.parse()?;
    if order.lines.is_empty() {
        return Err(WorkflowError::msg("empty order"));
    }
    Ok(order.lines[0] + parsed)
}

/// No arguments at all, shared ownership, and a `Self`-free body using `impl` blocks inside.
#[step]
async fn shared(counter: Arc<u64>) -> Result<u64, WorkflowError> {
    struct Local;
    impl Local {
        fn value(&self) -> u64 {
            7
        }
    }
    Ok(*counter + Local.value())
}

#[step]
async fn nothing() -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow]
async fn fulfil(_ctx: WorkflowContext, order: Order) -> Result<u64, WorkflowError> {
    let receipt = charge(&order, 10, "first".to_owned()).await?;
    let sum = add((1, 2), 3, true).await?;
    let first = first_line(&order, "4").await?;
    let shared = shared(Arc::new(sum)).await?;
    nothing().await?;
    Ok(receipt.len() as u64 + first + shared)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let order = Order {
        id: 1,
        lines: vec![1],
    };
    // Step futures stay `Send`, so workflows calling them can run on any worker thread.
    assert_send(charge(&order, 1, String::new()));
    assert_send(first_line(&order, "1"));
}
