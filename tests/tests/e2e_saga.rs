//! End to end: compensation (`tasks::Saga`) on every store. A failed step has the earlier
//! steps' compensations run in reverse, each exactly once, even when the run is replayed in
//! the middle of compensating; a compensation that fails leaves the others to run and is
//! reported with the error compensated for.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, bump, calls, client, worker};
use tasks::{
    CompensationError, RunError, Saga, StepKind, WorkflowContext, WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// The compensations that ran, per run, in the order their bodies ran.
fn cancelled() -> &'static Mutex<HashMap<Uuid, Vec<String>>> {
    static CANCELLED: OnceLock<Mutex<HashMap<Uuid, Vec<String>>>> = OnceLock::new();
    CANCELLED.get_or_init(Default::default)
}

#[step(name = "saga_book")]
async fn book(what: String) -> Result<String, WorkflowError> {
    bump(run_id(), &format!("book {what}"));
    Ok(format!("{what} booked"))
}

#[step(name = "saga_cancel", retry(max_attempts = 1))]
async fn cancel(what: String, fail: bool) -> Result<(), WorkflowError> {
    bump(run_id(), &format!("cancel {what}"));
    cancelled()
        .lock()
        .unwrap()
        .entry(run_id())
        .or_default()
        .push(what.clone());
    if fail {
        return Err(WorkflowError::msg(format!("{what} cannot be cancelled")));
    }
    Ok(())
}

#[step(name = "saga_pay", retry(max_attempts = 1))]
async fn pay() -> Result<(), WorkflowError> {
    bump(run_id(), "pay");
    Err(WorkflowError::msg("card declined"))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Trip {
    /// Sleep durably after each compensation: the run is replayed between them.
    pause: bool,
    /// The booking whose compensation fails.
    failing: Option<String>,
}

#[workflow(name = "e2e-saga-trip", retry(max_attempts = 1))]
async fn trip(ctx: WorkflowContext, input: Trip) -> Result<(), WorkflowError> {
    let mut saga = Saga::new();
    for what in ["flight", "hotel", "car"] {
        book(what.to_owned()).await?;
        let (ctx, pause) = (ctx.clone(), input.pause);
        let fail = input.failing.as_deref() == Some(what);
        saga.add(move || async move {
            let cancelled = cancel(what.to_owned(), fail).await;
            if pause {
                ctx.sleep(
                    &format!("after cancelling {what}"),
                    Duration::from_millis(20),
                )
                .await?;
            }
            cancelled
        });
    }
    assert_eq!(saga.len(), 3);
    saga.or_compensate(pay().await).await?;
    Ok(())
}

/// Runs a trip to its failure: the run's id, its error's message, and the names of its
/// durable sleeps, in the order recorded.
async fn failed_with(backend: Backend, input: Trip) -> (Uuid, String, Vec<String>) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    let run = trip::start(&client, input).await.unwrap();
    let message = match run.result_within(Duration::from_secs(30)).await {
        Err(RunError::Failed { error, .. }) => error.message,
        other => panic!("expected a failed run, got {other:?}"),
    };
    worker.shutdown().await;
    let sleeps = run
        .steps()
        .await
        .unwrap()
        .into_iter()
        .filter(|step| step.kind == StepKind::Sleep)
        .map(|step| step.step_name)
        .collect();
    (run.id(), message, sleeps)
}

fn assert_each_ran_once(run: Uuid) {
    for what in ["flight", "hotel", "car"] {
        assert_eq!(calls(run, &format!("book {what}")), 1, "book {what}");
        assert_eq!(calls(run, &format!("cancel {what}")), 1, "cancel {what}");
    }
    assert_eq!(calls(run, "pay"), 1);
    assert_eq!(
        cancelled().lock().unwrap()[&run],
        ["car", "hotel", "flight"],
        "the last booked is cancelled first"
    );
}

async fn a_failed_step_compensates_in_reverse(backend: Backend) {
    let (run, message, sleeps) = failed_with(
        backend,
        Trip {
            pause: false,
            failing: None,
        },
    )
    .await;
    assert_eq!(message, "card declined");
    assert!(sleeps.is_empty());
    assert_each_ran_once(run);
}

async fn compensations_run_once_across_replays(backend: Backend) {
    let (run, message, sleeps) = failed_with(
        backend,
        Trip {
            pause: true,
            failing: None,
        },
    )
    .await;
    assert_eq!(message, "card declined");
    // Three durable sleeps, one after each compensation: the run was replayed three times
    // in the middle of compensating, and no step body ran twice.
    assert_eq!(
        sleeps,
        [
            "after cancelling car",
            "after cancelling hotel",
            "after cancelling flight"
        ]
    );
    assert_each_ran_once(run);
}

async fn a_failed_compensation_leaves_the_others_to_run(backend: Backend) {
    let (run, message, sleeps) = failed_with(
        backend,
        Trip {
            pause: true,
            failing: Some("hotel".to_owned()),
        },
    )
    .await;
    assert_eq!(sleeps.len(), 3, "{sleeps:?}");
    assert_eq!(
        message,
        "card declined; then 1 compensation failed: compensation 1 (hotel cannot be cancelled)"
    );
    assert_each_ran_once(run);
}

every_store!(
    a_failed_step_compensates_in_reverse,
    compensations_run_once_across_replays,
    a_failed_compensation_leaves_the_others_to_run,
);

/// The saga's own bookkeeping, outside any run: compensations run last first, every one of
/// them even after a failure, and the error lists the failures in the order they ran.
#[tokio::test]
async fn compensate_runs_every_compensation_last_first() {
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut saga = Saga::new();
    for n in 0..4 {
        let order = order.clone();
        saga.add(move || async move {
            order.lock().unwrap().push(n);
            if n % 2 == 1 {
                Err(WorkflowError::msg(format!("undo {n} failed")))
            } else {
                Ok(n)
            }
        });
    }
    let error = saga.compensate().await.unwrap_err();
    assert!(saga.is_empty());
    assert_eq!(*order.lock().unwrap(), [3, 2, 1, 0]);
    let failed: Vec<(usize, String)> = error
        .failures()
        .iter()
        .map(|failure| (failure.position, failure.error.to_string()))
        .collect();
    assert_eq!(
        failed,
        [
            (3, "undo 3 failed".to_owned()),
            (1, "undo 1 failed".to_owned())
        ]
    );
    assert!(error.cause().is_none());
    assert_eq!(
        error.to_string(),
        "2 compensations failed: compensation 3 (undo 3 failed); compensation 1 (undo 1 failed)"
    );
    // Nothing left: a second compensation does nothing.
    saga.compensate().await.unwrap();

    // `or_compensate` passes a value through untouched, and keeps the cause on a failure.
    let mut saga = Saga::new();
    saga.add(|| async { Err::<(), _>(WorkflowError::msg("undo failed")) });
    assert_eq!(
        saga.or_compensate(Ok::<_, WorkflowError>(7)).await.unwrap(),
        7
    );
    assert_eq!(saga.len(), 1);
    let error = saga
        .or_compensate(Err::<(), _>(WorkflowError::msg("step failed")))
        .await
        .unwrap_err();
    let compensation = error.downcast_ref::<CompensationError>().unwrap();
    assert_eq!(compensation.cause().unwrap().to_string(), "step failed");
    assert_eq!(compensation.failures().len(), 1);
}
