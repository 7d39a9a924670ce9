//! `concurrency(key = ..., limit = ...)` with every shape of key function, and what the
//! definition derives with it.

use tasks::__private::Workflow;
use tasks::__private::serde_json::json;
use tasks::{DeriveKeyError, WorkflowContext, WorkflowError, workflow};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub customer: String,
    pub region: String,
    pub account: u64,
}

impl Order {
    fn region_key(&self) -> String {
        format!("region-{}", self.region)
    }
}

/// A key borrowed from the input.
fn customer_of(order: &Order) -> &str {
    &order.customer
}

const PER_ACCOUNT: u32 = 3;

#[workflow(concurrency(key = customer_of, limit = 2))]
async fn by_function(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = Order::region_key, limit = 1))]
async fn by_method(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = |order: &Order| order.account, limit = PER_ACCOUNT))]
async fn by_closure(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

// An unannotated closure gets its parameter type from the workflow's input.
#[workflow(concurrency(
    key = |order| format!("{}/{}", order.region, order.customer),
    limit = 4
))]
async fn by_bare_closure(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow(concurrency(key = |order: &Order| -> String { panic!("no key for {}", order.customer) }, limit = 1))]
async fn panicking(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

#[workflow]
async fn without(_ctx: WorkflowContext, order: Order) -> Result<(), WorkflowError> {
    let _ = order;
    Ok(())
}

fn main() {
    let order = json!({ "customer": "acme", "region": "eu", "account": 7 });
    let derived = |definition: &tasks::WorkflowDefinition| {
        let concurrency = definition
            .derived_concurrency(&order)
            .expect("derived")
            .expect("declared");
        (concurrency.key().to_owned(), concurrency.limit())
    };
    assert_eq!(derived(by_function::definition()), ("acme".into(), 2));
    assert_eq!(derived(by_method::definition()), ("region-eu".into(), 1));
    assert_eq!(derived(by_closure::definition()), ("7".into(), 3));
    assert_eq!(
        derived(by_bare_closure::definition()),
        ("eu/acme".into(), 4)
    );
    assert_eq!(
        by_function::definition().concurrency.unwrap().expression,
        "customer_of"
    );
    assert_eq!(
        by_method::definition().concurrency.unwrap().expression,
        "Order::region_key"
    );
    assert_eq!(
        by_closure::definition().concurrency.unwrap().expression,
        "|order: &Order| order.account"
    );
    assert!(without::definition().concurrency.is_none());
    assert_eq!(without::definition().derived_concurrency(&order), Ok(None));

    // A panic of the key function is an error, not a crash (the default hook would print
    // it, expected here).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let panicked = panicking::definition()
        .derived_concurrency(&order)
        .unwrap_err();
    std::panic::set_hook(hook);
    assert_eq!(panicked.workflow, "panicking");
    assert_eq!(
        panicked.source,
        DeriveKeyError::Panicked("no key for acme".into())
    );
    // So is an input that does not decode.
    let undecodable = by_function::definition()
        .derived_concurrency(&json!({ "customer": 1 }))
        .unwrap_err();
    assert!(
        matches!(undecodable.source, DeriveKeyError::Input(_)),
        "{undecodable}"
    );
}
