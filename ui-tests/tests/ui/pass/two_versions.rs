//! Two versions of one workflow side by side: one name, two types, two registrations.

use tasks::__private::{WorkflowRegistration, inventory};
use tasks::{Workflow, WorkflowContext, WorkflowError, workflow};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SignupV1 {
    pub email: String,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SignupV2 {
    pub email: String,
    pub referrer: Option<String>,
}

#[workflow(name = "signup", version = "1")]
pub async fn signup_v1(_ctx: WorkflowContext, input: SignupV1) -> Result<String, WorkflowError> {
    Ok(input.email)
}

#[workflow(name = "signup", version = "2")]
pub async fn signup_v2(_ctx: WorkflowContext, input: SignupV2) -> Result<String, WorkflowError> {
    Ok(input.referrer.unwrap_or(input.email))
}

/// A raw identifier registers under its plain name.
#[workflow]
async fn r#loop(_ctx: WorkflowContext, input: u32) -> Result<u32, WorkflowError> {
    Ok(input)
}

/// `#[cfg]` after the attribute removes the generated items along with the function.
#[workflow]
#[cfg(any())]
async fn compiled_out(_ctx: WorkflowContext, input: u32) -> Result<u32, WorkflowError> {
    Ok(input)
}

fn main() {
    assert_eq!(signup_v1::definition().display_name(), "signup@1");
    assert_eq!(signup_v2::definition().display_name(), "signup@2");
    assert_eq!(r#loop::definition().name, "loop");
    let mut names: Vec<String> = inventory::iter::<WorkflowRegistration>
        .into_iter()
        .map(|registration| registration.0.display_name())
        .collect();
    names.sort();
    assert_eq!(names, ["loop", "signup@1", "signup@2"]);
}
