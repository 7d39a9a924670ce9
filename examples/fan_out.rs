//! Fan-out / fan-in with child workflows: a report starts one child run per region, in
//! parallel, waits for all of them (parked, its worker slot free, woken once by the last
//! child), and joins their results. A region that fails reaches the parent as a typed
//! error, which it handles.
//!
//! ```sh
//! cargo run --example fan_out
//! ```
//!
//! Each child is an ordinary run of its own (`tasks runs list --parent <RUN_ID>` lists
//! them); canceling the report cancels the children still running.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::{
    ChildError, Client, ListRuns, RunStatus, StepKind, Worker, WorkflowContext, WorkflowError,
    step, workflow,
};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Region {
    name: String,
    stores: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Report {
    total_cents: u64,
    failed_regions: Vec<String>,
}

#[step(retry(max_attempts = 1))]
async fn sum_sales(region: &str, stores: u32) -> Result<u64, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    if region == "atlantis" {
        return Err(std::io::Error::other(
            "the region's database is under water",
        ));
    }
    Ok(u64::from(stores) * 12_345)
}

/// One region's sales: a child run.
#[workflow(name = "region-sales", retry(max_attempts = 1))]
async fn region_sales(_ctx: WorkflowContext, region: Region) -> Result<u64, WorkflowError> {
    Ok(sum_sales(&region.name, region.stores).await?)
}

/// The report: one child per region, then the sum.
#[workflow(name = "sales-report")]
async fn sales_report(ctx: WorkflowContext, regions: Vec<Region>) -> Result<Report, WorkflowError> {
    // Fan out: every child starts now (each start is memoized, so a replay starts none again).
    let mut handles = Vec::new();
    for region in &regions {
        handles.push(ctx.spawn_child::<region_sales>(region.clone()).await?);
    }
    // Fan in: one park until the last child finishes.
    let mut report = Report {
        total_cents: 0,
        failed_regions: Vec::new(),
    };
    for (region, result) in regions.iter().zip(ctx.join_all(&handles).await) {
        match result {
            Ok(cents) => report.total_cents += cents,
            Err(ChildError::Failed { .. }) => report.failed_regions.push(region.name.clone()),
            Err(other) => return Err(other.into()),
        }
    }
    Ok(report)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-fan-out")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store.clone())?;

    let regions: Vec<Region> = ["north", "south", "east", "west", "atlantis"]
        .iter()
        .zip(1..)
        .map(|(name, stores)| Region {
            name: (*name).to_owned(),
            stores,
        })
        .collect();
    let run = sales_report::start(&client, regions).await?;
    let report = run.result_within(Duration::from_secs(60)).await?;
    println!("report: {report:?}");
    assert_eq!(report.total_cents, (1..=4).sum::<u64>() * 12_345);
    assert_eq!(report.failed_regions, vec!["atlantis".to_owned()]);

    let children = client
        .list_runs(ListRuns {
            parent_run_id: Some(run.id()),
            ..ListRuns::default()
        })
        .await?;
    println!("{} children:", children.data.len());
    for child in &children.data {
        println!("  {} {} {}", child.id, child.workflow_name, child.status);
    }
    assert_eq!(children.data.len(), 5);
    assert_eq!(
        children
            .data
            .iter()
            .filter(|child| child.status == RunStatus::Failed)
            .count(),
        1
    );
    let steps = run.steps().await?;
    assert!(steps.iter().all(|step| step.kind == StepKind::Child));
    worker.shutdown().await;
    Ok(())
}
