//! Helpers shared by the conformance cases: fixtures that bring runs and steps into a given
//! state, and assertions on timestamps and delays.

use std::time::Duration;
pub(crate) use tasks_core::Holder;
#[cfg(doc)]
use tasks_core::LeaseStore;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{Value, json};
use tasks_core::{
    ClaimedRun, CreateRun, CreateStepAttempt, FailRun, ListRuns, ListStepAttempts, RetryPolicy,
    RunStatus, StepAttempt, StepKind, StepUpdate, Store, StoreError, WorkflowRun,
};
use uuid::Uuid;

/// [`LeaseStore::claim_runs`] with a limit of one: the cases' way to claim a single run.
pub(crate) trait ClaimOne {
    /// Claims at most one run for `worker_id` with a lease of `lease`.
    fn claim_run(
        &self,
        worker_id: &str,
        lease: Duration,
    ) -> impl std::future::Future<Output = Result<Option<WorkflowRun>, StoreError>>;
}

impl<S: Store + ?Sized> ClaimOne for S {
    async fn claim_run(
        &self,
        worker_id: &str,
        lease: Duration,
    ) -> Result<Option<WorkflowRun>, StoreError> {
        let claimed = self.claim_runs(worker_id, lease, 1).await?;
        Ok(claimed.into_iter().next().map(|claimed| claimed.run))
    }
}

/// Runs of a claim, without what the claim says about them.
pub(crate) fn claimed_runs(claimed: Vec<ClaimedRun>) -> Vec<WorkflowRun> {
    claimed.into_iter().map(|claimed| claimed.run).collect()
}

/// A namespace no other case uses.
pub(crate) fn unique_namespace() -> String {
    tasks_test_support::unique_namespace("conformance")
}

/// A lease long enough never to expire during a test.
pub(crate) const LONG_LEASE: Duration = Duration::from_secs(60);

/// How far a database timestamp may be from the test's clock and still count as "now".
pub(crate) const NOW_TOLERANCE_MS: i64 = 5_000;

/// A workflow name no other run uses.
pub(crate) fn unique_name() -> String {
    tasks_test_support::unique_name("wf")
}

/// A worker id no other worker uses.
pub(crate) fn new_worker() -> String {
    tasks_test_support::unique_name("worker")
}

/// `t` at the precision stores keep (microseconds).
pub(crate) fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
pub(crate) fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds()
}

/// Asserts that `t` is set and within [`NOW_TOLERANCE_MS`] of the test's clock.
#[track_caller]
pub(crate) fn assert_near_now(t: Option<DateTime<Utc>>, what: &str) {
    let t = t.unwrap_or_else(|| panic!("{what} should be set"));
    let delta = ms_between(t, Utc::now()).abs();
    assert!(
        delta < NOW_TOLERANCE_MS,
        "{what} is {t}, {delta} ms away from now"
    );
}

/// Ids of `runs`, in order.
pub(crate) fn ids(runs: &[WorkflowRun]) -> Vec<Uuid> {
    runs.iter().map(|run| run.id).collect()
}

/// Creates a pending run of a fresh workflow with defaults everywhere.
pub(crate) async fn create_pending<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let run = store
        .create_run(CreateRun::new(unique_name()))
        .await
        .expect("create_run");
    assert_eq!(run.status, RunStatus::Pending);
    run
}

/// Creates a run and claims it with a fresh worker and a long lease. The store must hold no
/// other claimable run.
pub(crate) async fn create_claimed<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let created = create_pending(store).await;
    let claimed = store
        .claim_run(&new_worker(), LONG_LEASE)
        .await
        .expect("claim_run")
        .expect("the run just created should be claimable");
    assert_eq!(
        claimed.id, created.id,
        "claimed another run than the one just created"
    );
    assert_eq!(claimed.status, RunStatus::Running);
    claimed
}

/// The worker holding a claimed run's lease.
pub(crate) fn owner(run: &WorkflowRun) -> &str {
    run.worker_id
        .as_deref()
        .expect("a claimed run has a worker")
}

/// The holder of run `id` as it is stored now, which must be held: for a test whose claim
/// returned several runs, or that is not about the fence.
pub(crate) async fn held_by<S: Store + ?Sized>(store: &S, id: Uuid) -> Holder {
    holder(
        &store
            .get_run(id)
            .await
            .expect("get_run")
            .expect("the run exists"),
    )
}

/// The holder of a claimed run as the claim left it: its worker and its claim epoch, the
/// fence of every write of that claim.
pub(crate) fn holder(run: &WorkflowRun) -> Holder {
    Holder::of(run).expect("a claimed run has a worker")
}

/// Creates, claims and completes a run.
pub(crate) async fn create_completed<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let claimed = create_claimed(store).await;
    let completed = store
        .complete_run(claimed.id, &holder(&claimed), json!({ "done": true }))
        .await
        .expect("complete_run");
    assert_eq!(completed.status, RunStatus::Completed);
    completed
}

/// Creates, claims and fails a run for good.
pub(crate) async fn create_failed<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let claimed = create_claimed(store).await;
    let failed = store
        .fail_run(FailRun {
            run_id: claimed.id,
            holder: holder(&claimed),
            error: json!({ "message": "boom" }),
            force: true,
        })
        .await
        .expect("fail_run");
    assert_eq!(failed.status, RunStatus::Failed);
    failed
}

/// Creates and cancels a run.
pub(crate) async fn create_canceled<S: Store + ?Sized>(store: &S) -> WorkflowRun {
    let run = create_pending(store).await;
    let canceled = store
        .lifecycle()
        .unwrap()
        .cancel_run(run.id)
        .await
        .expect("cancel_run");
    assert_eq!(canceled.status, RunStatus::Canceled);
    canceled
}

/// Creates, claims and puts a run to sleep for a minute. Returns the claimed run (with its
/// worker) and the sleeping one.
pub(crate) async fn create_sleeping<S: Store + ?Sized>(store: &S) -> (WorkflowRun, WorkflowRun) {
    let claimed = create_claimed(store).await;
    let until = Utc::now() + chrono::Duration::seconds(60);
    let sleeping = store
        .sleep_run(claimed.id, &holder(&claimed), until)
        .await
        .expect("sleep_run");
    assert_eq!(sleeping.status, RunStatus::Sleeping);
    (claimed, sleeping)
}

/// A plain error record.
pub(crate) fn error_value(message: &str) -> Value {
    json!({ "message": message })
}

/// `FailRun` for the run's current owner, with the policy deciding.
pub(crate) fn fail_params(run: &WorkflowRun, message: &str) -> FailRun {
    FailRun {
        run_id: run.id,
        holder: holder(run),
        error: error_value(message),
        force: false,
    }
}

/// Creates `n` runs, `gap` apart, and returns them in creation order.
pub(crate) async fn create_spaced<S: Store>(
    store: &S,
    n: usize,
    gap: Duration,
) -> Vec<WorkflowRun> {
    let mut runs = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 && !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        runs.push(create_pending(store).await);
    }
    runs
}

/// `ListRuns` with a page size.
pub(crate) fn runs_page(n: u32) -> ListRuns {
    ListRuns {
        limit: Some(n),
        ..ListRuns::default()
    }
}

/// A lease that a test lets expire.
pub(crate) const SHORT_LEASE: Duration = Duration::from_millis(600);
/// Long enough for [`SHORT_LEASE`] to expire, with margin.
pub(crate) const PAST_SHORT_LEASE: Duration = Duration::from_millis(1_000);
/// Slack allowed around a computed instant, for rounding to the store's precision.
pub(crate) const SLACK_MS: i64 = 50;
/// The message of the error a claim records on runs whose deadline passed.
pub(crate) const DEADLINE_MESSAGE: &str = "Workflow run deadline exceeded";

/// Asserts that `at` is `delay` after some instant in `[before, after]`.
#[track_caller]
pub(crate) fn assert_delay(
    at: Option<DateTime<Utc>>,
    before: DateTime<Utc>,
    after: DateTime<Utc>,
    delay: Duration,
) {
    let at = at.expect("available_at should be set");
    let delay = i64::try_from(delay.as_millis()).unwrap();
    let earliest = ms_between(before, at);
    let latest = ms_between(after, at);
    assert!(
        earliest >= delay - SLACK_MS && latest <= delay + SLACK_MS,
        "available_at {at} should be {delay} ms after the call (which ran from {before} to {after}), \
         but is {earliest} ms after its start and {latest} ms after its end"
    );
}

/// Sleeps until just after `at`.
pub(crate) async fn sleep_past(at: DateTime<Utc>) {
    let wait = (at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(250)).await;
}

/// Claims a run (which must exist) for a new worker.
pub(crate) async fn claim_one<S: Store + ?Sized>(store: &S, lease: Duration) -> WorkflowRun {
    store
        .claim_run(&new_worker(), lease)
        .await
        .expect("claim_run")
        .expect("a claimable run")
}

/// A run with the given retry policy and deadline.
pub(crate) fn with_policy(policy: RetryPolicy, deadline: Option<DateTime<Utc>>) -> CreateRun {
    CreateRun {
        retry_policy: Some(policy),
        deadline_at: deadline,
        ..CreateRun::new(unique_name())
    }
}

/// Starts a function step named `name` on a run its worker holds.
pub(crate) async fn start_step<S: Store + ?Sized>(
    store: &S,
    run: &WorkflowRun,
    name: &str,
) -> StepAttempt {
    store
        .create_step_attempt(step_params(run, name))
        .await
        .expect("create_step_attempt")
}

/// Parameters of a function step named `name`, for the run's worker.
pub(crate) fn step_params(run: &WorkflowRun, name: &str) -> CreateStepAttempt {
    CreateStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: holder(run),
        step_name: name.to_owned(),
        kind: StepKind::Function,
        config: json!({}),
        context: None,
    }
}

/// Starts `n` steps named `step-0`, `step-1`, ..., `gap` apart.
pub(crate) async fn start_spaced<S: Store + ?Sized>(
    store: &S,
    run: &WorkflowRun,
    n: usize,
    gap: Duration,
) -> Vec<StepAttempt> {
    let mut steps = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 && !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        steps.push(start_step(store, run, &format!("step-{i}")).await);
    }
    steps
}

/// Step names of a page.
pub(crate) fn names(steps: &[StepAttempt]) -> Vec<&str> {
    steps.iter().map(|step| step.step_name.as_str()).collect()
}

/// The first page of a run's attempts with a page size.
pub(crate) fn steps_page(run: &WorkflowRun, n: u32) -> ListStepAttempts {
    ListStepAttempts {
        limit: Some(n),
        ..ListStepAttempts::new(run.id)
    }
}

/// Completes a step as the run's worker.
pub(crate) async fn complete_step<S: Store + ?Sized>(
    store: &S,
    run: &WorkflowRun,
    step: &StepAttempt,
    output: Value,
) -> Result<StepUpdate, StoreError> {
    store
        .complete_step_attempt(run.id, step.id, &holder(run), output)
        .await
}

/// The attempt a `Recorded` update carries.
#[track_caller]
pub(crate) fn recorded(update: StepUpdate) -> StepAttempt {
    match update {
        StepUpdate::Recorded(step) => step,
        other => panic!("expected the step to be recorded, got {other:?}"),
    }
}
