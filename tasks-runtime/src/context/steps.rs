//! The step runner: one call of a `#[step]` function, memoized, replayed or executed with
//! its retries, and the check that its output can be stored and read back.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::Instrument;

use super::WorkflowContext;
use crate::definition::step::StepDefinition;
use crate::failure::{ErrorRecord, panic_message};
use crate::limits::{self, Field};
use crate::model::{StepKind, StepStatus};
use crate::replay::{Call, Resolved};
use crate::retry::RetryPolicy;
use crate::session::{Halt, lock};
use crate::step_args::ArgsRecorder;
use crate::step_failure::{
    RETRY_AFTER_KIND, ReplayError, TIMEOUT_KIND, final_error_json, rebuild_final, timeout_error,
};

tokio::task_local! {
    /// Set while a step's body runs, on the step's task.
    static STEP_BODY: ();
}

/// Whether the caller runs inside a `#[step]` body (on the step's own task).
pub(super) fn in_step_body() -> bool {
    STEP_BODY.try_with(|()| ()).is_ok()
}

/// Runs one call of a `#[step]` function: returns the memoized output when the step
/// already completed in this run, the stored final error when its retries ran out (rebuilt
/// through [`ReplayError`]), and otherwise executes it, retrying with the step's policy.
///
/// Outside a workflow run (no [`WorkflowContext`] on the task) the step is an ordinary
/// async function call: it runs once, is not recorded and is not retried. That keeps steps
/// usable from unit tests and plain code.
///
/// `f` gets the call's [`ArgsRecorder`]: the arguments it records on the first attempt
/// that runs are stored with every attempt of this call.
pub async fn run_step<T, E, F, Fut, Via>(
    definition: &'static StepDefinition,
    mut f: F,
) -> Result<T, E>
where
    F: FnMut(&mut ArgsRecorder) -> Fut + Send,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + DeserializeOwned + Send,
    E: ReplayError<Via> + Send,
{
    let Some(ctx) = WorkflowContext::current() else {
        return f(&mut ArgsRecorder::off()).await;
    };
    let call = Call {
        kind: StepKind::Function,
        path: Some(definition.path),
        signature: Some(definition.signature),
    };
    let (step_name, call) = match ctx.resolve_call(definition.name, call) {
        Ok(Resolved { name, record }) => (name, record),
        // The halt that says why is set; this one only stands in when none is.
        Err(_) => {
            return ctx
                .halt(Halt::Fail(ErrorRecord::new("step limit exceeded")))
                .await;
        }
    };
    ctx.check_interrupted().await;

    if let Some(done) = ctx.completed_attempt(&step_name) {
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

    // A final error handed to the workflow before: handed back again, so that the workflow
    // takes the same branch as the first time.
    if let Some(last) = ctx.last_attempt(&step_name)
        && last.status == StepStatus::Failed
        && let Some(stored) = &last.error
        && let Some((record, rebuilt)) = rebuild_final::<E, Via>(stored)
    {
        return match rebuilt {
            Ok(error) => {
                *lock(&ctx.inner.exhausted_step) = Some(record.non_retryable());
                Err(error)
            }
            Err(reason) => {
                let record = ErrorRecord::new(format!(
                    "the stored error of step {step_name} no longer matches its type ({reason}); \
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
    let mut recorder = ArgsRecorder::new();
    loop {
        let mut config = json!({
            "attempt": attempt_number,
            "retryPolicy": policy,
            "call": call,
        });
        if let Some(timeout) = definition.timeout {
            config["timeoutMs"] = json!(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        }
        let span = tracing::info_span!(
            "step",
            run.id = %ctx.run_id(),
            workflow.name = %ctx.workflow_name(),
            step.name = %step_name,
            attempt = attempt_number,
        );
        // A worker that may have lost the run (stopped or starved past its lease or its
        // heartbeat's staleness) confirms it holds the run before the body has any effect.
        if let Err(halt) = ctx.inner.session.confirm_held(&step_name).await {
            return ctx.halt(halt).await;
        }
        let started = std::time::Instant::now();
        // A panic fails this attempt, retried by the step's policy like an error; so does
        // running past the step's timeout, which drops the attempt's future.
        let attempt = async {
            match definition.timeout {
                Some(timeout) => tokio::time::timeout(timeout, f(&mut recorder))
                    .await
                    .map_err(|_| timeout),
                None => Ok(f(&mut recorder).await),
            }
        };
        let result = AssertUnwindSafe(STEP_BODY.scope((), attempt))
            .catch_unwind()
            .instrument(span)
            .await;
        let elapsed = started.elapsed();
        let args = recorder.args();
        let outcome = match &result {
            Ok(Ok(Ok(_))) => "completed",
            Ok(Ok(Err(_))) => "failed",
            Ok(Err(_)) => TIMEOUT_KIND,
            Err(_) => "panic",
        };
        crate::metrics::step_attempt(
            ctx.workflow_name().to_owned(),
            definition.name,
            outcome,
            elapsed,
        );
        // The attempt is written once, when it has finished: at most one commit per step.
        let (record, error) = match result {
            Ok(Ok(Ok(value))) => {
                let output = match storable_output(&step_name, &value) {
                    Ok(output) => output,
                    Err(record) => {
                        ctx.record(&step_name, config, args, Err(record.to_json()), elapsed)
                            .await;
                        return ctx.halt(Halt::Fail(record)).await;
                    }
                };
                // Written before the run's next write or step, or with its completion.
                let session = &ctx.inner.session;
                let params =
                    session.finished_attempt(&step_name, config, args, Ok(output), elapsed);
                if let Err(halt) = session.hold(params) {
                    return ctx.halt(halt).await;
                }
                return Ok(value);
            }
            Ok(Ok(Err(error))) => (error.failure_record().with_kind("step"), Some(error)),
            Ok(Err(timeout)) => {
                let record =
                    ErrorRecord::new(format!("step {step_name} timed out after {timeout:?}"))
                        .with_kind(TIMEOUT_KIND);
                let error = timeout_error::<E, Via>(&record);
                (record, error)
            }
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                let record = ErrorRecord::new(format!("step {step_name} panicked: {message}"))
                    .with_kind("panic");
                (record, None)
            }
        };
        // An error that asks to be retried after a delay parks the run until then; the
        // attempt is recorded (kind `retry_after`) but does not count against the policy.
        if record.retryable
            && let Some(wait) = record.retry_after
        {
            if let Err(limit) = limits::check_duration(Field::RetryAfter, wait) {
                let refused = ErrorRecord::from_error(&limit)
                    .with_kind("limit")
                    .non_retryable();
                ctx.record(&step_name, config, args, Err(refused.to_json()), elapsed)
                    .await;
                return ctx.halt(Halt::Fail(refused)).await;
            }
            let record = record.with_kind(RETRY_AFTER_KIND);
            tracing::info!(run.id = %ctx.run_id(), step.name = %step_name, attempt = attempt_number, error = %record, ?wait, "step asked to be retried later; the run parks");
            let parked = ctx
                .record(&step_name, config, args, Err(record.to_json()), elapsed)
                .await;
            let since = parked.finished_at.unwrap_or(parked.updated_at);
            let until =
                limits::add_duration(Field::RetryAfter, since, wait).unwrap_or(limits::LATEST);
            return ctx.halt(Halt::Sleep(until)).await;
        }
        tracing::warn!(run.id = %ctx.run_id(), step.name = %step_name, attempt = attempt_number, error = %record, "step failed");
        // A non-retryable error (`WorkflowError::non_retryable`) ends the step's attempts at
        // once, whatever its policy has left.
        let delay = if record.retryable {
            policy.delay_after(attempt_number)
        } else {
            None
        };
        // The final error goes back to the workflow: it is stored so that a replay can hand
        // it back without running the step; one that cannot be stored fails the run.
        let stored = match (&delay, &error) {
            (None, Some(error)) => match error
                .replay_data()
                .and_then(|data| final_error_json(&record, data))
            {
                Ok(stored) => stored,
                Err(reason) => {
                    let refused = ErrorRecord::new(format!(
                        "the error of step {step_name} cannot be stored for replay ({reason}): {record}"
                    ))
                    .with_kind("output")
                    .non_retryable();
                    ctx.record(&step_name, config, args, Err(refused.to_json()), elapsed)
                        .await;
                    return ctx.halt(Halt::Fail(refused)).await;
                }
            },
            _ => record.to_json(),
        };
        let failed = ctx
            .record(&step_name, config, args, Err(stored), elapsed)
            .await;
        match delay {
            Some(delay) if delay <= ctx.inner.limits.park_threshold => {
                tokio::time::sleep(delay).await;
                ctx.check_interrupted().await;
                attempt_number += 1;
            }
            Some(delay) => {
                let since = failed.finished_at.unwrap_or(failed.updated_at);
                let until = limits::add_duration(Field::RetryInterval, since, delay)
                    .unwrap_or(limits::LATEST);
                return ctx.halt(Halt::Sleep(until)).await;
            }
            None => {
                let record = record.non_retryable();
                match error {
                    Some(error) => {
                        *lock(&ctx.inner.exhausted_step) = Some(record);
                        return Err(error);
                    }
                    // A panic (or a timeout of a step whose error type has no room for
                    // one) has no error of the step's type to hand back: the run fails.
                    None => return ctx.halt(Halt::Fail(record)).await,
                }
            }
        }
    }
}

/// The JSON of a step's output, if it can be stored and read back as the same value: it
/// holds no NaN or infinite float (they serialize as `null`, which reads back as something
/// else: `None` for an `Option<f64>`), decodes into `T` again and fits the [`limits`]. Otherwise the non-retryable error that fails the attempt:
/// recording it as completed would make a replay disagree with the first execution.
fn storable_output<T: Serialize + DeserializeOwned>(
    step_name: &str,
    value: &T,
) -> Result<Value, ErrorRecord> {
    let refuse = |reason: String| {
        ErrorRecord::new(format!("the output of step {step_name} {reason}"))
            .with_kind("output")
            .non_retryable()
    };
    limits::check_finite(value)
        .map_err(|found| refuse(format!("would not read back as the same value: {found}")))?;
    let output = serde_json::to_value(value)
        .map_err(|error| refuse(format!("could not be serialized: {error}")))?;
    limits::check_json(Field::StepOutput, &output)
        .map_err(|error| refuse(format!("cannot be stored: {error}")))?;
    limits::check_round_trip::<T>(&output).map_err(|error| {
        refuse(format!(
            "would not read back as the same value (a NaN or infinite float is stored as \
             null): {error}"
        ))
    })?;
    Ok(output)
}
