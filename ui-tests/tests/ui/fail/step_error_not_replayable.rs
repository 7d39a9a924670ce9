//! A step's final error is stored and handed back on replay: an error type that cannot be
//! rebuilt from storage is refused, on the type, with what to do instead.
use tasks::{step, WorkflowContext, WorkflowError, workflow};

#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

impl std::error::Error for Declined {}

#[step]
async fn charge(amount: u64) -> Result<u64, Declined> {
    Ok(amount)
}

#[step]
async fn parse(text: String) -> Result<u32, std::num::ParseIntError> {
    text.parse()
}

// A workflow's own error type is only recorded: this one is fine there.
#[workflow]
async fn checkout(_ctx: WorkflowContext, order: u64) -> Result<u64, Declined> {
    Ok(order)
}

fn main() {
    let _ = WorkflowError::msg("unused");
}
