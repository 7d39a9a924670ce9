//! A crate that re-exports `tasks` names it with `crate = "..."`, and the expansion reaches
//! the runtime through that path (`tests/ui/fail/crate_path.rs` shows the path is used).

mod reexport {
    pub use ::tasks;
}

use crate::reexport::tasks::{Workflow, WorkflowContext, WorkflowError, step, workflow};

#[step(crate = "crate::reexport::tasks", retry(max_attempts = 2))]
async fn double(value: u64) -> Result<u64, WorkflowError> {
    Ok(value * 2)
}

#[workflow(
    name = "reexported",
    crate = "crate::reexport::tasks",
    retry(backoff = 2.0)
)]
async fn reexported(_ctx: WorkflowContext, value: u64) -> Result<u64, WorkflowError> {
    double(value).await
}

#[workflow(crate = "self::reexport::tasks")]
async fn without_input(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

fn main() {
    assert_eq!(<reexported as Workflow>::definition().name, "reexported");
    assert_eq!(
        <without_input as Workflow>::definition().name,
        "without_input"
    );
}
