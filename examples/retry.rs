//! A step that fails twice, then succeeds: the step is retried with its own backoff, and the
//! steps before it are not run again. Then a step that hangs past its timeout: the workflow
//! handles the timeout error (and would get the same error on any replay).
//!
//! ```sh
//! cargo run --example retry
//! ```

use std::sync::atomic::{AtomicU32, Ordering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, StepStatus, Worker, WorkflowContext, WorkflowError, step, workflow};

static CALLS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Upload {
    file: String,
}

#[step]
async fn checksum(file: &str) -> Result<u64, std::io::Error> {
    println!("  checksumming {file} (runs once)");
    Ok(file.bytes().map(u64::from).sum())
}

/// Flaky network: the first two calls fail.
#[step(retry(
    max_attempts = 5,
    initial_interval = "100ms",
    backoff = 2.0,
    max_interval = "1s"
))]
async fn upload(file: &str, checksum: u64) -> Result<String, std::io::Error> {
    let call = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call <= 2 {
        println!("  upload attempt {call}: connection reset");
        return Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        ));
    }
    println!("  upload attempt {call}: ok");
    Ok(format!("s3://bucket/{file}#{checksum}"))
}

/// A webhook that never answers: each attempt is dropped after 300 ms.
#[step(timeout = "300ms", retry(max_attempts = 2, initial_interval = "50ms"))]
async fn notify(url: &str) -> Result<(), WorkflowError> {
    println!("  notifying {url} ...");
    std::future::pending::<()>().await;
    Ok(())
}

#[workflow(name = "upload-file")]
async fn upload_file(_ctx: WorkflowContext, input: Upload) -> Result<String, WorkflowError> {
    let sum = checksum(&input.file).await?;
    let location = upload(&input.file, sum).await?;
    // A timed-out notification is not worth failing the upload for.
    if let Err(error) = notify("https://example.com/hook").await {
        let timed_out = error
            .downcast_ref::<tasks::StepFailure>()
            .is_some_and(tasks::StepFailure::is_timeout);
        println!("  notification skipped ({error}; timeout: {timed_out})");
    }
    Ok(location)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-retry")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    let run = upload_file::start(
        &client,
        Upload {
            file: "report.pdf".into(),
        },
    )
    .await?;
    println!("result: {}", run.result().await?);
    for step in run.steps().await? {
        let error = step
            .error
            .map(|e| e["message"].to_string())
            .unwrap_or_default();
        println!("  {:<10} {:<9} {}", step.step_name, step.status, error);
        if step.step_name == "checksum" {
            assert_eq!(step.status, StepStatus::Completed);
        }
        if step.step_name == "notify" {
            assert_eq!(step.status, StepStatus::Failed);
        }
    }
    worker.shutdown().await;
    Ok(())
}
