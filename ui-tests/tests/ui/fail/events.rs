// Misuse of `#[workflow(events(...))]`: each error points at the user's token.
use tasks::{Event, WorkflowContext, WorkflowError, step, workflow};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Approval {
    ok: bool,
}

impl Event for Approval {
    const TOPIC: &'static str = "approval";
}

/// A payload type that is not an event (no `impl Event`).
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Plain {
    ok: bool,
}

#[workflow(events = Approval)]
async fn not_a_list(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(events())]
async fn empty_list(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(events(Approval, Approval))]
async fn listed_twice(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(events(Plain))]
async fn not_an_event(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[step(events(Approval))]
async fn on_a_step() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
