//! The workflow context and the step runner: name resolution, memoization and replay.
//!
//! A run executes inside a task-local [`WorkflowContext`]. Every step call and every durable
//! sleep resolves its name in call order (`name`, `name:1`, `name:2`, ...) and looks it up in
//! the run's step history, loaded once per claim. A completed step returns its stored output;
//! anything else executes. When the run must stop — it sleeps, it was paused or canceled, its
//! lease was lost, the store failed — the context records why and the current future never
//! resolves; the executor sees the halt and drops the workflow future.
//!
//! This module holds the context itself, its durable sleep and patches, and what the
//! calls share (name resolution, halts, the writes of attempts); the step runner
//! ([`run_step`]) is in `steps`, and the other durable primitives in `branches`,
//! `children`, `events`, `select` and `state`; the recorded values (`ctx.now()`, `ctx.uuid()`, ...)
//! in `recorded`.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::failure::{ErrorRecord, WorkflowError};
use crate::limits::{self, Field};
use crate::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use crate::replay::{
    Call, NonDeterminism, Patch, Replay, ResolveError, Resolved, StepLimitExceeded,
};
use crate::session::{Halt, RunSession, lock};

pub(crate) mod branches;
pub(crate) mod children;
mod continuation;
pub(crate) mod events;
mod recorded;
pub(crate) mod select;
pub(crate) mod state;
mod steps;

pub use steps::run_step;

tokio::task_local! {
    static CURRENT: WorkflowContext;
}

/// Settings the executor passes to every run.
#[derive(Debug, Clone)]
pub(crate) struct ExecutionLimits {
    /// Stop runs that resolve more step names than this.
    pub max_steps: u32,
    /// Step retries waiting longer than this park the run instead of holding its slot.
    pub park_threshold: Duration,
}

/// Handle to the running workflow; the first argument of every `#[workflow]` function.
///
/// It is cheap to clone. Steps find it on their own (it is task-local while the workflow
/// runs), so it only needs passing to call its own methods, such as
/// [`WorkflowContext::sleep`].
#[derive(Clone)]
pub struct WorkflowContext {
    inner: Arc<RunState>,
    /// The name of the branch ([`WorkflowContext::spawn`]) this context runs in, which
    /// scopes every name it resolves (`branch/step`); `None` for the workflow itself.
    scope: Option<Arc<str>>,
}

impl std::fmt::Debug for WorkflowContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowContext")
            .field("run_id", &self.inner.run.id)
            .field("workflow", &self.inner.run.workflow_name)
            .finish_non_exhaustive()
    }
}

struct RunState {
    run: WorkflowRun,
    limits: ExecutionLimits,
    /// The run's writes, and why it stops.
    session: Arc<RunSession>,
    /// Name resolution and the run's history (see [`Replay`]).
    replay: Mutex<Replay>,
    /// Set by the heartbeat when the run was paused or canceled, or its lease lost.
    interrupted: Mutex<Option<Halt>>,
    /// The error of a step whose retries ran out, if any did.
    exhausted_step: Mutex<Option<ErrorRecord>>,
    /// The first call the code made that its history contradicts, if any did.
    nondeterminism: Mutex<Option<NonDeterminism>>,
    /// The tasks of the run's branches ([`WorkflowContext::spawn`]), aborted when the
    /// execution ends.
    branches: Mutex<tokio::task::JoinSet<()>>,
    /// When this execution began, soon after the claim (`run.updated_at`, the database's
    /// clock): with it, an instant on the database's clock is known without asking.
    claimed: std::time::Instant,
}

impl WorkflowContext {
    pub(crate) fn new(
        session: Arc<RunSession>,
        run: WorkflowRun,
        history: Vec<StepAttempt>,
        limits: ExecutionLimits,
    ) -> Self {
        let replay = Replay::new(history, run.retried_at, limits.max_steps);
        WorkflowContext {
            inner: Arc::new(RunState {
                run,
                limits,
                session,
                replay: Mutex::new(replay),
                interrupted: Mutex::new(None),
                exhausted_step: Mutex::new(None),
                nondeterminism: Mutex::new(None),
                branches: Mutex::new(tokio::task::JoinSet::new()),
                claimed: std::time::Instant::now(),
            }),
            scope: None,
        }
    }

    /// The context of the workflow running on this task, if any.
    pub fn current() -> Option<WorkflowContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `future` with this context installed, so that steps inside it find it.
    pub(crate) fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        CURRENT.scope(self.clone(), future)
    }

    /// The run's id.
    pub fn run_id(&self) -> Uuid {
        self.inner.run.id
    }

    /// The id of the run's lineage: the id of the first run of the runs that continued as
    /// new one after the other (see [`WorkflowContext::continue_as_new`]); the run's own id
    /// when it continues no other.
    pub fn lineage_id(&self) -> Uuid {
        self.inner.run.lineage_id()
    }

    /// The run this one continued from ([`WorkflowContext::continue_as_new`]), if any.
    pub fn continued_from(&self) -> Option<Uuid> {
        self.inner.run.continued_from_run_id
    }

    /// The workflow's name.
    pub fn workflow_name(&self) -> &str {
        &self.inner.run.workflow_name
    }

    /// The workflow version the run is pinned to.
    pub fn version(&self) -> Option<&str> {
        self.inner.run.version.as_deref()
    }

    /// Which attempt of the run this is: 1 for the first execution, 2 after one retry or
    /// takeover, ... Waking from a durable sleep continues the same attempt.
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.inner.run.attempts).unwrap_or(0)
    }

    /// The caller context stored with the run.
    pub fn run_context(&self) -> Option<&Value> {
        self.inner.run.context.as_ref()
    }

    /// The W3C trace context stored with the run, which its executions join (see
    /// [`crate::trace`]): the same on every replay, on every worker.
    pub fn trace_context(&self) -> Option<&crate::trace::TraceContext> {
        self.inner.run.trace_context.as_ref()
    }

    /// The slot this run was started for, when a schedule started it (see
    /// [`crate::schedule`]): the instant the cron expression named, not when the run
    /// started. The same on every replay and attempt. It is stored in the run's context
    /// ([`run_context`](Self::run_context)) as `scheduledAt`, next to the schedule's name
    /// under `schedule`.
    pub fn scheduled_at(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        crate::schedule::scheduled_at(self.inner.run.context.as_ref())
    }

    /// Sleeps durably for `duration`: the run is parked in the store and its worker slot is
    /// freed; any worker resumes it once the time has passed. `name` identifies the timer on
    /// replay (repeats resolve as `name`, `name:1`, ...).
    ///
    /// A duration longer than [`MAX_DURATION`](crate::limits::MAX_DURATION) is a
    /// non-retryable error (a [`LimitError`](crate::LimitError)) returned to the workflow;
    /// nothing is recorded for it.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<(), WorkflowError> {
        limits::check_duration(Field::Sleep, duration)
            .map_err(|error| WorkflowError::from(error).non_retryable())?;
        let Resolved {
            name: step_name,
            record: call,
        } = self.resolve_call(name, Call::of(StepKind::Sleep))?;
        self.check_interrupted().await;
        let previous = self.last_attempt(&step_name);
        let attempt = match previous {
            Some(attempt) if attempt.status == StepStatus::Completed => return Ok(()),
            Some(attempt)
                if attempt.kind == StepKind::Sleep && attempt.status == StepStatus::Running =>
            {
                attempt
            }
            _ => {
                let config = json!({
                    "durationMs": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                    "call": call,
                });
                let attempt = self
                    .start_attempt(&step_name, StepKind::Sleep, config)
                    .await;
                if duration.is_zero() {
                    self.finish(&attempt).await;
                    return Ok(());
                }
                attempt
            }
        };
        let wait_ms = attempt
            .config
            .get("durationMs")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let wait = Duration::from_millis(wait_ms);
        let until = match limits::add_duration(Field::Sleep, attempt.created_at, wait) {
            Ok(until) => until,
            Err(error) => {
                let record = ErrorRecord::from_error(&error)
                    .with_kind("limit")
                    .non_retryable();
                return self.halt(Halt::Fail(record)).await;
            }
        };
        // `updated_at` of the claimed run is the database's clock at claim time.
        if until <= self.inner.run.updated_at {
            self.finish(&attempt).await;
            return Ok(());
        }
        tracing::debug!(step.name = %step_name, %until, "durable sleep parks the run");
        self.halt(Halt::Sleep(until)).await
    }

    /// Resolves a call's step name in call order (`name`, then `name:1`, `name:2`, ...) and
    /// checks it against the history (see [`crate::replay`]). Past the worker's step limit,
    /// with a name the stores cannot hold or a chosen name holding the suffix's `:`
    /// (see [`crate::replay`]'s `check_chosen_name`), or with code that no longer matches the history
    /// ([`NonDeterminism`]), the run fails: the halt is set and the error returned.
    fn resolve_call(&self, base: &str, call: Call<'_>) -> Result<Resolved, WorkflowError> {
        let resolved = lock(&self.inner.replay).resolve(base, self.scope.as_deref(), call);
        if let Ok(Resolved { name, .. }) = &resolved
            && let Err(error) = limits::check_step_name(name)
        {
            let record = ErrorRecord::from_error(&error)
                .with_kind("limit")
                .non_retryable();
            self.set_halt(Halt::Fail(record));
            return Err(WorkflowError::from(error).non_retryable());
        }
        resolved.map_err(|error| match error {
            ResolveError::Reserved(error) => {
                let record = ErrorRecord::from_error(&error)
                    .with_kind("limit")
                    .non_retryable();
                self.set_halt(Halt::Fail(record));
                WorkflowError::from(error).non_retryable()
            }
            ResolveError::Limit(StepLimitExceeded { limit }) => {
                let record = ErrorRecord::new(format!(
                    "workflow run exceeded its limit of {limit} steps (is a loop calling steps \
                     forever?); a workflow that loops for long should continue as new every so \
                     many iterations (`ctx.continue_as_new`), which starts a successor with an \
                     empty history"
                ))
                .with_kind("step_limit")
                .non_retryable();
                self.set_halt(Halt::Fail(record));
                WorkflowError::msg("step limit exceeded").non_retryable()
            }
            ResolveError::NonDeterminism(error) => {
                tracing::error!(run.id = %self.run_id(), %error, "the workflow's code does not match the run's history");
                lock(&self.inner.nondeterminism).get_or_insert_with(|| (*error).clone());
                let record = ErrorRecord::from_error(&*error)
                    .with_kind(NonDeterminism::KIND)
                    .non_retryable();
                self.set_halt(Halt::Fail(record));
                WorkflowError::from_boxed(error).non_retryable()
            }
        })
    }

    /// Whether this run takes the code guarded by the patch `patch`: the way to change a
    /// workflow's code in place without breaking its runs in flight.
    ///
    /// ```ignore
    /// if ctx.patched("fraud-check").await? {
    ///     fraud_check(&order).await?; // the new code
    /// }
    /// charge(&order).await?;
    /// ```
    ///
    /// - A run that reaches this point for the first time (every new run, and a run whose
    ///   history ends before it) takes the patch: a marker attempt of kind
    ///   [`StepKind::Patch`] is recorded, and every replay of the run returns `true` here.
    /// - A run that went past this point before the patch was deployed (its history holds
    ///   calls made after it) returns `false`, and so replays down the old code's path.
    ///
    /// Patch markers take no position among the run's calls, so the steps after the
    /// patch keep theirs. Once no run in flight predates the patch, the `if` can go (keep
    /// its body), and so can the marker check: the markers left in old histories are never
    /// read again. A patch name follows the rules of step names, and is not made of digits
    /// alone: its marker, `patch:NAME`, would then be the name of a later call of a step
    /// named `patch` (whose calls after the first are `patch:1`, `patch:2`, ...).
    pub async fn patched(&self, patch: &str) -> Result<bool, WorkflowError> {
        crate::limits::is_valid_name(patch).map_err(|reason| {
            WorkflowError::msg(format!("invalid patch name {patch:?}: {reason}")).non_retryable()
        })?;
        if patch.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(WorkflowError::msg(format!(
                "invalid patch name {patch:?}: digits alone are a call's suffix (its marker \
                 would be the name of a later call of a step named `patch`)"
            ))
            .non_retryable());
        }
        let marker = crate::replay::patch_marker(patch);
        limits::check_step_name(&marker)
            .map_err(|error| WorkflowError::from(error).non_retryable())?;
        let found = lock(&self.inner.replay).patch(patch);
        match found {
            Patch::Taken => Ok(true),
            Patch::Skipped => Ok(false),
            Patch::New => {
                self.check_interrupted().await;
                let session = &self.inner.session;
                let mut params = session.finished_attempt(
                    &marker,
                    json!({ "patch": patch }),
                    None,
                    Ok(Value::Null),
                    Duration::ZERO,
                );
                params.kind = StepKind::Patch;
                // Written with the run's next write, like a completed step: the patched
                // code's first effect makes it durable first.
                if let Err(halt) = session.hold(params) {
                    return self.halt(halt).await;
                }
                Ok(true)
            }
        }
    }

    fn last_attempt(&self, step_name: &str) -> Option<StepAttempt> {
        lock(&self.inner.replay).last(step_name).cloned()
    }

    fn completed_attempt(&self, step_name: &str) -> Option<StepAttempt> {
        lock(&self.inner.replay).completed(step_name).cloned()
    }

    fn failed_attempts(&self, step_name: &str) -> u32 {
        lock(&self.inner.replay).failed_attempts(step_name)
    }

    fn remember(&self, attempt: StepAttempt) {
        lock(&self.inner.replay).remember(attempt);
    }

    fn set_halt(&self, halt: Halt) {
        self.inner.session.set_halt(halt);
    }

    /// Records why the run stops and never returns: the executor drops this future.
    async fn halt<T>(&self, halt: Halt) -> T {
        self.set_halt(halt);
        std::future::pending().await
    }

    /// Halts at this step boundary if the heartbeat saw a pause, cancel or lost lease.
    async fn check_interrupted(&self) {
        let interrupted = lock(&self.inner.interrupted).take();
        if let Some(halt) = interrupted {
            self.halt::<()>(halt).await;
        }
    }

    pub(crate) fn interrupt(&self, halt: Halt) {
        let mut slot = lock(&self.inner.interrupted);
        if slot.is_none() {
            *slot = Some(halt);
        }
    }

    /// Now, on the database's clock: the claim's time plus the time elapsed since.
    pub(crate) fn database_now(&self) -> chrono::DateTime<chrono::Utc> {
        let elapsed = chrono::Duration::from_std(self.inner.claimed.elapsed())
            .unwrap_or(chrono::Duration::zero());
        self.inner.run.updated_at + elapsed
    }

    pub(crate) fn exhausted_step(&self) -> Option<ErrorRecord> {
        lock(&self.inner.exhausted_step).clone()
    }

    /// The first call of this execution that its history contradicted, if any did.
    pub(crate) fn nondeterminism(&self) -> Option<NonDeterminism> {
        lock(&self.inner.nondeterminism).clone()
    }

    /// How many calls this execution resolved so far.
    pub(crate) fn calls_resolved(&self) -> u32 {
        lock(&self.inner.replay).resolved()
    }

    /// The first call the history recorded in the workflow's own scope that this execution
    /// has not made (see [`Replay::unreached`]).
    pub(crate) fn unreached_call(&self) -> Option<crate::replay::CallIdentity> {
        lock(&self.inner.replay).unreached()
    }

    /// Makes every completed step durable before the run writes anything else or runs
    /// another step; halts when that fails.
    async fn flush(&self) {
        match self.inner.session.write_held().await {
            Ok(written) => written
                .into_iter()
                .for_each(|attempt| self.remember(attempt)),
            Err(halt) => self.halt::<()>(halt).await,
        }
        // A write by the timer may have failed just before: it set the halt.
        if self.inner.session.is_halted() {
            std::future::pending::<()>().await;
        }
    }

    /// The attempt a write returned, remembered for replay; or the halt it caused.
    async fn written(&self, result: Result<StepAttempt, Halt>) -> StepAttempt {
        match result {
            Ok(attempt) => {
                self.remember(attempt.clone());
                attempt
            }
            Err(halt) => self.halt(halt).await,
        }
    }

    async fn start_attempt(&self, step_name: &str, kind: StepKind, config: Value) -> StepAttempt {
        self.flush().await;
        let created = self
            .inner
            .session
            .start_attempt(step_name, kind, config)
            .await;
        self.written(created).await
    }

    /// Writes a finished function-step attempt in one statement (after any held ones);
    /// halts when the run was interrupted or taken over meanwhile.
    async fn record(
        &self,
        step_name: &str,
        config: Value,
        args: Option<Value>,
        result: Result<Value, Value>,
        elapsed: Duration,
    ) -> StepAttempt {
        self.flush().await;
        let session = &self.inner.session;
        let params = session.finished_attempt(step_name, config, args, result, elapsed);
        self.written(session.record(params).await).await
    }

    /// Completes a running attempt (a durable sleep); halts when the run was interrupted
    /// meanwhile.
    async fn finish(&self, attempt: &StepAttempt) -> StepAttempt {
        let finished = self
            .inner
            .session
            .finish_attempt(&attempt.step_name, attempt.id)
            .await;
        self.written(finished).await
    }
}
