//! Executes one claimed run: replay its history, run the workflow function, and record the
//! outcome — unless the run was paused, canceled or taken over meanwhile.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::Holder;
use crate::context::{ExecutionLimits, WorkflowContext};
use crate::definition::WorkflowDefinition;
use crate::error::StoreError;
use crate::failure::ErrorRecord;
use crate::liveness::BeatClock;
use crate::model::{RunStatus, WorkflowRun};
use crate::session::{Halt, RunSession, limit_failure, retrying};
use crate::store::{ClaimedRun, FailRun, SharedStore};

/// How much of the reason a step row does not decode is kept in the run's error.
const MAX_REASON_CHARS: usize = 2000;

/// Everything an execution needs besides the run itself.
#[derive(Clone)]
pub(crate) struct Executor {
    pub store: SharedStore,
    pub worker_id: String,
    pub lease: Duration,
    /// The worker's heartbeats, read before a step body starts.
    pub beats: Arc<BeatClock>,
    pub limits: ExecutionLimits,
}

/// How an execution ended, for logs and tests.
#[derive(Debug)]
pub(crate) enum Outcome {
    Completed,
    /// Finished by continuing as new: its successor is pending.
    Continued,
    Failed,
    Retrying,
    /// Parked; claimable again after this long.
    Sleeping(Duration),
    /// Parked by an event wait without a timeout: claimable again when an event is sent.
    Waiting,
    Interrupted,
    LeaseLost,
    Abandoned,
}

impl Outcome {
    /// Its name in the [`EXECUTIONS`](crate::metrics::EXECUTIONS) metric.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Continued => "continued",
            Outcome::Failed => "failed",
            Outcome::Retrying => "retrying",
            Outcome::Sleeping(_) => "sleeping",
            Outcome::Waiting => "waiting",
            Outcome::Interrupted => "interrupted",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Abandoned => "abandoned",
        }
    }
}

enum Finished {
    Returned(Result<Value, ErrorRecord>),
    Halted(Halt),
    DeadlineExceeded,
    ShutDown,
}

impl Executor {
    /// Executes `run` with `definition` until it finishes, parks or is stopped. `shutdown`
    /// abandons the run without writing anything (its lease expires and another worker
    /// replays it).
    ///
    /// `returned` is called as soon as the workflow function has returned, before its
    /// outcome is written (a worker frees the run's slot then, so that it claims the next
    /// run while the outcome commits).
    /// Executes a run claimed by a claim sent at `claimed_at` (by the monotonic clock: the
    /// run's lease is counted from no earlier than that).
    pub(crate) async fn execute(
        &self,
        claimed: ClaimedRun,
        claimed_at: std::time::Instant,
        definition: &'static WorkflowDefinition,
        shutdown: CancellationToken,
        returned: impl FnOnce() + Send,
    ) -> Outcome {
        let run = &claimed.run;
        // One span per execution: its `replay` and `step` spans are its children, and it
        // joins the trace of the run's start (see `crate::trace`).
        let span = tracing::info_span!(
            "run",
            run.id = %run.id,
            workflow.name = %run.workflow_name,
            workflow.version = run.version.as_deref().unwrap_or(""),
            attempt = run.attempts,
            worker.id = %self.worker_id,
            claim.epoch = run.claim_epoch,
            replay = !claimed.first_execution,
            trace.parent = tracing::field::Empty,
        );
        crate::trace::adopt(&span, run.trace_context.as_ref());
        self.execute_inner(claimed, claimed_at, definition, shutdown, returned)
            .instrument(span)
            .await
    }

    async fn execute_inner(
        &self,
        claimed: ClaimedRun,
        claimed_at: std::time::Instant,
        definition: &'static WorkflowDefinition,
        shutdown: CancellationToken,
        returned: impl FnOnce() + Send,
    ) -> Outcome {
        // Every write of this execution is fenced on its claim.
        let holder = claimed.holder();
        let ClaimedRun {
            run,
            first_execution,
        } = claimed;
        let run_id = run.id;
        let history = if first_execution {
            // Nothing can have been recorded yet: skip the round trip.
            Ok(Vec::new())
        } else {
            let span =
                tracing::info_span!("replay", run.id = %run_id, steps = tracing::field::Empty);
            async {
                let history = self.store.contract().step_history(run_id).await;
                if let Ok(history) = &history {
                    tracing::Span::current().record("steps", history.len());
                }
                history
            }
            .instrument(span)
            .await
        };
        let history = match history {
            Ok(history) => history,
            // A step row of this run that does not decode would fail every execution the
            // same way: the run is failed for good, like a poison run row at its claim.
            Err(StoreError::CorruptRun { id, reason, .. }) if id == run_id => {
                return self.quarantine(&run, &holder, &reason).await;
            }
            Err(error @ StoreError::CorruptStep { run_id: id, .. }) if id == run_id => {
                return self.quarantine(&run, &holder, &error.to_string()).await;
            }
            Err(error) => {
                tracing::warn!(%error, "could not load step history; the run will be retried after its lease");
                return Outcome::Abandoned;
            }
        };
        let deadline = run.deadline_at.map(|deadline| {
            let remaining = (deadline - run.updated_at)
                .to_std()
                .unwrap_or(Duration::ZERO);
            tokio::time::Instant::now() + remaining
        });
        let input = run.input.clone().unwrap_or(Value::Null);
        let session = RunSession::new(
            self.store.clone(),
            run_id,
            holder,
            self.lease,
            claimed_at,
            self.beats.clone(),
        );
        let ctx = WorkflowContext::new(session.clone(), run, history, self.limits.clone());
        let _heartbeat = self.heartbeat(&session, ctx.clone());

        // A panicking workflow fails its attempt (and is retried by the workflow policy)
        // instead of taking the worker's task down with the lease still held.
        let workflow =
            ctx.scope(AssertUnwindSafe((definition.entry)(ctx.clone(), input)).catch_unwind());
        let finished = tokio::select! {
            biased;
            _ = shutdown.cancelled() => Finished::ShutDown,
            halt = session.halted() => Finished::Halted(halt),
            result = workflow => match session.take_halt() {
                Some(halt) => Finished::Halted(halt),
                None => Finished::Returned(result.unwrap_or_else(|panic| Err(panicked(panic)))),
            },
            _ = sleep_until(deadline) => Finished::DeadlineExceeded,
        };
        // The execution ended: its branches stop before anything else is written.
        ctx.end_branches().await;
        if matches!(finished, Finished::Returned(_)) {
            // Nothing of the workflow runs any more: its slot can take the next run while
            // the outcome is written.
            returned();
        }
        self.record(&session, &ctx, finished).await
    }

    async fn record(
        &self,
        session: &RunSession,
        ctx: &WorkflowContext,
        finished: Finished,
    ) -> Outcome {
        // Steps whose records are still held go first (a completion takes them along).
        let writes_other = matches!(
            finished,
            Finished::Returned(Err(_))
                | Finished::DeadlineExceeded
                | Finished::Halted(Halt::Sleep(_) | Halt::Fail(_) | Halt::Continue(_))
        );
        if writes_other && let Err(halt) = session.write_held().await {
            tracing::debug!(
                ?halt,
                "a held step record was refused; the run's write will say why"
            );
        }
        let written = match finished {
            Finished::ShutDown => {
                tracing::info!("worker shutting down; run left for another worker");
                return Outcome::Abandoned;
            }
            Finished::Returned(Ok(output)) => {
                match crate::limits::check_json(crate::limits::Field::WorkflowOutput, &output) {
                    Ok(()) => session.complete(output).await.map(|_| Outcome::Completed),
                    // A definition built by hand; `#[workflow]` refuses it already.
                    Err(error) => {
                        let record = ErrorRecord::from_error(&error)
                            .with_kind("output")
                            .non_retryable();
                        fail(session, record, true).await
                    }
                }
            }
            Finished::Returned(Err(error)) => {
                // Errors that come from a step whose retries ran out are final: the
                // workflow-level policy only covers errors outside steps.
                let exhausted = ctx.exhausted_step();
                // An error that asks to be retried after a delay parks the run until then,
                // without using up an attempt (not after a step's retries ran out: its final
                // error would come back the same on the next execution).
                if let (Some(wait), true, None) =
                    (error.retry_after, error.retryable, exhausted.as_ref())
                {
                    retry_later(session, ctx, error, wait).await
                } else {
                    let force = !error.retryable || exhausted.is_some();
                    let record = match exhausted {
                        Some(step_error) if error.message == step_error.message => step_error,
                        _ => error,
                    };
                    fail(session, record, force).await
                }
            }
            Finished::DeadlineExceeded => {
                let record = ErrorRecord::new("Workflow run deadline exceeded")
                    .with_kind("deadline")
                    .non_retryable();
                fail(session, record, true).await
            }
            Finished::Halted(Halt::Sleep(until)) => session.sleep(until).await.map(|parked| {
                // Both instants come from the database clock.
                let wait = (until - parked.updated_at)
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                Outcome::Sleeping(wait)
            }),
            Finished::Halted(Halt::Parked { until, parked_at }) => {
                tracing::debug!(%until, "run parked waiting for an event");
                if until >= crate::limits::LATEST {
                    return Outcome::Waiting;
                }
                let wait = (until - parked_at).to_std().unwrap_or(Duration::ZERO);
                return Outcome::Sleeping(wait);
            }
            Finished::Halted(Halt::Fail(record)) => fail(session, record, true).await,
            Finished::Halted(Halt::Continue(input)) => match session.continue_as_new(input).await {
                Ok(continued) => {
                    tracing::info!(successor.id = %continued.successor.id, "run continued as new");
                    Ok(Outcome::Continued)
                }
                // Another execution would make the same call and be refused the same way.
                Err(
                    refused @ (StoreError::Unsupported { .. } | StoreError::InvalidArgument(_)),
                ) => {
                    let kind = match refused {
                        StoreError::Unsupported { .. } => "unsupported",
                        _ => "continue_as_new",
                    };
                    let record = ErrorRecord::from_error(&refused)
                        .with_kind(kind)
                        .non_retryable();
                    fail(session, record, true).await
                }
                Err(error) => Err(error),
            },
            Finished::Halted(Halt::Interrupted(status)) => {
                tracing::info!(%status, "run interrupted at a step boundary");
                return Outcome::Interrupted;
            }
            Finished::Halted(Halt::LeaseLost) => {
                tracing::warn!("lease lost; another worker owns the run now");
                return Outcome::LeaseLost;
            }
            Finished::Halted(Halt::Unrecorded(step)) => {
                // Only a replay verification's session refuses a write this way.
                tracing::error!(
                    step,
                    "a write was refused as in a replay verification; the run will be retried after its lease"
                );
                return Outcome::Abandoned;
            }
            Finished::Halted(Halt::Store(error)) => {
                tracing::warn!(%error, "store failed during the run; it will be retried after its lease");
                return Outcome::Abandoned;
            }
        };
        let written = match written {
            // The store refused a value of the outcome (a definition built by hand can hand
            // it one): writing it again after the lease would be refused the same way.
            Err(StoreError::Limit(limit)) => fail(session, limit_failure(&limit), true).await,
            other => other,
        };
        match written {
            Ok(outcome) => outcome,
            Err(StoreError::WrongState { status, .. })
                if matches!(status, RunStatus::Paused | RunStatus::Canceled) =>
            {
                tracing::info!(%status, "run interrupted before its result was written; result discarded");
                Outcome::Interrupted
            }
            Err(StoreError::LeaseLost { .. } | StoreError::WrongState { .. }) => {
                tracing::warn!("run changed hands before its result was written; result discarded");
                Outcome::LeaseLost
            }
            Err(error) => {
                tracing::warn!(%error, "could not record the run's outcome; it will be retried after its lease");
                Outcome::Abandoned
            }
        }
    }

    /// Fails for good `run`, held by `holder` (this execution's claim), whose step history
    /// did not decode (`reason` names the step row): with the same non-retryable error of
    /// kind `corrupt`, naming the run, that a claim gives a run whose own row does not
    /// decode, so the run is not claimed again after every lease. The step rows are left as they are, for
    /// inspection; listing them names the run as corrupt.
    async fn quarantine(&self, run: &WorkflowRun, holder: &Holder, reason: &str) -> Outcome {
        tracing::error!(
            reason,
            "the run's step history cannot be decoded; failing it"
        );
        // The reason may quote the stored text: keep the record well within the limits.
        let reason: String = match reason.char_indices().nth(MAX_REASON_CHARS) {
            Some((end, _)) => format!("{}...", &reason[..end]),
            None => reason.to_owned(),
        };
        let params = FailRun {
            run_id: run.id,
            holder: holder.clone(),
            error: crate::transition::quarantine_error(run.id, &reason),
            force: true,
        };
        let failed = retrying(self.lease, || {
            self.store.contract().fail_run(params.clone())
        })
        .await;
        match failed {
            Ok(_) => Outcome::Failed,
            Err(error) => {
                tracing::warn!(%error, "could not fail the run whose history does not decode; its lease will bring it back");
                Outcome::Abandoned
            }
        }
    }

    /// Extends the lease every half lease while the run executes. The task is aborted when
    /// the returned handle drops, so no heartbeat outlives its execution, whatever way the
    /// execution ends.
    fn heartbeat(&self, session: &Arc<RunSession>, ctx: WorkflowContext) -> AbortOnDropHandle<()> {
        let session = session.clone();
        let lease = self.lease;
        let span = tracing::Span::current();
        AbortOnDropHandle::new(tokio::spawn(
            async move {
                let mut ticks = tokio::time::interval(lease / 2);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    match session.extend_lease(lease).await {
                        Ok(_) => {}
                        Err(StoreError::WrongState { status, .. })
                            if matches!(status, RunStatus::Paused | RunStatus::Canceled) =>
                        {
                            ctx.interrupt(Halt::Interrupted(status));
                            return;
                        }
                        Err(
                            StoreError::WrongState { .. }
                            | StoreError::LeaseLost { .. }
                            | StoreError::RunNotFound { .. },
                        ) => {
                            ctx.interrupt(Halt::LeaseLost);
                            return;
                        }
                        Err(StoreError::Limit(limit)) => {
                            ctx.interrupt(Halt::after(StoreError::Limit(limit)));
                            return;
                        }
                        Err(error) => tracing::warn!(%error, "heartbeat failed; retrying"),
                    }
                }
            }
            .instrument(span),
        ))
    }
}

/// Parks the run for `wait` after its workflow returned `error`, which asked for it; a
/// wait past the limits fails the run for good.
async fn retry_later(
    session: &RunSession,
    ctx: &WorkflowContext,
    error: ErrorRecord,
    wait: Duration,
) -> crate::error::StoreResult<Outcome> {
    let until =
        crate::limits::check_duration(crate::limits::Field::RetryAfter, wait).and_then(|()| {
            crate::limits::add_duration(crate::limits::Field::RetryAfter, ctx.database_now(), wait)
        });
    match until {
        Ok(until) => {
            tracing::info!(error = %error, ?wait, "workflow asked to be retried later; the run parks");
            session.sleep(until).await.map(|parked| {
                let wait = (until - parked.updated_at)
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                Outcome::Sleeping(wait)
            })
        }
        Err(limit) => fail(session, limit_failure(&limit), true).await,
    }
}

/// Records a failure of the run; `force` fails it for good.
async fn fail(
    session: &RunSession,
    record: ErrorRecord,
    force: bool,
) -> Result<Outcome, StoreError> {
    tracing::warn!(error = %record, final_failure = force, "workflow failed");
    let run = session.fail(&record, force).await?;
    Ok(if run.status == RunStatus::Failed {
        Outcome::Failed
    } else {
        Outcome::Retrying
    })
}

fn panicked(panic: Box<dyn std::any::Any + Send>) -> ErrorRecord {
    let message = crate::failure::panic_message(panic.as_ref());
    ErrorRecord::new(format!("workflow panicked: {message}")).with_kind("panic")
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
