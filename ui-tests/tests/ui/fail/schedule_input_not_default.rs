use tasks::{workflow, WorkflowContext, WorkflowError};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Report {
    pub pages: u32,
}

// A declared schedule starts its runs with the input's `Default`.
#[workflow(schedule = "0 0 6 * * *")]
async fn morning_report(_ctx: WorkflowContext, report: Report) -> Result<u32, WorkflowError> {
    Ok(report.pages)
}

fn main() {}
