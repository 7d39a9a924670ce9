use tasks::{step, workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Greeting<'a> {
    text: &'a str,
}

#[step]
async fn label(id: u64) -> Result<&'static str, WorkflowError> {
    Ok(if id > 0 { "positive" } else { "zero" })
}

#[workflow]
async fn borrowed_output(_ctx: WorkflowContext, id: u64) -> Result<&'static str, WorkflowError> {
    label(id).await
}

#[workflow]
async fn borrowed_input(_ctx: WorkflowContext, greeting: Greeting<'_>) -> Result<u64, WorkflowError> {
    Ok(greeting.text.len() as u64)
}

#[workflow]
async fn slice_output(_ctx: WorkflowContext, id: u64) -> Result<Vec<&'static [u8]>, WorkflowError> {
    Ok(vec![if id > 0 { b"x" } else { b"y" }])
}

fn main() {}
