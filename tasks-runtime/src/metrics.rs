//! The metrics a worker and a client record, through the [`metrics`] facade.
//!
//! Every figure below goes to whatever recorder the process installed: with none, recording
//! costs a few atomic loads and nothing is kept. The `prometheus` feature of `tasks` installs
//! a Prometheus recorder and serves it (`tasks::metrics`); any other `metrics` exporter
//! (StatsD, OpenTelemetry, ...) works the same way, installed with
//! [`metrics::set_global_recorder`].
//!
//! Counters count what *this process* did, like every Prometheus counter: sum them over your
//! instances in the query. The backlog ([`RUNS`]) is read from the store when the exporter
//! renders, so it is the same from every instance.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`RUNS_STARTED`] | counter | `workflow` | starts by this process's clients (a start that its idempotency key resolved to the existing run counts too) |
//! | [`RUNS_FINISHED`] | counter | `workflow`, `status` | runs this process's workers completed or failed for good, and cancels by its clients (a repeated cancel counts again) |
//! | [`EXECUTIONS`] | counter | `workflow`, `outcome` | executions of claimed runs, by how they ended: `completed`, `continued` (as new), `failed`, `retrying`, `sleeping`, `waiting`, `interrupted`, `lease_lost`, `abandoned` |
//! | [`STEP_ATTEMPTS`] | counter | `workflow`, `step`, `outcome` | executed step attempts (not replays): `completed`, `failed`, `timeout`, `panic` |
//! | [`STEP_DURATION`] | histogram (seconds) | `workflow`, `step` | how long each executed step attempt took |
//! | [`CLAIM_DURATION`] | histogram (seconds) | | how long a worker's claim statement took |
//! | [`CLAIMED_RUNS`] | counter | | runs this process's workers claimed |
//! | [`WORKER_SLOTS`] | gauge | | execution slots of this process's running workers |
//! | [`WORKER_SLOTS_IN_USE`] | gauge | | of those, the slots a run holds now |
//! | [`RUNS`] | gauge | `namespace`, `status` | live runs of the store's namespace by status (`pending`, `running`, `sleeping`, `paused`): the backlog |
//!
//! Step labels are a step's name without its call suffix (`charge`, not `charge:3`), so a
//! step called in a loop is one series.

#[cfg(doc)]
use crate::RunStore;
use std::time::Duration;

use ::metrics::{SharedString, counter, gauge, histogram};

use crate::error::StoreResult;
use crate::model::RunStatus;
use crate::store::Store;

/// Counter: starts by this process's clients. Label `workflow`.
pub const RUNS_STARTED: &str = "tasks_runs_started_total";
/// Counter: runs that finished for good through this process: completed or failed by its
/// workers, canceled by its clients. Labels `workflow`, `status`.
pub const RUNS_FINISHED: &str = "tasks_runs_finished_total";
/// Counter: executions of claimed runs by how they ended. Labels `workflow`, `outcome`.
pub const EXECUTIONS: &str = "tasks_executions_total";
/// Counter: executed step attempts. Labels `workflow`, `step`, `outcome`.
pub const STEP_ATTEMPTS: &str = "tasks_step_attempts_total";
/// Histogram, seconds: duration of executed step attempts. Labels `workflow`, `step`.
pub const STEP_DURATION: &str = "tasks_step_duration_seconds";
/// Histogram, seconds: duration of a worker's claim statement.
pub const CLAIM_DURATION: &str = "tasks_claim_duration_seconds";
/// Counter: runs claimed by this process's workers.
pub const CLAIMED_RUNS: &str = "tasks_claimed_runs_total";
/// Gauge: execution slots of this process's running workers.
pub const WORKER_SLOTS: &str = "tasks_worker_slots";
/// Gauge: execution slots that hold a run now.
pub const WORKER_SLOTS_IN_USE: &str = "tasks_worker_slots_in_use";
/// Gauge: live runs of a namespace by status, read from the store. Labels `namespace`,
/// `status`.
pub const RUNS: &str = "tasks_runs";

/// The bucket bounds, in seconds, that suit both duration histograms: from a fast claim
/// (a millisecond) to a slow step (a minute).
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Describes every metric (help text and unit) to the installed recorder. Exporters call it
/// once after installing theirs; without it the figures are the same, only undescribed.
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        RUNS_STARTED,
        "Workflow runs created by this process's clients."
    );
    describe_counter!(
        RUNS_FINISHED,
        "Workflow runs completed or failed by this process's workers, or canceled by its clients."
    );
    describe_counter!(
        EXECUTIONS,
        "Executions of claimed runs by this process's workers, by how they ended."
    );
    describe_counter!(STEP_ATTEMPTS, "Executed step attempts, by outcome.");
    describe_histogram!(
        STEP_DURATION,
        Unit::Seconds,
        "Duration of executed step attempts."
    );
    describe_histogram!(
        CLAIM_DURATION,
        Unit::Seconds,
        "Duration of a worker's claim statement."
    );
    describe_counter!(CLAIMED_RUNS, "Runs claimed by this process's workers.");
    describe_gauge!(WORKER_SLOTS, "Execution slots of this process's workers.");
    describe_gauge!(WORKER_SLOTS_IN_USE, "Execution slots that hold a run now.");
    describe_gauge!(
        RUNS,
        "Live runs of the namespace by status (the backlog), read from the store."
    );
}

/// The statuses [`RUNS`] reports: the live ones, which the stores count through their
/// partial indexes.
pub const BACKLOG_STATUSES: &[RunStatus] = &[
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Sleeping,
    RunStatus::Paused,
];

/// Sets the [`RUNS`] gauges of `store`'s namespace from one count of its live runs
/// ([`RunStore::count_runs`]). Exporters call it before they render, so that the backlog is
/// read when it is scraped; `tasks::metrics::Prometheus` does.
///
/// Errors: the store's, and then the gauges keep their last values.
pub async fn refresh_backlog(store: &dyn Store) -> StoreResult<()> {
    let counts = store.count_runs(BACKLOG_STATUSES).await?;
    for (status, count) in counts {
        gauge!(RUNS, "namespace" => store.namespace().to_owned(), "status" => status.as_str())
            .set(count as f64);
    }
    Ok(())
}

// Labels are `SharedString`s: a `&'static str` (a definition's name) is taken without a copy,
// so that recording with no recorder installed allocates as little as it can.

pub(crate) fn run_started(workflow: impl Into<SharedString>) {
    counter!(RUNS_STARTED, "workflow" => workflow.into()).increment(1);
}

pub(crate) fn run_finished(workflow: impl Into<SharedString>, status: &'static str) {
    counter!(RUNS_FINISHED, "workflow" => workflow.into(), "status" => status).increment(1);
}

pub(crate) fn execution(workflow: &'static str, outcome: &'static str) {
    counter!(EXECUTIONS, "workflow" => workflow, "outcome" => outcome).increment(1);
}

pub(crate) fn step_attempt(
    workflow: impl Into<SharedString>,
    step: &'static str,
    outcome: &'static str,
    took: Duration,
) {
    let workflow = workflow.into();
    histogram!(STEP_DURATION, "workflow" => workflow.clone(), "step" => step)
        .record(took.as_secs_f64());
    counter!(STEP_ATTEMPTS, "workflow" => workflow, "step" => step, "outcome" => outcome)
        .increment(1);
}

pub(crate) fn claimed(took: Duration, runs: usize) {
    histogram!(CLAIM_DURATION).record(took.as_secs_f64());
    counter!(CLAIMED_RUNS).increment(runs as u64);
}

/// Adds a worker's slots while it runs; removes them when dropped.
pub(crate) struct SlotsGauge(f64);

impl SlotsGauge {
    pub(crate) fn new(slots: usize) -> Self {
        gauge!(WORKER_SLOTS).increment(slots as f64);
        SlotsGauge(slots as f64)
    }
}

impl Drop for SlotsGauge {
    fn drop(&mut self) {
        gauge!(WORKER_SLOTS).decrement(self.0);
    }
}

/// One slot in use while it lives.
pub(crate) struct SlotInUse(());

impl SlotInUse {
    pub(crate) fn new() -> Self {
        gauge!(WORKER_SLOTS_IN_USE).increment(1.0);
        SlotInUse(())
    }
}

impl Drop for SlotInUse {
    fn drop(&mut self) {
        gauge!(WORKER_SLOTS_IN_USE).decrement(1.0);
    }
}
