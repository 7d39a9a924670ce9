//! Published state: a workflow reports its progress as it goes, and a client prints it as it
//! changes, woken by the store's notifications (no polling, no reading of the step log).
//!
//! ```sh
//! cargo run --example progress
//! ```
//!
//! The workflow copies a few "files", one step each, and publishes `{"done", "total"}`
//! under the key `progress` after each (`ctx.set_state`). The client follows the key with
//! `client.wait_for_state(run_id, "progress", last_version, timeout)`, which returns the next
//! newer value, and stops when the run finishes (`WaitError::Finished`). With no
//! `DATABASE_URL` everything goes to the SQLite file `tasks.sqlite`. Publications are
//! memoized like steps: if the worker dies and the run replays, values already published are
//! not published again.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{Client, WaitError, Worker, WorkflowContext, WorkflowError, step, workflow};

/// What the workflow publishes under `progress`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Progress {
    done: u32,
    total: u32,
    current: String,
}

#[step]
async fn copy(file: String) -> Result<u64, std::io::Error> {
    // Stands in for real work.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(file.len() as u64 * 1_000)
}

/// Copies every file, publishing its progress after each one.
#[workflow(name = "copy-files")]
async fn copy_files(ctx: WorkflowContext, files: Vec<String>) -> Result<u64, WorkflowError> {
    let total = u32::try_from(files.len()).unwrap_or(u32::MAX);
    let mut bytes = 0;
    for (done, file) in (1..).zip(files) {
        bytes += copy(file.clone()).await?;
        ctx.set_state(
            "progress",
            &Progress {
                done,
                total,
                current: file,
            },
        )
        .await?;
    }
    Ok(bytes)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-progress")?;
    let client = Client::new(store.clone())?;
    let worker = Worker::builder(store).build()?.spawn();

    let files = ["a.txt", "photos.tar", "notes.md", "report.pdf", "z.bin"];
    let run = copy_files::start(&client, files.iter().map(|f| f.to_string()).collect()).await?;
    println!("copy run {} started", run.id());

    let mut seen = 0;
    loop {
        match client
            .wait_for_state::<Progress>(run.id(), "progress", seen, Duration::from_secs(30))
            .await
        {
            Ok(state) => {
                let p = &state.value;
                println!(
                    "  [{:<10}] {}/{} copied {} (version {})",
                    "#".repeat((p.done * 10 / p.total.max(1)) as usize),
                    p.done,
                    p.total,
                    p.current,
                    state.version
                );
                seen = state.version;
            }
            // The run finished: it publishes nothing more.
            Err(WaitError::Finished { .. }) => break,
            Err(error) => return Err(error.into()),
        }
    }
    println!("result: {} bytes", run.result().await?);
    worker.shutdown().await;
    Ok(())
}
