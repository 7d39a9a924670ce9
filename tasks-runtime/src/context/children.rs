//! Child workflows of a workflow: [`WorkflowContext::child`],
//! [`WorkflowContext::spawn_child`], [`WorkflowContext::join`] and
//! [`WorkflowContext::join_all`].
//!
//! A start is a step attempt of kind [`StepKind::Child`] named
//! `child/{workflow}` (then `child/{workflow}:1`, ... in call order, or a name of your
//! choosing), created in the same transaction as the child run: a replay finds the attempt
//! and never starts the child again. A join parks the run, freeing its worker slot, until
//! the children it waits for have finished; the last of them wakes it. The attempt then
//! holds the child's outcome, so every replay returns the same result.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::WorkflowContext;
use crate::children::{ChildOutcome, ChildWait, ParentCancel};
use crate::definition::Workflow;
use crate::failure::ErrorRecord;
use crate::limits;
use crate::model::{StepAttempt, StepKind};
use crate::replay::{Call, Resolved};
use crate::session::Halt;
use crate::store::CreateRun;

/// Options of a child start.
#[derive(Debug, Clone, Default)]
pub struct ChildOptions {
    name: Option<String>,
    on_parent_cancel: ParentCancel,
}

impl ChildOptions {
    /// The defaults: step name `child/{workflow}`, canceled with the parent.
    pub fn new() -> Self {
        ChildOptions::default()
    }

    /// The step name of the start (resolved in call order like every step name:
    /// `name`, `name:1`, ...), instead of `child/{workflow}`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// What canceling the parent does to the child: [`ParentCancel::Cascade`] (the
    /// default) cancels it, [`ParentCancel::Detach`] lets it finish.
    pub fn on_parent_cancel(mut self, policy: ParentCancel) -> Self {
        self.on_parent_cancel = policy;
        self
    }
}

/// A started child run whose result the parent collects with [`WorkflowContext::join`] or
/// [`WorkflowContext::join_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildHandle<O> {
    run_id: Uuid,
    step_name: String,
    output: PhantomData<fn() -> O>,
}

impl<O> ChildHandle<O> {
    /// The child run's id.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// The resolved step name of the start in the parent.
    pub fn step_name(&self) -> &str {
        &self.step_name
    }

    /// A copy of the handle, whatever `O` is (the derived `Clone` asks `O: Clone`).
    pub(crate) fn duplicate(&self) -> Self {
        ChildHandle {
            run_id: self.run_id,
            step_name: self.step_name.clone(),
            output: PhantomData,
        }
    }
}

/// Why a child did not give its parent an output. The parent may handle it; the same error
/// comes back on every replay.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChildError {
    /// The child failed for good.
    #[error("child run {run_id} failed: {}", error.message)]
    Failed {
        /// The child run.
        run_id: Uuid,
        /// The child's error record.
        error: ErrorRecord,
    },
    /// The child was canceled.
    #[error("child run {run_id} was canceled")]
    Canceled {
        /// The child run.
        run_id: Uuid,
    },
    /// The child's input could not be stored (it does not serialize, holds a NaN or
    /// infinite float, or is past the [`limits`]), or the concurrency key the child's
    /// workflow derives from it could not be derived or is past the limits; nothing was
    /// started.
    #[error("the input of child workflow {workflow} cannot be stored: {reason}")]
    Input {
        /// The child's workflow.
        workflow: String,
        /// Why.
        reason: String,
    },
    /// The child's output does not decode into the expected type.
    #[error("the output of child run {run_id} does not decode: {reason}")]
    Output {
        /// The child run.
        run_id: Uuid,
        /// Why.
        reason: String,
    },
}

impl WorkflowContext {
    /// Runs workflow `W` as a child of this run and returns its output: starts it (once,
    /// even across replays and crashes), parks this run until the child has finished, and
    /// returns what the child returned. A child that fails for good or is canceled is a
    /// [`ChildError`] the workflow may handle. Canceling this run cancels the child.
    ///
    /// The child must be registered with a worker of this namespace (any worker may run
    /// it). `ctx.child::<W>(input)` is `ctx.join(&ctx.spawn_child::<W>(input).await?)`.
    pub async fn child<W: Workflow>(&self, input: W::Input) -> Result<W::Output, ChildError> {
        let handle = self.spawn_child::<W>(input).await?;
        self.join(&handle).await
    }

    /// Starts workflow `W` as a child of this run and returns a handle without waiting for
    /// it: start several, then collect them with [`WorkflowContext::join_all`] (fan-out,
    /// fan-in). The start is memoized like a step, so a replay returns the same child.
    ///
    /// When `W` derives a concurrency key from its input
    /// (`#[workflow(concurrency(key = ..., limit = ...))]`), the child gets it, as a run
    /// started by a client does: it waits for a free slot of its key like any other run.
    pub async fn spawn_child<W: Workflow>(
        &self,
        input: W::Input,
    ) -> Result<ChildHandle<W::Output>, ChildError> {
        self.spawn_child_with::<W>(input, ChildOptions::new()).await
    }

    /// Like [`WorkflowContext::spawn_child`], with options (a step name, the cancel
    /// policy).
    pub async fn spawn_child_with<W: Workflow>(
        &self,
        input: W::Input,
        options: ChildOptions,
    ) -> Result<ChildHandle<W::Output>, ChildError> {
        let definition = W::definition();
        let base = options
            .name
            .clone()
            .unwrap_or_else(|| format!("child/{}", definition.name));
        let Resolved {
            name: step_name,
            record: call,
        } = self
            .resolve_call(&base, Call::of(StepKind::Child))
            .map_err(|error| ChildError::Input {
                workflow: definition.name.to_owned(),
                reason: error.to_string(),
            })?;
        self.check_interrupted().await;
        if let Some(started) = self
            .last_attempt(&step_name)
            .filter(|attempt| attempt.kind == StepKind::Child)
        {
            return self.handle_of(&started).await;
        }
        let input_error = |reason: String| ChildError::Input {
            workflow: definition.name.to_owned(),
            reason,
        };
        crate::limits::check_finite(&input).map_err(|found| input_error(found.to_string()))?;
        let input = serde_json::to_value(&input).map_err(|error| input_error(error.to_string()))?;
        // As a client's typed start: what is stored must decode into the child's input type
        // when the child executes (a type whose `Serialize` and `Deserialize` disagree).
        (definition.check_input)(&input).map_err(|error| {
            input_error(format!(
                "does not decode into the workflow's input type: {error}"
            ))
        })?;
        let concurrency = definition
            .derived_concurrency(&input)
            .map_err(|error| input_error(error.to_string()))?;
        let child = CreateRun {
            workflow_name: definition.name.to_owned(),
            version: definition.version.map(str::to_owned),
            input: Some(input),
            retry_policy: definition.retry_policy,
            concurrency,
            queue: definition.queue.map(str::to_owned),
            // With OpenTelemetry, the child's executions are children of this execution's
            // span; otherwise the child joins the trace its parent joined.
            trace_context: crate::trace::for_new_run(None)
                .or_else(|| self.inner.run.trace_context.clone()),
            ..CreateRun::new(definition.name)
        };
        child
            .check(self.inner.session.namespace())
            .map_err(|error| input_error(error.to_string()))?;
        // Earlier steps are durable before the child exists.
        self.flush().await;
        let started = self
            .inner
            .session
            .start_child(&step_name, child, options.on_parent_cancel, call)
            .await;
        match started {
            Ok(started) => {
                self.remember(started.step.clone());
                tracing::debug!(step.name = %step_name, child.id = %started.child.id, created = started.created, "child started");
                Ok(ChildHandle {
                    run_id: started.child.id,
                    step_name,
                    output: PhantomData,
                })
            }
            Err(halt) => self.halt(halt).await,
        }
    }

    /// Waits for the child of `handle` and returns its output (see
    /// [`WorkflowContext::child`]).
    pub async fn join<O: DeserializeOwned>(
        &self,
        handle: &ChildHandle<O>,
    ) -> Result<O, ChildError> {
        let mut results = self.join_all(std::slice::from_ref(handle)).await;
        results.pop().unwrap_or_else(|| {
            Err(ChildError::Output {
                run_id: handle.run_id,
                reason: "the wait returned no outcome".into(),
            })
        })
    }

    /// Waits for every child of `handles` and returns their results in the same order.
    /// The run is parked once, until the last of them has finished (each finishing child
    /// counts down; the last one wakes the run), not woken once per child.
    pub async fn join_all<O: DeserializeOwned>(
        &self,
        handles: &[ChildHandle<O>],
    ) -> Vec<Result<O, ChildError>> {
        if handles.is_empty() {
            return Vec::new();
        }
        self.check_interrupted().await;
        let names: Vec<String> = handles.iter().map(|h| h.step_name.clone()).collect();
        let replayed: Option<Vec<StepAttempt>> = names
            .iter()
            .map(|name| self.completed_attempt(name))
            .collect();
        let attempts = match replayed {
            Some(attempts) => attempts,
            None => {
                // Earlier steps are durable before the run parks.
                self.flush().await;
                match self.inner.session.wait_for_children(names).await {
                    Ok(ChildWait::Done(attempts)) => {
                        for attempt in &attempts {
                            self.remember(attempt.clone());
                        }
                        attempts
                    }
                    Ok(ChildWait::Parked(run)) => {
                        tracing::debug!(children = handles.len(), "join parks the run");
                        let halt = Halt::Parked {
                            until: run.available_at.unwrap_or(limits::LATEST),
                            parked_at: run.updated_at,
                        };
                        return self.halt(halt).await;
                    }
                    Err(halt) => return self.halt(halt).await,
                }
            }
        };
        let mut results = Vec::with_capacity(handles.len());
        for (handle, attempt) in handles.iter().zip(attempts) {
            results.push(self.result_of(handle.run_id, &attempt).await);
        }
        results
    }

    /// The handle of a start found in the history.
    async fn handle_of<O>(&self, started: &StepAttempt) -> Result<ChildHandle<O>, ChildError> {
        match started.child_workflow_run_id {
            Some(run_id) => Ok(ChildHandle {
                run_id,
                step_name: started.step_name.clone(),
                output: PhantomData,
            }),
            None => {
                let record = ErrorRecord::new(format!(
                    "the child step {} of the history names no child run",
                    started.step_name
                ))
                .with_kind("replay")
                .non_retryable();
                self.halt(Halt::Fail(record)).await
            }
        }
    }

    /// The result a completed child step holds; a stored output that does not read back
    /// fails the run, like a step's.
    async fn result_of<O: DeserializeOwned>(
        &self,
        run_id: Uuid,
        attempt: &StepAttempt,
    ) -> Result<O, ChildError> {
        let output = attempt.output.clone().unwrap_or(Value::Null);
        match ChildOutcome::from_output(&output) {
            Some(ChildOutcome::Completed(value)) => {
                serde_json::from_value(value).map_err(|error| ChildError::Output {
                    run_id,
                    reason: error.to_string(),
                })
            }
            Some(ChildOutcome::Failed(error)) => Err(ChildError::Failed {
                run_id,
                error: serde_json::from_value(error.clone())
                    .unwrap_or_else(|_| ErrorRecord::new(error.to_string())),
            }),
            Some(ChildOutcome::Canceled) => Err(ChildError::Canceled { run_id }),
            None => {
                let record = ErrorRecord::new(format!(
                    "the stored outcome of child step {} cannot be read",
                    attempt.step_name
                ))
                .with_kind("replay")
                .non_retryable();
                self.halt(Halt::Fail(record)).await
            }
        }
    }
}
