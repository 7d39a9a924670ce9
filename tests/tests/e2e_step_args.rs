//! End to end: step arguments recorded, on each store. A step's arguments are
//! stored with each of its attempts and read back through `RunHandle::steps` and
//! `Client::list_steps`: a `Serialize` argument as its JSON, any other as a marker naming
//! its type, a NaN or an oversized value as a marker without failing the step; a step
//! declared `record_args = false` stores none, and neither does a sleep.

use crate::support;

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use support::{Backend, bump, client, worker};
use tasks::{
    ListStepAttempts, Order, StepKind, StepStatus, WorkflowContext, WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Serialize)]
struct Purchase {
    id: u64,
    customer: String,
}

/// A handle a step may take but that has no JSON form (a pool, a client).
#[derive(Clone)]
struct Pool;

/// Fails its first attempt, so that both attempts carry the arguments.
#[step(
    name = "charge_order",
    retry(max_attempts = 3, initial_interval = "10ms")
)]
async fn charge(
    order: &Purchase,
    mut count: u32,
    _pool: Pool,
    ratio: f64,
) -> Result<u32, std::io::Error> {
    count += 1;
    if bump(run_id(), "charge") == 1 {
        return Err(std::io::Error::other("declined"));
    }
    Ok(count + u32::from(ratio.is_nan()) + u32::try_from(order.id).unwrap_or(0))
}

#[step(record_args = false)]
async fn authenticate(token: String) -> Result<usize, std::io::Error> {
    Ok(token.len())
}

#[step]
async fn measure(blob: String) -> Result<usize, std::io::Error> {
    Ok(blob.len())
}

#[workflow(name = "e2e-step-args")]
async fn checkout(ctx: WorkflowContext, customer: String) -> Result<usize, WorkflowError> {
    let order = Purchase { id: 7, customer };
    let charged = charge(&order, 2, Pool, f64::NAN).await?;
    let authenticated = authenticate("s3cr3t-token".into()).await?;
    ctx.sleep("settle", Duration::from_millis(50)).await?;
    let measured = measure("x".repeat(tasks::limits::MAX_PAYLOAD_BYTES + 1)).await?;
    Ok(charged as usize + authenticated + measured)
}

async fn arguments_are_recorded_with_each_attempt(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = checkout::start(&client, "Ada Lovelace".into())
        .await
        .unwrap();
    let output = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, 11 + 12 + tasks::limits::MAX_PAYLOAD_BYTES + 1);

    let steps = run.steps().await.unwrap();
    let names: Vec<(&str, StepStatus)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.status))
        .collect();
    assert_eq!(
        names,
        [
            ("charge_order", StepStatus::Failed),
            ("charge_order", StepStatus::Completed),
            ("authenticate", StepStatus::Completed),
            ("settle", StepStatus::Completed),
            ("measure", StepStatus::Completed),
        ]
    );

    // The values the step was called with (not the body's `count += 1`), in order; the
    // pool and the NaN as markers.
    let charged = json!([
        { "name": "order", "value": { "id": 7, "customer": "Ada Lovelace" } },
        { "name": "count", "value": 2 },
        { "name": "_pool", "type": std::any::type_name::<Pool>(), "unrecorded": "not_serializable" },
        { "name": "ratio", "type": "f64", "unrecorded": "non_finite_float" },
    ]);
    assert_eq!(steps[0].args, Some(charged.clone()), "the failed attempt");
    assert_eq!(steps[1].args, Some(charged), "the retry");

    // `record_args = false`: nothing, not even the parameter's name.
    assert_eq!(steps[2].args, None);
    assert!(!serde_json::to_string(&steps[2]).unwrap().contains("s3cr3t"));
    // A sleep is not a call.
    assert_eq!(steps[3].kind, StepKind::Sleep);
    assert_eq!(steps[3].args, None);

    // Too large to store: a marker, and the step ran and completed.
    let measured = steps[4].args.as_ref().unwrap();
    assert_eq!(measured[0]["name"], "blob");
    assert_eq!(measured[0]["unrecorded"], "exceeds_limits");
    assert_eq!(measured[0]["type"], std::any::type_name::<String>());
    assert!(measured[0].get("value").is_none());

    // The client's listing reads the same rows.
    let listed = client
        .list_steps(ListStepAttempts {
            workflow_run_id: run.id(),
            order: Order::Asc,
            limit: None,
            after: None,
            before: None,
        })
        .await
        .unwrap();
    let listed: Vec<Option<Value>> = listed.data.into_iter().map(|s| s.args).collect();
    let direct: Vec<Option<Value>> = steps.into_iter().map(|s| s.args).collect();
    assert_eq!(listed, direct);
    worker.shutdown().await;
}

/// Outside a run a step is a plain call: nothing is recorded (nor serialized).
#[tokio::test]
async fn a_step_called_outside_a_run_just_runs() {
    assert_eq!(authenticate("t".into()).await.unwrap(), 1);
    assert_eq!(measure("four".into()).await.unwrap(), 4);
}

every_store!(arguments_are_recorded_with_each_attempt);
