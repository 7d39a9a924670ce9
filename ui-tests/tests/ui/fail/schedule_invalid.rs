use tasks::{workflow, WorkflowContext, WorkflowError};

// Minutes run to 59: a compile error on the literal, with the parser's reason.
#[workflow(schedule = "0 61 * * * *")]
async fn bad_cron(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(schedule = "0 */5 * * * *", timezone = "Europe/Atlantis")]
async fn bad_timezone(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(schedule = "0 */5 * * * *", catch_up = "all(0)")]
async fn bad_catch_up(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

// Every problem at once: a timezone and a catch-up without a schedule.
#[workflow(timezone = "UTC", catch_up = "sometimes")]
async fn no_schedule(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

#[workflow(schedule = "* * * * *", schedule = "0 * * * *")]
async fn twice(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

fn main() {}
