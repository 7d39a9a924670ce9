use tasks::__private::WorkflowContext;
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct A {}
fn main() { let _ = std::mem::size_of::<WorkflowContext>(); }
