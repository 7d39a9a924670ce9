//! End to end: replay verification (`tasks::verify_replay`), against each store (Postgres,
//! SQLite, in-memory). Runs parked on an event or in a durable sleep are verified against
//! code "deployed" after they parked: a compatible change passes; a renamed, a reordered
//! and a removed step, and a changed patch, are each reported at the position that differs;
//! a finished run is verified only when sampled, and a removed last step is reported there;
//! a run of a workflow no longer registered, or whose input no longer decodes, is reported
//! too, and so is a replay that does not stop within its timeout. Verification runs no step
//! body and leaves the store exactly as it was.
//!
//! "Deploying new code" is simulated per run, as in `e2e_identity`: each workflow reads
//! which code it runs from a map keyed by its run id.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, TestStore, bump, calls, client, worker};
use tasks::store::CreateRun;
use tasks::verify::{MismatchKind, Stop, Verdict};
use tasks::{
    ListRuns, RunStatus, StepAttempt, VerifyOptions, WorkflowContext, WorkflowError, WorkflowRun,
    step, workflow,
};
use uuid::Uuid;

/// The event a parked `verify-order` run waits for.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct VerifyGo;

impl tasks::Event for VerifyGo {
    const TOPIC: &'static str = "verify-go";
}

/// The code every run starts on.
const ORIGINAL: u8 = 0;
/// A step added after the point every run reached: compatible.
const COMPATIBLE: u8 = 1;
/// `verify_charge` renamed to `verify_charge_card`.
const RENAMED: u8 = 2;
/// `verify_charge` and `verify_ship` swapped.
const REORDERED: u8 = 3;
/// `verify_ship` removed.
const REMOVED: u8 = 4;
/// The patch renamed from `audit` to `audit-v2`.
const PATCH_CHANGED: u8 = 5;

fn codes() -> &'static Mutex<HashMap<Uuid, u8>> {
    static CODES: OnceLock<Mutex<HashMap<Uuid, u8>>> = OnceLock::new();
    CODES.get_or_init(Default::default)
}

fn code_of(run_id: Uuid) -> u8 {
    codes()
        .lock()
        .unwrap()
        .get(&run_id)
        .copied()
        .unwrap_or(ORIGINAL)
}

fn deploy(run_id: Uuid, code: u8) {
    codes().lock().unwrap().insert(run_id, code);
}

fn run_id() -> Uuid {
    WorkflowContext::current().unwrap().run_id()
}

#[step]
async fn verify_audit() -> Result<(), WorkflowError> {
    bump(run_id(), "verify_audit");
    Ok(())
}

#[step]
async fn verify_charge() -> Result<(), WorkflowError> {
    bump(run_id(), "verify_charge");
    Ok(())
}

#[step]
async fn verify_charge_card() -> Result<(), WorkflowError> {
    bump(run_id(), "verify_charge_card");
    Ok(())
}

#[step]
async fn verify_ship() -> Result<(), WorkflowError> {
    bump(run_id(), "verify_ship");
    Ok(())
}

#[step]
async fn verify_extra() -> Result<(), WorkflowError> {
    bump(run_id(), "verify_extra");
    Ok(())
}

/// Original code: patch `audit` (its marker takes no position), `verify_audit` (#0),
/// `verify_charge` (#1), `verify_ship` (#2), then the wait for [`VerifyGo`] (#3).
#[workflow(name = "verify-order", events(VerifyGo))]
async fn order(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    let code = code_of(ctx.run_id());
    let patch = if code == PATCH_CHANGED {
        "audit-v2"
    } else {
        "audit"
    };
    if ctx.patched(patch).await? {
        verify_audit().await?;
    }
    match code {
        RENAMED => {
            verify_charge_card().await?;
            verify_ship().await?;
        }
        REORDERED => {
            verify_ship().await?;
            verify_charge().await?;
        }
        REMOVED => verify_charge().await?,
        _ => {
            verify_charge().await?;
            verify_ship().await?;
        }
    }
    ctx.wait_for_event::<VerifyGo>().await?;
    if code == COMPATIBLE {
        verify_extra().await?;
    }
    Ok(())
}

/// `verify_charge` (#0), then an hour's durable sleep (#1), then `verify_ship`.
#[workflow(name = "verify-napper")]
async fn napper(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    verify_charge().await?;
    ctx.sleep("nap", Duration::from_secs(3600)).await?;
    verify_ship().await?;
    Ok(())
}

/// Original code: `verify_charge` (#0) and `verify_ship` (#1), then it returns. Code
/// [`REMOVED`]: `verify_ship` is gone.
#[workflow(name = "verify-short")]
async fn short(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    verify_charge().await?;
    if code_of(ctx.run_id()) != REMOVED {
        verify_ship().await?;
    }
    Ok(())
}

/// `verify_charge` (#0), then, at `0`, continues as new with `1`, which returns. Code
/// [`REMOVED`]: `verify_charge` is gone.
#[workflow(name = "verify-looper")]
async fn looper(ctx: WorkflowContext, round: u32) -> Result<u32, WorkflowError> {
    if code_of(ctx.run_id()) != REMOVED {
        verify_charge().await?;
    }
    if round == 0 {
        return ctx.continue_as_new::<looper>(round + 1).await;
    }
    Ok(round)
}

/// `verify_charge` (#0), then a panic: the run fails for good at its first attempt.
#[workflow(name = "verify-panicker", retry(max_attempts = 1))]
async fn panicker(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    verify_charge().await?;
    panic!("verify-panicker panics on purpose");
}

/// Awaits an hour of plain (not durable) sleep in workflow code before any call.
#[workflow(name = "verify-dawdler")]
async fn dawdler(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    verify_charge().await?;
    Ok(())
}

const WITHIN: Duration = Duration::from_secs(30);

const STEPS: [&str; 5] = [
    "verify_audit",
    "verify_charge",
    "verify_charge_card",
    "verify_ship",
    "verify_extra",
];

/// Everything of the namespace verification could change: every run, its steps, and how
/// often each step body ran.
async fn snapshot(store: &TestStore) -> Vec<(WorkflowRun, Vec<StepAttempt>, Vec<u32>)> {
    let runs = store
        .list_runs(ListRuns {
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data;
    let mut snapshot = Vec::new();
    for run in runs {
        let steps = store.step_history(run.id).await.unwrap();
        let bodies = STEPS.iter().map(|step| calls(run.id, step)).collect();
        snapshot.push((run, steps, bodies));
    }
    snapshot
}

/// Starts `count` runs of `verify-order` and waits until each is parked on its event,
/// then stops the worker.
async fn parked_orders(store: &TestStore, count: usize) -> Vec<Uuid> {
    let client = client(store);
    let worker = worker(store).build().unwrap().spawn();
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(client.start::<order>(()).await.unwrap());
    }
    for run in &runs {
        run.wait_for_status(&[RunStatus::Sleeping], WITHIN)
            .await
            .unwrap();
    }
    worker.shutdown().await;
    runs.iter().map(|run| run.id()).collect()
}

fn mismatch(report: &tasks::VerifyReport, run_id: Uuid) -> &tasks::verify::Mismatch {
    match &report.run(run_id).expect("the run was verified").verdict {
        Verdict::Mismatch(mismatch) => mismatch,
        other => panic!("expected a mismatch of {run_id}, got {other:?}\n{report}"),
    }
}

async fn changed_code_is_reported_at_the_position_that_differs(backend: Backend) {
    let store = backend.store().await;
    let runs = parked_orders(&store, 4).await;
    let [renamed, reordered, removed, patch_changed] = runs[..] else {
        unreachable!()
    };
    deploy(renamed, RENAMED);
    deploy(reordered, REORDERED);
    deploy(removed, REMOVED);
    deploy(patch_changed, PATCH_CHANGED);

    let before = snapshot(&store).await;
    let report = client(&store)
        .verify_replay(&VerifyOptions::default())
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(snapshot(&store).await, before, "verification wrote nothing");
    assert!(!report.is_consistent());
    assert_eq!(report.runs.len(), 4);
    assert_eq!(report.mismatches().count(), 4);

    // Each: (run, position, what the history holds, what the code does now).
    let expected = [
        (renamed, 1, "`verify_charge`", "`verify_charge_card`"),
        (reordered, 1, "`verify_charge`", "`verify_ship`"),
        (removed, 2, "`verify_ship`", "`event/verify-go`"),
        (patch_changed, 0, "`verify_audit`", "`verify_charge`"),
    ];
    for (run_id, position, recorded, called) in expected {
        let found = mismatch(&report, run_id);
        assert_eq!(found.kind, MismatchKind::Call, "{found}");
        assert_eq!(found.position, Some(position), "{found}");
        assert_eq!(found.branch, None);
        assert!(found.expected.contains(recorded), "{found}");
        assert!(found.found.contains(called), "{found}");
        let line = report.run(run_id).unwrap().to_string();
        assert!(
            line.contains(&run_id.to_string()) && line.contains(&format!("#{position}")),
            "{line}"
        );
    }
    // The renamed step's body never ran, nor did any other again.
    assert_eq!(calls(renamed, "verify_charge_card"), 0);
    for run in runs {
        assert_eq!(calls(run, "verify_charge"), 1);
    }
}

async fn compatible_code_passes_with_runs_parked_in_waits_and_sleeps(backend: Backend) {
    let store = backend.store().await;
    let [waiting] = parked_orders(&store, 1).await[..] else {
        unreachable!()
    };
    deploy(waiting, COMPATIBLE);
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let sleeping = client.start::<napper>(()).await.unwrap();
    sleeping
        .wait_for_status(&[RunStatus::Sleeping], WITHIN)
        .await
        .unwrap();
    worker.shutdown().await;
    // A run no worker claimed yet: consistent with any code that decodes its input.
    let pending = client.start::<order>(()).await.unwrap().id();

    let before = snapshot(&store).await;
    let report = client
        .verify_replay(&VerifyOptions::default())
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(snapshot(&store).await, before, "verification wrote nothing");
    assert!(report.is_consistent(), "{report}");
    assert_eq!(report.runs.len(), 3);

    let parked = report.run(waiting).unwrap();
    assert_eq!(
        parked.verdict,
        Verdict::Consistent(Stop::Unrecorded {
            call: "event/verify-go".into()
        })
    );
    assert_eq!(parked.calls_replayed, 4, "audit, charge, ship, the wait");
    assert_eq!(parked.status, RunStatus::Sleeping);
    let napping = report.run(sleeping.id()).unwrap();
    assert_eq!(napping.verdict, Verdict::Consistent(Stop::Sleeping));
    assert_eq!(napping.calls_replayed, 2, "charge, the sleep");
    let new = report.run(pending).unwrap();
    assert_eq!(
        new.verdict,
        Verdict::Consistent(Stop::Unrecorded {
            call: "patch:audit".into()
        }),
        "a run with no history stops at its first call"
    );
    assert_eq!(calls(waiting, "verify_extra"), 0, "no step body ran");
    assert_eq!(calls(pending, "verify_audit"), 0, "no step body ran");
}

async fn finished_runs_are_sampled_and_runs_without_code_are_reported(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let finished = client.start::<short>(()).await.unwrap();
    finished.result_within(WITHIN).await.unwrap();
    let panicked = client.start::<panicker>(()).await.unwrap();
    panicked
        .wait_for_status(&[RunStatus::Failed], WITHIN)
        .await
        .unwrap();
    worker.shutdown().await;

    // Unchanged code replays the whole history: the workflow returns.
    let sampled = VerifyOptions::default().finished_sample(10);
    let report = client.verify_replay(&sampled).await.unwrap();
    let whole = report.run(finished.id()).unwrap();
    assert_eq!(
        whole.verdict,
        Verdict::Consistent(Stop::Returned { ok: true })
    );
    assert_eq!(whole.calls_replayed, 2);
    // A run that failed for good fails the same way again: no change of code.
    match &report.run(panicked.id()).unwrap().verdict {
        Verdict::Consistent(Stop::Failed { error }) => {
            assert!(error.contains("panics on purpose"), "{error}");
        }
        other => panic!("expected the replay to fail as the run did, got {other:?}"),
    }
    assert!(report.is_consistent(), "{report}");

    deploy(finished.id(), REMOVED);
    let report = client
        .verify_replay(&VerifyOptions::default())
        .await
        .unwrap();
    assert!(report.run(finished.id()).is_none(), "not sampled");
    assert!(report.is_consistent());

    // A run of a workflow this binary no longer has, and one whose input no longer
    // decodes, written behind the client's checks.
    let gone = store
        .create_run(CreateRun::new("verify-gone"))
        .await
        .unwrap()
        .id;
    let undecodable = store
        .create_run(CreateRun {
            input: Some(json!({ "not": "a unit" })),
            ..CreateRun::new("verify-order")
        })
        .await
        .unwrap()
        .id;
    let before = snapshot(&store).await;
    let report = client.verify_replay(&sampled).await.unwrap();
    println!("{report}");
    assert_eq!(snapshot(&store).await, before, "verification wrote nothing");
    let order: Vec<Uuid> = report.runs.iter().map(|run| run.run_id).collect();
    assert_eq!(
        order,
        [gone, undecodable, panicked.id(), finished.id()],
        "unfinished runs oldest first, then finished runs newest first"
    );

    let missing = mismatch(&report, finished.id());
    assert_eq!(missing.kind, MismatchKind::Missing, "{missing}");
    assert_eq!(missing.position, Some(1));
    assert!(missing.expected.contains("`verify_ship`"), "{missing}");
    assert_eq!(
        mismatch(&report, gone).kind,
        MismatchKind::Unregistered,
        "{report}"
    );
    assert_eq!(
        mismatch(&report, undecodable).kind,
        MismatchKind::Input,
        "{report}"
    );
    assert_eq!(report.mismatches().count(), 3);
}

/// A run that continued as new replays to its hand-over, consistently, without writing
/// anything (no second successor); its successor replays to its return; a call removed
/// before the hand-over is reported missing.
async fn a_run_that_continued_as_new_is_verified_to_its_hand_over(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let first = client.start::<looper>(0).await.unwrap();
    assert_eq!(first.result_within(WITHIN).await.unwrap(), 1);
    worker.shutdown().await;
    let successor = store
        .get_run(first.id())
        .await
        .unwrap()
        .unwrap()
        .continued_as_run_id
        .expect("the first run continued");

    let sampled = VerifyOptions::default().finished_sample(10);
    let before = snapshot(&store).await;
    let report = client.verify_replay(&sampled).await.unwrap();
    assert_eq!(snapshot(&store).await, before, "verification wrote nothing");
    assert_eq!(
        report.run(first.id()).unwrap().verdict,
        Verdict::Consistent(Stop::Continued),
        "{report}"
    );
    assert_eq!(
        report.run(successor).unwrap().verdict,
        Verdict::Consistent(Stop::Returned { ok: true }),
        "{report}"
    );

    deploy(first.id(), REMOVED);
    let report = client.verify_replay(&sampled).await.unwrap();
    let missing = mismatch(&report, first.id());
    assert_eq!(missing.kind, MismatchKind::Missing, "{missing}");
    assert_eq!(missing.position, Some(0));
    assert!(missing.found.contains("continued as new"), "{missing}");
    assert_eq!(snapshot(&store).await, before, "verification wrote nothing");
}

async fn a_replay_that_does_not_stop_is_reported_after_its_timeout(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = client.start::<dawdler>(()).await.unwrap().id();
    let started = std::time::Instant::now();
    let options = VerifyOptions::default().timeout(Duration::from_millis(300));
    let report = client.verify_replay(&options).await.unwrap();
    assert!(started.elapsed() < WITHIN);
    let found = mismatch(&report, run);
    assert_eq!(found.kind, MismatchKind::TimedOut, "{found}");
    assert!(found.found.contains("300ms"), "{found}");
    assert_eq!(calls(run, "verify_charge"), 0);
}

every_store!(
    a_replay_that_does_not_stop_is_reported_after_its_timeout,
    a_run_that_continued_as_new_is_verified_to_its_hand_over,
    changed_code_is_reported_at_the_position_that_differs,
    compatible_code_passes_with_runs_parked_in_waits_and_sleeps,
    finished_runs_are_sampled_and_runs_without_code_are_reported,
);
