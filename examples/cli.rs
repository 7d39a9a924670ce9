//! The `tasks` command line mounted in your own program, next to your own subcommands.
//!
//! ```sh
//! cargo run --example cli -- report
//! cargo run --example cli -- tasks workflows list
//! cargo run --example cli -- tasks start greet --input '{"name":"ada","times":2}'
//! cargo run --example cli -- tasks worker          # Ctrl-C stops it
//! cargo run --example cli -- tasks runs list
//! ```
//!
//! With no `DATABASE_URL` (or `--database-url`) everything goes to the SQLite file
//! `tasks.sqlite` in the current directory. A program with no commands of its own can
//! instead call `tasks::cli::run().await` from `main`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Greeting {
    name: String,
    /// How many times to greet.
    #[schemars(range(min = 1, max = 5))]
    times: u32,
}

#[step]
async fn compose(name: &str, times: u32) -> Result<String, std::io::Error> {
    Ok(vec![format!("hello {name}"); times as usize].join(", "))
}

#[step]
async fn deliver(text: &str) -> Result<usize, std::io::Error> {
    println!("  delivering: {text}");
    Ok(text.len())
}

/// Greets someone, a few times.
#[workflow(name = "greet", version = "1")]
async fn greet(ctx: WorkflowContext, input: Greeting) -> Result<usize, WorkflowError> {
    let text = compose(&input.name, input.times).await?;
    ctx.sleep("think", std::time::Duration::from_millis(300))
        .await?;
    Ok(deliver(&text).await?)
}

/// My application: its own commands, plus the workflow operations under `tasks`.
#[derive(Debug, Parser)]
#[command(name = "myapp")]
struct MyApp {
    #[command(subcommand)]
    command: MyCommand,
}

#[derive(Debug, Subcommand)]
enum MyCommand {
    /// This application's own command.
    Report,
    /// Operate workflows: workers, runs, schemas, health checks.
    Tasks(tasks::cli::TasksArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match MyApp::parse().command {
        MyCommand::Report => {
            println!("nothing to report");
            ExitCode::SUCCESS
        }
        MyCommand::Tasks(tasks) => {
            let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
            tasks.execute(&mut out, &mut err).await.into()
        }
    }
}
