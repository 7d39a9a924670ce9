//! Replay verification: replays the stored histories of a namespace's runs against the
//! workflows of this binary, offline, before a deploy, and reports every run whose history
//! the code no longer replays ([`verify_replay`]).
//!
//! Each run is replayed as a worker would replay it after a claim: the same
//! [`WorkflowContext`], the same name resolution and the same identity check
//! ([`NonDeterminism`](crate::NonDeterminism)), on a session that writes nothing. Every
//! call the history holds returns what it recorded; the first call it does not hold (a step
//! that would execute, a sleep or an event wait that would be written, a value that would
//! be drawn) stops the replay: the run is consistent so far, and its next execution will
//! make that call. No step body runs, and nothing is claimed, leased or recorded: the
//! store is only read (its listing of runs and each run's step history), so a verification
//! may run beside live workers.
//!
//! A run is a [`Mismatch`] when, before that point, the code makes another call than its
//! history recorded at a position (a step renamed, reordered, inserted, removed or
//! retyped, a patch changed), returns without making a call the history recorded, hands a
//! recorded value to a type it no longer reads back into, or when its workflow is no longer
//! registered or its input no longer decodes.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt as _;
use serde_json::Value;

use crate::context::{ExecutionLimits, WorkflowContext};
use crate::error::StoreResult;
use crate::failure::ErrorRecord;
use crate::model::{RunStatus, WorkflowRun};
use crate::registry::Registry;
use crate::session::{Halt, RunSession};
use crate::store::{ListRuns, Order, SharedStore};

mod report;

pub use report::{Mismatch, MismatchKind, RunVerification, Stop, Verdict, VerifyReport};

/// The statuses of a run still in flight: what a deploy replays.
const UNFINISHED: [RunStatus; 4] = [
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Sleeping,
    RunStatus::Paused,
];

/// The statuses of a finished run.
const FINISHED: [RunStatus; 3] = [RunStatus::Completed, RunStatus::Failed, RunStatus::Canceled];

/// Runs read per page of the listing.
const PAGE: u32 = 100;

/// What [`verify_replay`] verifies, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Also verify the most recently created finished runs (completed, failed, canceled),
    /// up to this many: a check of the code against whole histories. 0 by default.
    pub finished_sample: u32,
    /// Most calls one replay may make, as a worker's
    /// [`max_steps_per_run`](crate::WorkerBuilder::max_steps_per_run) (10 000 by default).
    pub max_steps: u32,
    /// Longest one run's replay may take before it is reported
    /// [`TimedOut`](MismatchKind::TimedOut) (10 s by default): a replay makes no I/O, so
    /// only workflow code awaiting something that is not a durable call takes long.
    pub timeout: Duration,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            finished_sample: 0,
            max_steps: 10_000,
            timeout: Duration::from_secs(10),
        }
    }
}

impl VerifyOptions {
    /// Also verify up to `runs` of the most recently created finished runs.
    pub fn finished_sample(mut self, runs: u32) -> Self {
        self.finished_sample = runs;
        self
    }

    /// Most calls one replay may make.
    pub fn max_steps(mut self, max_steps: u32) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Longest one run's replay may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Replays the stored history of every unfinished run of `store`'s namespace (pending,
/// running, sleeping, paused; oldest first), and of a sample of its finished ones if
/// `options` asks for it (newest first), against the workflows of `registry`, without
/// executing any step and without writing anything to the store (see the
/// [module docs](self)). [`VerifyReport::is_consistent`] is the deploy gate.
///
/// Also [`Client::verify_replay`](crate::Client::verify_replay), and
/// `tasks verify-replay` on the command line.
///
/// # Errors
///
/// A store error listing the runs or reading a history (a step row that does not decode
/// among them): the verification stops there, since it could not read what it verifies.
pub async fn verify_replay(
    store: &SharedStore,
    registry: &Registry,
    options: &VerifyOptions,
) -> StoreResult<VerifyReport> {
    let mut runs = Vec::new();
    for run in list(store, &UNFINISHED, Order::Asc, None).await? {
        runs.push(verify_run(store, registry, run, options).await?);
    }
    if options.finished_sample > 0 {
        let sample = list(store, &FINISHED, Order::Desc, Some(options.finished_sample)).await?;
        for run in sample {
            runs.push(verify_run(store, registry, run, options).await?);
        }
    }
    Ok(VerifyReport {
        namespace: store.namespace().to_owned(),
        runs,
    })
}

/// The runs in `statuses`, in `order`, at most `most` of them.
async fn list(
    store: &SharedStore,
    statuses: &[RunStatus],
    order: Order,
    most: Option<u32>,
) -> StoreResult<Vec<WorkflowRun>> {
    let mut runs = Vec::new();
    let mut after = None;
    loop {
        let listed = u32::try_from(runs.len()).unwrap_or(u32::MAX);
        let limit = most.map_or(PAGE, |most| most.saturating_sub(listed).min(PAGE));
        if limit == 0 {
            return Ok(runs);
        }
        let page = store
            .contract()
            .list_runs(ListRuns {
                statuses: statuses.to_vec(),
                order,
                limit: Some(limit),
                after,
                ..ListRuns::default()
            })
            .await?;
        runs.extend(page.data);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(runs),
        }
    }
}

/// How one replay ended.
enum Ended {
    Halted(Halt),
    Returned(std::thread::Result<Result<Value, ErrorRecord>>),
    TimedOut,
}

/// Replays the history of `run`.
async fn verify_run(
    store: &SharedStore,
    registry: &Registry,
    run: WorkflowRun,
    options: &VerifyOptions,
) -> StoreResult<RunVerification> {
    let (calls_replayed, verdict) = replay(store, registry, &run, options).await?;
    Ok(RunVerification {
        run_id: run.id,
        workflow_name: run.workflow_name,
        version: run.version,
        status: run.status,
        calls_replayed,
        verdict,
    })
}

/// The calls made and the verdict of replaying `run`.
async fn replay(
    store: &SharedStore,
    registry: &Registry,
    run: &WorkflowRun,
    options: &VerifyOptions,
) -> StoreResult<(u32, Verdict)> {
    let workflow = match &run.version {
        Some(version) => format!("workflow {}@{version}", run.workflow_name),
        None => format!("workflow {}", run.workflow_name),
    };
    let Some(definition) = registry.get(&run.workflow_name, run.version.as_deref()) else {
        let mismatch = Mismatch::of_run(
            MismatchKind::Unregistered,
            format!("{workflow} registered"),
            "no such workflow in this binary".into(),
        );
        return Ok((0, Verdict::Mismatch(mismatch)));
    };
    let input = run.input.clone().unwrap_or(Value::Null);
    if let Err(error) = (definition.check_input)(&input) {
        let mismatch = Mismatch::of_run(
            MismatchKind::Input,
            format!("an input of {workflow}'s input type"),
            format!("an input that does not decode: {error}"),
        );
        return Ok((0, Verdict::Mismatch(mismatch)));
    }
    let history = store.contract().step_history(run.id).await?;
    let session = RunSession::verifying(store.clone(), run.id);
    let limits = ExecutionLimits {
        max_steps: options.max_steps,
        park_threshold: Duration::ZERO,
    };
    let ctx = WorkflowContext::new(session.clone(), run.clone(), history, limits);
    let workflow =
        ctx.scope(AssertUnwindSafe((definition.entry)(ctx.clone(), input)).catch_unwind());
    let ended = tokio::select! {
        biased;
        halt = session.halted() => Ended::Halted(halt),
        result = workflow => match session.take_halt() {
            Some(halt) => Ended::Halted(halt),
            None => Ended::Returned(result),
        },
        () = tokio::time::sleep(options.timeout) => Ended::TimedOut,
    };
    ctx.end_branches().await;
    let verdict = match judge(&ctx, ended, options.timeout) {
        // A run that failed for good, replayed to a failure of the same sort (a panic, a
        // limit): the code fails it where it did, which is no change of code.
        Verdict::Mismatch(Mismatch {
            kind: MismatchKind::Failed,
            found,
            ..
        }) if run.status == RunStatus::Failed => Verdict::Consistent(Stop::Failed { error: found }),
        verdict => verdict,
    };
    Ok((ctx.calls_resolved(), verdict))
}

/// The verdict on a replay that ended as `ended`.
fn judge(ctx: &WorkflowContext, ended: Ended, timeout: Duration) -> Verdict {
    let failed = |kind, found: String| {
        Verdict::Mismatch(Mismatch::of_run(
            kind,
            "a replay that stops at a call the history does not hold".into(),
            found,
        ))
    };
    match ended {
        Ended::Halted(Halt::Unrecorded(call)) => Verdict::Consistent(Stop::Unrecorded { call }),
        Ended::Halted(Halt::Sleep(_)) => Verdict::Consistent(Stop::Sleeping),
        Ended::Halted(Halt::Fail(record)) => match ctx.nondeterminism() {
            Some(error) => {
                Verdict::Mismatch(Mismatch::call(&error.recorded, error.called.to_string()))
            }
            None if record.kind.as_deref() == Some("replay") => {
                Verdict::Mismatch(Mismatch::of_run(
                    MismatchKind::Value,
                    "recorded values that read back into the code's types".into(),
                    record.message,
                ))
            }
            None => failed(MismatchKind::Failed, record.message),
        },
        Ended::Halted(Halt::Continue(_)) => match ctx.unreached_call() {
            Some(call) => Verdict::Mismatch(Mismatch {
                kind: MismatchKind::Missing,
                branch: call.branch.clone(),
                position: call.position,
                expected: call.to_string(),
                found: "the workflow continued as new without making it".into(),
            }),
            None => Verdict::Consistent(Stop::Continued),
        },
        Ended::Halted(other) => failed(MismatchKind::Failed, format!("{other:?}")),
        Ended::Returned(Ok(returned)) => match ctx.unreached_call() {
            Some(call) => Verdict::Mismatch(Mismatch {
                kind: MismatchKind::Missing,
                branch: call.branch.clone(),
                position: call.position,
                expected: call.to_string(),
                found: "the workflow returned without making it".into(),
            }),
            None => Verdict::Consistent(Stop::Returned {
                ok: returned.is_ok(),
            }),
        },
        Ended::Returned(Err(panic)) => failed(
            MismatchKind::Failed,
            format!(
                "the workflow panicked: {}",
                crate::failure::panic_message(panic.as_ref())
            ),
        ),
        Ended::TimedOut => failed(
            MismatchKind::TimedOut,
            format!("a replay still running after {timeout:?}"),
        ),
    }
}
