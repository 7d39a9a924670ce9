//! `record_args`: steps whose arguments are recorded (the default, or `true`), one that
//! records none (`false`, for secrets), and arguments that are not `Serialize` (recorded as
//! a marker naming their type), in a workflow calling them all.

use tasks::{WorkflowContext, WorkflowError, step, workflow};

/// A handle with no JSON form, such as a connection pool.
#[derive(Clone)]
pub struct Pool;

#[step(record_args = false)]
async fn authenticate(token: String, _pool: Pool) -> Result<usize, WorkflowError> {
    Ok(token.len())
}

#[step(record_args = true, name = "lookup")]
async fn look_up(_pool: &Pool, id: u64, mut tags: Vec<String>) -> Result<u64, WorkflowError> {
    tags.push("seen".to_owned());
    Ok(id + tags.len() as u64)
}

#[step]
async fn ratio(value: f64, r#type: &str) -> Result<f64, WorkflowError> {
    Ok(value * r#type.len() as f64)
}

#[workflow]
async fn sign_in(_ctx: WorkflowContext, token: String) -> Result<u64, WorkflowError> {
    let length = authenticate(token, Pool).await?;
    let found = look_up(&Pool, 7, Vec::new()).await?;
    let scaled = ratio(f64::NAN, "kind").await?;
    Ok(length as u64 + found + scaled.is_nan() as u64)
}

fn main() {
    // Outside a run a step is a plain call: nothing is recorded.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    assert_eq!(
        runtime.block_on(authenticate("abc".into(), Pool)).unwrap(),
        3
    );
    assert_eq!(runtime.block_on(look_up(&Pool, 1, vec![])).unwrap(), 2);
}
