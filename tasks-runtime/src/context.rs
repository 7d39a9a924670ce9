//! The workflow context and the step runner: name resolution, memoization and replay.
//!
//! A run executes inside a task-local [`WorkflowContext`]. Every step call and every durable
//! sleep resolves its name in call order (`name`, `name:1`, `name:2`, ...) and looks it up in
//! the run's step history, loaded once per claim. A completed step returns its stored output;
//! anything else executes. When the run must stop — it sleeps, it was paused or canceled, its
//! lease was lost, the store failed — the context records why and the current future never
//! resolves; the executor sees the halt and drops the workflow future.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tracing::Instrument;
use uuid::Uuid;

use crate::definition::StepDefinition;
use crate::error::StoreError;
use crate::failure::{ErrorRecord, RecordError, WorkflowError};
use crate::model::{RunStatus, StepAttempt, StepKind, StepStatus, WorkflowRun};
use crate::retry::RetryPolicy;
use crate::store::{CreateStepAttempt, RecordStepAttempt, SharedStore, StepUpdate};

tokio::task_local! {
    static CURRENT: WorkflowContext;
}

/// Why a run stopped executing before its workflow function returned.
#[derive(Debug)]
pub(crate) enum Halt {
    /// Park the run until this instant (durable sleep or a long step backoff).
    Sleep(DateTime<Utc>),
    /// The run was paused or canceled by an operator.
    Interrupted(RunStatus),
    /// Another worker holds the run now.
    LeaseLost,
    /// The run cannot continue: fail it for good.
    Fail(ErrorRecord),
    /// The store failed; leave the run for its lease to expire and be retried.
    Store(StoreError),
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
    store: SharedStore,
    run: WorkflowRun,
    worker_id: String,
    limits: ExecutionLimits,
    /// Attempts by resolved step name, oldest first.
    history: Mutex<HashMap<String, Vec<StepAttempt>>>,
    /// How often each base name was resolved so far.
    counters: Mutex<HashMap<String, u32>>,
    resolved: AtomicU32,
    halt: Mutex<Option<Halt>>,
    halted: Notify,
    /// Set by the heartbeat when the run was paused or canceled, or its lease lost.
    interrupted: Mutex<Option<Halt>>,
    /// The error of a step whose retries ran out, if any did.
    exhausted_step: Mutex<Option<ErrorRecord>>,
    /// Finished function-step attempts not written yet, with when each was held (see
    /// [`WorkflowContext::defer`]).
    deferred: Mutex<Vec<(tokio::time::Instant, RecordStepAttempt)>>,
    /// Held while deferred attempts are written, so that whoever writes next waits for a
    /// write in flight.
    writing: tokio::sync::Mutex<()>,
    /// A timer will write the deferred attempts unless the run's next write does first.
    write_scheduled: AtomicBool,
}

/// How long a finished step's record may wait for the run's next write (the next step, a
/// sleep, the completion) before it is written on its own. Workflow code between two steps
/// normally takes microseconds; this bounds the wait when it does not.
const DEFER_WINDOW: Duration = Duration::from_millis(2);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a run stops after the store refused or failed one of its writes.
fn halt_for(error: StoreError) -> Halt {
    match error {
        StoreError::WrongState { status, .. }
            if matches!(status, RunStatus::Paused | RunStatus::Canceled) =>
        {
            Halt::Interrupted(status)
        }
        StoreError::WrongState { .. } | StoreError::LeaseLost { .. } => Halt::LeaseLost,
        other => Halt::Store(other),
    }
}

impl WorkflowContext {
    pub(crate) fn new(
        store: SharedStore,
        run: WorkflowRun,
        worker_id: String,
        history: Vec<StepAttempt>,
        limits: ExecutionLimits,
    ) -> Self {
        let mut by_name: HashMap<String, Vec<StepAttempt>> = HashMap::new();
        for attempt in history {
            by_name
                .entry(attempt.step_name.clone())
                .or_default()
                .push(attempt);
        }
        WorkflowContext {
            inner: Arc::new(RunState {
                store,
                run,
                worker_id,
                limits,
                history: Mutex::new(by_name),
                counters: Mutex::new(HashMap::new()),
                resolved: AtomicU32::new(0),
                halt: Mutex::new(None),
                halted: Notify::new(),
                interrupted: Mutex::new(None),
                exhausted_step: Mutex::new(None),
                deferred: Mutex::new(Vec::new()),
                writing: tokio::sync::Mutex::new(()),
                write_scheduled: AtomicBool::new(false),
            }),
        }
    }

    /// The context of the workflow running on this task, if any.
    pub fn current() -> Option<WorkflowContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `future` with this context installed, so that steps inside it find it.
    pub(crate) fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self.clone(), future)
    }

    /// The run's id.
    pub fn run_id(&self) -> Uuid {
        self.inner.run.id
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

    /// Sleeps durably for `duration`: the run is parked in the store and its worker slot is
    /// freed; any worker resumes it once the time has passed. `name` identifies the timer on
    /// replay (repeats resolve as `name`, `name:1`, ...).
    ///
    /// Outside a running workflow (a context is only made by the worker) this cannot
    /// happen.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<(), WorkflowError> {
        let step_name = self.resolve_name(name)?;
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
                let config = json!({ "durationMs": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX) });
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
        let until = attempt.created_at
            + chrono::Duration::milliseconds(i64::try_from(wait_ms).unwrap_or(i64::MAX));
        // `updated_at` of the claimed run is the database's clock at claim time.
        if until <= self.inner.run.updated_at {
            self.finish(&attempt).await;
            return Ok(());
        }
        tracing::debug!(step.name = %step_name, %until, "durable sleep parks the run");
        self.halt(Halt::Sleep(until)).await
    }

    /// Resolves a step name in call order: `name`, then `name:1`, `name:2`, ...
    fn resolve_name(&self, base: &str) -> Result<String, WorkflowError> {
        let resolved = self.inner.resolved.fetch_add(1, Ordering::SeqCst) + 1;
        if resolved > self.inner.limits.max_steps {
            let record = ErrorRecord::new(format!(
                "workflow run exceeded its limit of {} steps (is a loop calling steps forever?)",
                self.inner.limits.max_steps
            ))
            .with_kind("step_limit")
            .non_retryable();
            self.set_halt(Halt::Fail(record));
            return Err(WorkflowError::msg("step limit exceeded").non_retryable());
        }
        let mut counters = lock(&self.inner.counters);
        let count = counters.entry(base.to_owned()).or_insert(0);
        let name = if *count == 0 {
            base.to_owned()
        } else {
            format!("{base}:{count}")
        };
        *count += 1;
        Ok(name)
    }

    fn last_attempt(&self, step_name: &str) -> Option<StepAttempt> {
        lock(&self.inner.history)
            .get(step_name)
            .and_then(|attempts| attempts.last().cloned())
    }

    fn failed_attempts(&self, step_name: &str) -> u32 {
        lock(&self.inner.history)
            .get(step_name)
            .map_or(0, |attempts| {
                attempts
                    .iter()
                    .filter(|a| a.status == StepStatus::Failed)
                    .count() as u32
            })
    }

    fn remember(&self, attempt: StepAttempt) {
        let mut history = lock(&self.inner.history);
        let attempts = history.entry(attempt.step_name.clone()).or_default();
        match attempts.iter_mut().find(|a| a.id == attempt.id) {
            Some(existing) => *existing = attempt,
            None => attempts.push(attempt),
        }
    }

    fn set_halt(&self, halt: Halt) {
        let mut slot = lock(&self.inner.halt);
        if slot.is_none() {
            *slot = Some(halt);
        }
        drop(slot);
        self.inner.halted.notify_one();
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

    /// Waits until a step or sleep halts the run, and says why.
    pub(crate) async fn halted(&self) -> Halt {
        loop {
            let notified = self.inner.halted.notified();
            if let Some(halt) = lock(&self.inner.halt).take() {
                return halt;
            }
            notified.await;
        }
    }

    /// The halt recorded without the executor having seen it yet (set by name resolution
    /// just before the workflow returned, for instance).
    pub(crate) fn take_halt(&self) -> Option<Halt> {
        lock(&self.inner.halt).take()
    }

    pub(crate) fn exhausted_step(&self) -> Option<ErrorRecord> {
        lock(&self.inner.exhausted_step).clone()
    }

    async fn halt_on_store_error<T>(&self, error: StoreError) -> T {
        self.halt(halt_for(error)).await
    }

    /// Holds a completed step's record until the run's next write, so that a workflow
    /// that returns right after its last step completes with that step in the same
    /// transaction (see [`Store::complete_run_with_steps`]). Every write of the run, and
    /// every step before it runs, writes what is held first ([`Self::flush`]); a timer
    /// writes it after [`DEFER_WINDOW`] if nothing else did.
    fn defer(&self, params: RecordStepAttempt) {
        lock(&self.inner.deferred).push((tokio::time::Instant::now(), params));
        if !self.inner.write_scheduled.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().write_held_too_long());
        }
    }

    /// The timer of [`Self::defer`]: writes the held records once the oldest has waited
    /// [`DEFER_WINDOW`], and ends when none is held. Records held for less are left to the
    /// run's next write, which normally comes first.
    async fn write_held_too_long(self) {
        loop {
            let oldest = lock(&self.inner.deferred).first().map(|(at, _)| *at);
            match oldest {
                Some(at) if at.elapsed() >= DEFER_WINDOW => {
                    if let Some(halt) = self.write_deferred().await {
                        self.set_halt(halt);
                        return;
                    }
                }
                Some(at) => tokio::time::sleep_until(at + DEFER_WINDOW).await,
                None => {
                    self.inner.write_scheduled.store(false, Ordering::SeqCst);
                    // A record held just now found the flag still set: stay for it.
                    let held = !lock(&self.inner.deferred).is_empty();
                    if !held || self.inner.write_scheduled.swap(true, Ordering::SeqCst) {
                        return;
                    }
                }
            }
        }
    }

    /// Writes the held records, after any write of them in flight. Says why the run must
    /// stop when a record was refused.
    pub(crate) async fn write_deferred(&self) -> Option<Halt> {
        let _writing = self.inner.writing.lock().await;
        let held = std::mem::take(&mut *lock(&self.inner.deferred));
        if held.is_empty() {
            return None;
        }
        let held = held.into_iter().map(|(_, params)| params);
        // Several only after parallel steps; their records share the store's next batch.
        let store = &self.inner.store;
        let written = futures::future::join_all(held.map(|p| store.record_step_attempt(p))).await;
        let mut halt = None;
        for result in written {
            match result {
                Ok(StepUpdate::Recorded(attempt)) => self.remember(attempt),
                Ok(StepUpdate::Interrupted { run_status }) => {
                    halt.get_or_insert(Halt::Interrupted(run_status));
                }
                Err(error) => {
                    halt.get_or_insert(halt_for(error));
                }
            }
        }
        halt
    }

    /// Takes the held records for the run's completion, after any write of them in flight.
    pub(crate) async fn take_deferred(&self) -> Vec<RecordStepAttempt> {
        let _writing = self.inner.writing.lock().await;
        std::mem::take(&mut *lock(&self.inner.deferred))
            .into_iter()
            .map(|(_, params)| params)
            .collect()
    }

    /// Makes every completed step durable before the run writes anything else or runs
    /// another step; halts when that fails.
    async fn flush(&self) {
        if let Some(halt) = self.write_deferred().await {
            self.halt::<()>(halt).await;
        }
        // A write by the timer may have failed just before: it set the halt.
        if lock(&self.inner.halt).is_some() {
            std::future::pending::<()>().await;
        }
    }

    async fn start_attempt(&self, step_name: &str, kind: StepKind, config: Value) -> StepAttempt {
        self.flush().await;
        let created = self
            .inner
            .store
            .create_step_attempt(CreateStepAttempt {
                run_id: self.inner.run.id,
                worker_id: self.inner.worker_id.clone(),
                step_name: step_name.to_owned(),
                kind,
                config,
                context: None,
            })
            .await;
        match created {
            Ok(attempt) => {
                self.remember(attempt.clone());
                attempt
            }
            Err(error) => self.halt_on_store_error(error).await,
        }
    }

    /// A finished function-step attempt, as written.
    fn finished_attempt(
        &self,
        step_name: &str,
        config: Value,
        result: Result<Value, Value>,
        elapsed: Duration,
    ) -> RecordStepAttempt {
        let (status, output, error) = match result {
            Ok(output) => (StepStatus::Completed, Some(output), None),
            Err(error) => (StepStatus::Failed, None, Some(error)),
        };
        RecordStepAttempt {
            run_id: self.inner.run.id,
            worker_id: self.inner.worker_id.clone(),
            step_name: step_name.to_owned(),
            kind: StepKind::Function,
            config,
            status,
            output,
            error,
            elapsed,
        }
    }

    /// Writes a finished function-step attempt in one statement (after any held ones);
    /// halts when the run was interrupted or taken over meanwhile.
    async fn record(
        &self,
        step_name: &str,
        config: Value,
        result: Result<Value, Value>,
        elapsed: Duration,
    ) -> StepAttempt {
        self.flush().await;
        let params = self.finished_attempt(step_name, config, result, elapsed);
        let update = self.inner.store.record_step_attempt(params).await;
        match update {
            Ok(StepUpdate::Recorded(attempt)) => {
                self.remember(attempt.clone());
                attempt
            }
            Ok(StepUpdate::Interrupted { run_status }) => {
                self.halt(Halt::Interrupted(run_status)).await
            }
            Err(error) => self.halt_on_store_error(error).await,
        }
    }

    /// Completes a running attempt (a durable sleep); halts when the run was interrupted
    /// meanwhile.
    async fn finish(&self, attempt: &StepAttempt) -> StepAttempt {
        let update = self
            .inner
            .store
            .complete_step_attempt(
                self.inner.run.id,
                attempt.id,
                &self.inner.worker_id,
                Value::Null,
            )
            .await;
        match update {
            Ok(StepUpdate::Recorded(attempt)) => {
                self.remember(attempt.clone());
                attempt
            }
            Ok(StepUpdate::Interrupted { run_status }) => {
                self.halt(Halt::Interrupted(run_status)).await
            }
            Err(error) => self.halt_on_store_error(error).await,
        }
    }
}

/// Runs one call of a `#[step]` function: returns the memoized output when the step
/// already completed in this run, and otherwise executes it, retrying with the step's
/// policy.
///
/// Outside a workflow run (no [`WorkflowContext`] on the task) the step is an ordinary
/// async function call: it runs once, is not recorded and is not retried. That keeps steps
/// usable from unit tests and plain code.
pub async fn run_step<T, E, F, Fut>(definition: &'static StepDefinition, mut f: F) -> Result<T, E>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: RecordError + Send,
{
    let Some(ctx) = WorkflowContext::current() else {
        return f().await;
    };
    let step_name = match ctx.resolve_name(definition.name) {
        Ok(name) => name,
        Err(_) => {
            return ctx
                .halt(Halt::Fail(ErrorRecord::new("step limit exceeded")))
                .await
        }
    };
    ctx.check_interrupted().await;

    if let Some(done) = ctx
        .last_attempt(&step_name)
        .filter(|a| a.status == StepStatus::Completed)
    {
        let output = done.output.unwrap_or(Value::Null);
        return match serde_json::from_value(output) {
            Ok(value) => Ok(value),
            Err(error) => {
                let record = ErrorRecord::new(format!(
                    "the stored output of step {step_name} no longer matches its type ({error}); \
                     was the step changed without changing the workflow version?"
                ))
                .with_kind("replay")
                .non_retryable();
                ctx.halt(Halt::Fail(record)).await
            }
        };
    }

    let policy = definition.retry_policy.unwrap_or(RetryPolicy::DEFAULT_STEP);
    let mut attempt_number = ctx.failed_attempts(&step_name) + 1;
    // Earlier steps are durable before this one has any effect.
    ctx.flush().await;
    loop {
        let config = json!({
            "attempt": attempt_number,
            "retryPolicy": policy,
        });
        let span = tracing::info_span!(
            "step",
            run.id = %ctx.run_id(),
            workflow.name = %ctx.workflow_name(),
            step.name = %step_name,
            attempt = attempt_number,
        );
        let started = std::time::Instant::now();
        let result = f().instrument(span).await;
        let elapsed = started.elapsed();
        // The attempt is written once, when it has finished: at most one commit per step.
        match result {
            Ok(value) => {
                let output = match serde_json::to_value(&value) {
                    Ok(output) => output,
                    Err(error) => {
                        let record = ErrorRecord::new(format!(
                            "the output of step {step_name} could not be serialized: {error}"
                        ))
                        .with_kind("output")
                        .non_retryable();
                        ctx.record(&step_name, config, Err(record.to_json()), elapsed)
                            .await;
                        return ctx.halt(Halt::Fail(record)).await;
                    }
                };
                // Written before the run's next write or step, or with its completion.
                ctx.defer(ctx.finished_attempt(&step_name, config, Ok(output), elapsed));
                return Ok(value);
            }
            Err(error) => {
                let record = error.to_record().with_kind("step");
                tracing::warn!(run.id = %ctx.run_id(), step.name = %step_name, attempt = attempt_number, error = %record, "step failed");
                let failed = ctx
                    .record(&step_name, config, Err(record.to_json()), elapsed)
                    .await;
                match policy.delay_after(attempt_number) {
                    Some(delay) if delay <= ctx.inner.limits.park_threshold => {
                        tokio::time::sleep(delay).await;
                        ctx.check_interrupted().await;
                        attempt_number += 1;
                    }
                    Some(delay) => {
                        let since = failed.finished_at.unwrap_or(failed.updated_at);
                        let until = since
                            + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
                        return ctx.halt(Halt::Sleep(until)).await;
                    }
                    None => {
                        let record = record.non_retryable();
                        *lock(&ctx.inner.exhausted_step) = Some(record);
                        return Err(error);
                    }
                }
            }
        }
    }
}
