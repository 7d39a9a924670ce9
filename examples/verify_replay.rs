//! Replay verification, the deploy gate: before rolling out new code, replay the stored
//! histories of the runs in flight against it, executing no step and writing nothing, and
//! stop the deploy if one of them would not replay.
//!
//! The binary holds two versions of one workflow's code under the same name, as two
//! registries: what is deployed (`checkout`), and a change that renames a step
//! (`checkout_renamed`). A run starts on the deployed code and parks on an event; the
//! change is verified against it and reported at the call that differs. A change that only
//! adds a step after the wait is verified too, and passes.
//!
//! In a real deploy the check is one command of the new binary (see the `cli` example):
//! `myapp tasks verify-replay --finished-sample 100`, exit code 1 on a mismatch.
//!
//! ```sh
//! cargo run --example verify_replay
//! ```

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{
    Client, Registry, RunStatus, VerifyOptions, Worker, WorkflowContext, WorkflowError, step,
    workflow,
};

/// Lets a parked checkout go on.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Shipped;

impl tasks::Event for Shipped {
    const TOPIC: &'static str = "shipped";
}

#[step]
async fn reserve(cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

#[step]
async fn charge(cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("charged {cents}"))
}

#[step]
async fn charge_card(cents: u64) -> Result<String, std::io::Error> {
    Ok(format!("charged card {cents}"))
}

#[step]
async fn thank() -> Result<(), std::io::Error> {
    Ok(())
}

/// The deployed code: reserve, charge, wait until shipped.
#[workflow(name = "checkout", events(Shipped))]
async fn checkout(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    reserve(cents).await?;
    let receipt = charge(cents).await?;
    ctx.wait_for_event::<Shipped>().await?;
    Ok(receipt)
}

/// A change that renames `charge`: runs that charged already would not replay.
#[workflow(name = "checkout", events(Shipped))]
async fn checkout_renamed(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    reserve(cents).await?;
    let receipt = charge_card(cents).await?;
    ctx.wait_for_event::<Shipped>().await?;
    Ok(receipt)
}

/// A change that adds a step after the wait: every run in flight replays it.
#[workflow(name = "checkout", events(Shipped))]
async fn checkout_thanks(ctx: WorkflowContext, cents: u64) -> Result<String, WorkflowError> {
    reserve(cents).await?;
    let receipt = charge(cents).await?;
    ctx.wait_for_event::<Shipped>().await?;
    thank().await?;
    Ok(receipt)
}

/// A registry holding one workflow, `W`.
fn registry<W: tasks::Workflow>() -> Result<Registry, tasks::RegistryError> {
    let mut registry = Registry::new();
    registry.register::<W>()?;
    Ok(registry)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-verify")?;
    // Today's binary: a worker and a client with the deployed code.
    let deployed = Client::with_registry(store.clone(), Arc::new(registry::<checkout>()?));
    let worker = Worker::builder(store.clone())
        .registry(registry::<checkout>()?)
        .build()?
        .spawn();
    let run = deployed.start::<checkout>(4200).await?;
    run.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(10))
        .await?;
    worker.shutdown().await;
    println!("run {} is parked on its event", run.id());

    // Tomorrow's binaries, checked before they are rolled out.
    let options = VerifyOptions::default();
    let renamed = tasks::verify_replay(&store, &registry::<checkout_renamed>()?, &options).await?;
    println!("\nrenaming `charge`:\n{renamed}");
    let thanks = tasks::verify_replay(&store, &registry::<checkout_thanks>()?, &options).await?;
    println!("\nadding `thank` after the wait:\n{thanks}");
    println!(
        "\ngate: rename {}, thanks {}",
        if renamed.is_consistent() {
            "passes"
        } else {
            "blocked"
        },
        if thanks.is_consistent() {
            "passes"
        } else {
            "blocked"
        },
    );
    assert!(!renamed.is_consistent() && thanks.is_consistent());
    deployed.cancel(run.id()).await?;
    Ok(())
}
