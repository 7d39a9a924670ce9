//! Waiting for the first of several things: [`WorkflowContext::select`] and its [`Select`]
//! builder.
//!
//! A select is a step attempt of kind [`StepKind::Sleep`] named `select/{name}` (then
//! `select/{name}:1`, ... in call order), started running the first time the run reaches
//! it, with its arms in its config: its creation is the start of its timers, so a replay
//! keeps their deadlines. The run looks at the store ([`SelectStore::wait_for_any`]):
//! when nothing is ready it parks on every event topic, child and timer of the select at
//! once; the first of them wakes it, and it looks again. When something is ready, the
//! winner (the first ready arm in declaration order) is written into the attempt's output,
//! with what became of every loser, and only then does the winner take effect (its event is
//! consumed, its child's outcome collected). A replay reads the winner from the attempt and
//! never waits again; a crash between the two writes replays the same winner, whose effect
//! is then made.
//!
//! [`SelectStore::wait_for_any`]: crate::select::SelectStore::wait_for_any

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::WorkflowContext;
use super::branches::Branch;
use super::children::{ChildError, ChildHandle};
use crate::events::Event;
use crate::failure::{ErrorRecord, WorkflowError};
use crate::limits::{self, Field};
use crate::model::{StepAttempt, StepKind, StepStatus};
use crate::replay::{Call, NonDeterminism, Resolved};
use crate::session::Halt;
use tasks_core::select::{AnyWait, Readiness};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How often a select that also waits for branches looks at the store again while its
/// branches run: the branches run in the worker's process, so the run cannot park.
const BRANCH_LOOK_INTERVAL: Duration = Duration::from_millis(500);

/// What one arm waits for.
enum Arm<T> {
    /// The next event of a topic; `finish` consumes it.
    Event {
        topic: String,
        finish: Box<dyn FnOnce(WorkflowContext) -> BoxFuture<Result<T, WorkflowError>> + Send>,
    },
    /// A timer counted from the select's first execution.
    Timer {
        duration: Duration,
        finish: Box<dyn FnOnce() -> T + Send>,
    },
    /// The end of a child run; `finish` collects its outcome.
    Child {
        step_name: String,
        finish: Box<dyn FnOnce(WorkflowContext) -> BoxFuture<T> + Send>,
    },
    /// A branch of this run, running in the worker's process.
    Branch { name: String, future: BoxFuture<T> },
}

impl<T> Arm<T> {
    /// The arm as recorded in the select's config.
    fn describe(&self) -> Value {
        match self {
            Arm::Event { topic, .. } => json!({ "event": topic }),
            Arm::Timer { duration, .. } => {
                json!({ "timerMs": u64::try_from(duration.as_millis()).unwrap_or(u64::MAX) })
            }
            Arm::Child { step_name, .. } => json!({ "child": step_name }),
            Arm::Branch { name, .. } => json!({ "branch": name }),
        }
    }

    /// What becomes of the arm when another wins: an event stays in the mailbox, a timer
    /// is canceled, a child keeps running, a branch is canceled.
    fn lost(&self) -> &'static str {
        match self {
            Arm::Event { .. } => "not_consumed",
            Arm::Timer { .. } => "canceled",
            Arm::Child { .. } => "running",
            Arm::Branch { .. } => "canceled",
        }
    }
}

/// A wait for the first of several events, timers, children and branches, built by
/// [`WorkflowContext::select`]: add arms in order, then `.await` it for the winner's value.
///
/// Each arm maps what it waited for into the select's output type `T`, usually an enum of
/// your own:
///
/// ```no_run
/// # use std::time::Duration;
/// # use tasks_runtime::{WorkflowContext, WorkflowError, Event};
/// # #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// # struct Approval { by: String }
/// # impl Event for Approval { const TOPIC: &'static str = "approval"; }
/// enum Decision {
///     Approved(Approval),
///     Expired,
/// }
///
/// # async fn demo(ctx: WorkflowContext) -> Result<(), WorkflowError> {
/// let decision = ctx
///     .select("approval")
///     .event(Decision::Approved)
///     .timer(Duration::from_secs(24 * 3600), || Decision::Expired)
///     .await?;
/// # Ok(()) }
/// ```
///
/// - **Determinism.** The winner is recorded when it is decided, and every replay returns
///   it without waiting again.
/// - **Ties.** When several arms are ready at the look that decides, the first declared
///   wins.
/// - **Losers.** An event arm that loses consumes nothing: the event stays in the run's
///   mailbox for a later wait or select. A timer that loses is canceled. A child that loses
///   keeps running (cancel it yourself if you must; its outcome can still be collected
///   with [`WorkflowContext::join`] or another select). A branch that loses is canceled.
///   The select's step attempt records each loser's state.
#[must_use = "a select does nothing until it is awaited"]
pub struct Select<'c, T> {
    ctx: &'c WorkflowContext,
    name: String,
    arms: Vec<Arm<T>>,
}

impl<T> std::fmt::Debug for Select<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("name", &self.name)
            .field(
                "arms",
                &self.arms.iter().map(Arm::describe).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl WorkflowContext {
    /// Waits for the first of several events, timers, children and branches (see
    /// [`Select`]). `name` identifies the select on replay, as a sleep's name does (repeats
    /// resolve as `select/name`, `select/name:1`, ...).
    pub fn select<T>(&self, name: &str) -> Select<'_, T> {
        Select {
            ctx: self,
            name: name.to_owned(),
            arms: Vec::new(),
        }
    }
}

impl<'c, T: Send + 'static> Select<'c, T> {
    /// An arm that wins with the next event of type `E` sent to the run (topic
    /// [`Event::TOPIC`]), consumed only when this arm wins. An event whose payload does not
    /// decode into `E` is a non-retryable error, as for
    /// [`WorkflowContext::wait_for_event`].
    pub fn event<E: Event>(mut self, map: impl FnOnce(E) -> T + Send + 'static) -> Self {
        self.arms.push(Arm::Event {
            topic: E::TOPIC.to_owned(),
            finish: Box::new(move |ctx| {
                Box::pin(async move { Ok(map(ctx.wait_for_event::<E>().await?)) })
            }),
        });
        self
    }

    /// An arm that wins once `duration` has passed since the run first reached the select
    /// (by the store's clock; the duration is recorded then, so a replay keeps the
    /// deadline even if the code changes it, as for a sleep). A duration longer than
    /// [`MAX_DURATION`](crate::limits::MAX_DURATION) is a non-retryable error when the
    /// select is awaited.
    pub fn timer(mut self, duration: Duration, map: impl FnOnce() -> T + Send + 'static) -> Self {
        self.arms.push(Arm::Timer {
            duration,
            finish: Box::new(map),
        });
        self
    }

    /// An arm that wins when the child of `handle` has ended, with its result (as
    /// [`WorkflowContext::join`] returns it).
    pub fn child<O: DeserializeOwned + Send + 'static>(
        mut self,
        handle: &ChildHandle<O>,
        map: impl FnOnce(Result<O, ChildError>) -> T + Send + 'static,
    ) -> Self {
        let joined = handle.duplicate();
        self.arms.push(Arm::Child {
            step_name: handle.step_name().to_owned(),
            finish: Box::new(move |ctx| Box::pin(async move { map(ctx.join(&joined).await) })),
        });
        self
    }

    /// An arm that wins when `branch` (from [`WorkflowContext::spawn`]) returns, with its
    /// output. A branch that loses is aborted. While a select waits for a branch the run
    /// cannot park (the branch runs in the worker's process): it looks at its other arms
    /// every half second instead.
    pub fn branch<U: Send + 'static>(
        mut self,
        branch: Branch<U>,
        map: impl FnOnce(U) -> T + Send + 'static,
    ) -> Self {
        let name = branch.name().to_owned();
        self.arms.push(Arm::Branch {
            name,
            future: Box::pin(async move { map(branch.await) }),
        });
        self
    }

    async fn run(self) -> Result<T, WorkflowError> {
        let Select { ctx, name, arms } = self;
        check_arms(&name, &arms)?;
        let Resolved {
            name: step_name,
            record: call,
        } = ctx.resolve_call(&format!("select/{name}"), Call::of(StepKind::Sleep))?;
        ctx.check_interrupted().await;
        let described: Vec<Value> = arms.iter().map(Arm::describe).collect();
        let previous = ctx.last_attempt(&step_name);
        let (winner, arms) = match previous {
            Some(done) if done.status == StepStatus::Completed => {
                let winner = recorded_winner(ctx, &done, &described).await;
                (winner, arms)
            }
            previous => {
                let started = match previous {
                    Some(attempt)
                        if attempt.kind == StepKind::Sleep
                            && attempt.status == StepStatus::Running =>
                    {
                        attempt
                    }
                    _ => {
                        let config = json!({ "select": described, "call": call });
                        ctx.start_attempt(&step_name, StepKind::Sleep, config).await
                    }
                };
                decide(ctx, &started, arms).await
            }
        };
        finish(ctx, winner, arms).await
    }
}

impl<'c, T: Send + 'static> IntoFuture for Select<'c, T> {
    type Output = Result<T, WorkflowError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'c>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// Refuses a select without arms or with more than [`limits::MAX_SELECT_ARMS`], an empty
/// name, a bad topic or a timer past the limits: non-retryable errors, nothing recorded.
fn check_arms<T>(name: &str, arms: &[Arm<T>]) -> Result<(), WorkflowError> {
    let refuse = |reason: String| {
        Err(WorkflowError::msg(format!("select {name:?}: {reason}")).non_retryable())
    };
    if name.is_empty() {
        return refuse("a select needs a name".into());
    }
    if arms.is_empty() {
        return refuse("a select needs at least one arm".into());
    }
    if arms.len() > limits::MAX_SELECT_ARMS {
        return refuse(format!(
            "{} arms; the limit is {}",
            arms.len(),
            limits::MAX_SELECT_ARMS
        ));
    }
    for arm in arms {
        match arm {
            Arm::Event { topic, .. } => limits::check_topic(topic)
                .map_err(|error| WorkflowError::from(error).non_retryable())?,
            Arm::Timer { duration, .. } => limits::check_duration(Field::Sleep, *duration)
                .map_err(|error| WorkflowError::from(error).non_retryable())?,
            Arm::Child { .. } | Arm::Branch { .. } => {}
        }
    }
    Ok(())
}

/// The winner a completed select recorded. A record that does not name one of the arms the
/// code declares now, of the same kind, fails the run: the code changed under it.
async fn recorded_winner(ctx: &WorkflowContext, done: &StepAttempt, arms: &[Value]) -> usize {
    let winner = done
        .output
        .as_ref()
        .and_then(|output| output.get("winner"))
        .and_then(Value::as_u64)
        .and_then(|winner| usize::try_from(winner).ok());
    let recorded = done.config.get("select").and_then(Value::as_array);
    let same_kind = |winner: usize| {
        let kind = |arm: &Value| arm.as_object().and_then(|o| o.keys().next().cloned());
        match (recorded.and_then(|r| r.get(winner)), arms.get(winner)) {
            (Some(was), Some(now)) => kind(was) == kind(now),
            _ => false,
        }
    };
    match winner {
        Some(winner) if same_kind(winner) => winner,
        _ => {
            let record = ErrorRecord::new(format!(
                "the select {} recorded a winner the workflow's code no longer declares \
                 (recorded arms {}, now {}); the code changed under a run in flight",
                done.step_name,
                recorded
                    .map(|r| Value::Array(r.clone()))
                    .unwrap_or_default(),
                Value::Array(arms.to_vec()),
            ))
            .with_kind(NonDeterminism::KIND)
            .non_retryable();
            ctx.halt(Halt::Fail(record)).await
        }
    }
}

/// The deadline of every timer arm (`None` for the other arms), from the select's start and
/// with the duration its attempt recorded (so a replay keeps the first execution's
/// deadline, as a sleep does); the error that fails the run when one is past the last
/// instant a store holds.
fn deadlines<T>(
    started: &StepAttempt,
    arms: &[Arm<T>],
) -> Result<Vec<Option<DateTime<Utc>>>, ErrorRecord> {
    let recorded = |index: usize| {
        started
            .config
            .get("select")?
            .get(index)?
            .get("timerMs")?
            .as_u64()
            .map(Duration::from_millis)
    };
    arms.iter()
        .enumerate()
        .map(|(index, arm)| match arm {
            Arm::Timer { duration, .. } => {
                let duration = recorded(index).unwrap_or(*duration);
                limits::add_duration(Field::Sleep, started.created_at, duration)
                    .map(Some)
                    .map_err(|error| {
                        ErrorRecord::from_error(&error)
                            .with_kind("limit")
                            .non_retryable()
                    })
            }
            _ => Ok(None),
        })
        .collect()
}

/// The first arm in declaration order that is ready: an event of its topic waits, its
/// child ended, its timer is due, or its branch returned (`finished`).
fn first_ready<T>(
    arms: &[Arm<T>],
    deadlines: &[Option<DateTime<Utc>>],
    readiness: &Readiness,
    finished: &[Option<T>],
) -> Option<usize> {
    arms.iter().enumerate().position(|(index, arm)| match arm {
        Arm::Event { topic, .. } => readiness.topics.contains(topic),
        Arm::Child { step_name, .. } => readiness.children.contains(step_name),
        Arm::Timer { .. } => deadlines[index].is_some_and(|until| until <= readiness.now),
        Arm::Branch { .. } => finished[index].is_some(),
    })
}

/// The state of every arm once `winner` won, as the select's output records it.
fn decision<T>(winner: usize, arms: &[Arm<T>]) -> Value {
    let states: Vec<&str> = arms
        .iter()
        .enumerate()
        .map(|(index, arm)| if index == winner { "won" } else { arm.lost() })
        .collect();
    json!({ "winner": winner, "arms": states })
}

/// Decides the winner of a select first reached (or not yet decided) in `started`:
/// looks, parks when nothing is ready, and records the winner. Returns the arms, with the
/// output of a winning branch taken out of its future.
async fn decide<T: Send + 'static>(
    ctx: &WorkflowContext,
    started: &StepAttempt,
    mut arms: Vec<Arm<T>>,
) -> (usize, Vec<Arm<T>>) {
    let deadlines = match deadlines(started, &arms) {
        Ok(deadlines) => deadlines,
        Err(record) => return ctx.halt(Halt::Fail(record)).await,
    };
    let until = deadlines
        .iter()
        .flatten()
        .min()
        .copied()
        .unwrap_or(limits::LATEST);
    let mut topics: Vec<String> = Vec::new();
    let mut children: Vec<String> = Vec::new();
    for arm in &arms {
        match arm {
            Arm::Event { topic, .. } if !topics.contains(topic) => topics.push(topic.clone()),
            Arm::Child { step_name, .. } if !children.contains(step_name) => {
                children.push(step_name.clone())
            }
            _ => {}
        }
    }
    let has_branches = arms.iter().any(|arm| matches!(arm, Arm::Branch { .. }));
    // The branches run here; the outputs of those that returned wait for the decision.
    let mut finished: Vec<Option<T>> = arms.iter().map(|_| None).collect();
    let mut running: FuturesUnordered<BoxFuture<(usize, T)>> = FuturesUnordered::new();
    for (index, arm) in arms.iter_mut().enumerate() {
        if let Arm::Branch { future, .. } = arm {
            let future = std::mem::replace(future, Box::pin(std::future::pending()));
            running.push(Box::pin(async move { (index, future.await) }));
        }
    }
    // Earlier steps are durable before the run parks or decides.
    ctx.flush().await;
    // A select of branches alone has nothing to look for in the store.
    let durable = !topics.is_empty() || !children.is_empty() || until < limits::LATEST;
    let winner = loop {
        let looked = if durable {
            ctx.inner
                .session
                .wait_for_any(
                    &started.step_name,
                    topics.clone(),
                    children.clone(),
                    until,
                    !has_branches,
                )
                .await
        } else {
            Ok(AnyWait::Ready(Readiness {
                topics: Vec::new(),
                children: Vec::new(),
                now: ctx.database_now(),
            }))
        };
        let readiness = match looked {
            Ok(AnyWait::Ready(readiness)) => readiness,
            Ok(AnyWait::Parked(run)) => {
                tracing::debug!(select = %started.step_name, "select parks the run");
                let halt = Halt::Parked {
                    until: run.available_at.unwrap_or(limits::LATEST),
                    parked_at: run.updated_at,
                };
                return ctx.halt(halt).await;
            }
            Err(halt) => return ctx.halt(halt).await,
        };
        if let Some(winner) = first_ready(&arms, &deadlines, &readiness, &finished) {
            break winner;
        }
        // Only a select with branches gets here with nothing ready: wait for a branch or
        // the next look, whichever comes first.
        let next_look = until
            .signed_duration_since(readiness.now)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(BRANCH_LOOK_INTERVAL);
        tokio::select! {
            Some((index, output)) = running.next() => finished[index] = Some(output),
            () = tokio::time::sleep(next_look) => {}
        }
        ctx.check_interrupted().await;
    };
    // The branches that did not win are aborted with their handles.
    drop(running);
    let output = decision(winner, &arms);
    let decided = ctx
        .inner
        .session
        .finish_attempt_with(&started.step_name, started.id, output)
        .await;
    ctx.written(decided).await;
    tracing::debug!(select = %started.step_name, winner, "select decided");
    if let Some(output) = finished[winner].take() {
        arms[winner] = Arm::Branch {
            name: String::new(),
            future: Box::pin(std::future::ready(output)),
        };
    }
    (winner, arms)
}

/// The winner's value: its event consumed, its child's outcome collected, its branch
/// awaited. The other arms are dropped (a branch's handle aborts it).
async fn finish<T: Send + 'static>(
    ctx: &WorkflowContext,
    winner: usize,
    mut arms: Vec<Arm<T>>,
) -> Result<T, WorkflowError> {
    let arm = arms.swap_remove(winner);
    drop(arms);
    match arm {
        Arm::Event { finish, .. } => finish(ctx.clone()).await,
        Arm::Timer { finish, .. } => Ok(finish()),
        Arm::Child { finish, .. } => Ok(finish(ctx.clone()).await),
        Arm::Branch { future, .. } => Ok(future.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms() -> Vec<Arm<&'static str>> {
        vec![
            Arm::Event {
                topic: "a".into(),
                finish: Box::new(|_| Box::pin(async { Ok("a") })),
            },
            Arm::Timer {
                duration: Duration::from_secs(1),
                finish: Box::new(|| "timer"),
            },
            Arm::Child {
                step_name: "child/c".into(),
                finish: Box::new(|_| Box::pin(async { "c" })),
            },
            Arm::Branch {
                name: "b".into(),
                future: Box::pin(async { "b" }),
            },
        ]
    }

    #[test]
    fn the_first_ready_arm_in_declaration_order_wins() {
        let arms = arms();
        let now = Utc::now();
        let due = vec![None, Some(now), None, None];
        let later = vec![None, Some(now + chrono::TimeDelta::seconds(1)), None, None];
        let ready = |topics: &[&str], children: &[&str]| Readiness {
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            children: children.iter().map(|c| (*c).to_owned()).collect(),
            now,
        };
        let none: Vec<Option<&str>> = vec![None; 4];
        let branch_done = vec![None, None, None, Some("b")];
        assert_eq!(first_ready(&arms, &later, &ready(&[], &[]), &none), None);
        assert_eq!(
            first_ready(&arms, &due, &ready(&["a"], &["child/c"]), &none),
            Some(0),
            "an event declared first beats a due timer and an ended child"
        );
        assert_eq!(
            first_ready(&arms, &due, &ready(&[], &["child/c"]), &none),
            Some(1)
        );
        assert_eq!(
            first_ready(&arms, &later, &ready(&["z"], &["child/c"]), &none),
            Some(2)
        );
        assert_eq!(
            first_ready(&arms, &later, &ready(&[], &[]), &branch_done),
            Some(3)
        );
    }

    #[test]
    fn the_decision_records_every_losers_state() {
        assert_eq!(
            decision(2, &arms()),
            json!({ "winner": 2, "arms": ["not_consumed", "canceled", "won", "canceled"] })
        );
    }

    #[test]
    fn a_select_without_arms_or_name_is_refused() {
        assert!(check_arms::<()>("s", &[]).is_err());
        assert!(check_arms("", &arms()).is_err());
        assert!(check_arms("s", &arms()).is_ok());
        let bad_topic = vec![Arm::Event {
            topic: String::new(),
            finish: Box::new(|_| Box::pin(async { Ok(()) })),
        }];
        assert!(check_arms("s", &bad_topic).is_err());
        let too_long = vec![Arm::Timer {
            duration: limits::MAX_DURATION + Duration::from_secs(1),
            finish: Box::new(|| ()),
        }];
        assert!(check_arms("s", &too_long).is_err());
    }
}
