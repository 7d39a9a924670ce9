//! Replay: what a run's recorded history says about each step call, as pure code.
//!
//! Every step call and every durable sleep resolves its name in call order (`name`, then
//! `name:1`, `name:2`, ...), and the resolved name finds the attempts recorded under it in
//! the run's history. Nothing here does I/O: the executor loads the history once per claim,
//! the workflow context asks this module what to do with each call and tells it about every
//! attempt it writes.
//!
//! # Identity: noticing changed code
//!
//! Every call also has a *position*: its place among the calls of its scope (steps,
//! sleeps, event waits, child starts and branches, counted from 0; patch markers do not
//! count). The scope is the workflow itself or a branch (`ctx.spawn`), whose calls are
//! counted on their own, so that interleaving between branches changes no position. Each
//! attempt records its call's position, and a step's attempt also its path and signature,
//! in its config under `call`. On replay, before a stored outcome is handed back, the call
//! is compared with what the history recorded:
//!
//! - the attempt recorded at this position must be of the same name and kind;
//! - the attempts recorded under this name must be at this position, of this kind, and
//!   (for a step) of this path and signature.
//!
//! Anything else is a [`NonDeterminism`]: the workflow's code changed under a run in flight
//! (a step reordered, renamed, inserted or retyped) and replaying would hand one call's
//! record to another. Attempts recorded before identities existed carry none and are
//! matched by name alone, as before.
//!
//! [`Replay::patch`] answers [`WorkflowContext::patched`](crate::WorkflowContext::patched):
//! whether a run takes the code inside a patch.
//!
//! The identity of a call, and the check against the history, are in `identity`; this
//! module resolves names and answers from the history.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::limits::{Field, LimitError};
use crate::model::{StepAttempt, StepKind, StepStatus};

mod identity;

pub(crate) use identity::Call;
use identity::recorded_call;
pub use identity::{CallIdentity, NonDeterminism};

/// The run resolved more step names than its worker allows (a loop calling steps forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepLimitExceeded {
    /// The worker's limit.
    pub(crate) limit: u32,
}

/// Why a call cannot go on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ResolveError {
    /// Too many calls.
    Limit(StepLimitExceeded),
    /// The code does not match the history.
    NonDeterminism(Box<NonDeterminism>),
    /// A name chosen at run time holds the suffix's separator ([`check_chosen_name`]).
    Reserved(LimitError),
}

/// What separates a call's name from its call-order suffix (`nap`, `nap:1`, `nap:2`, ...).
pub(crate) const SUFFIX_SEPARATOR: char = ':';

/// The one rule for every name a workflow or a client chooses at run time (a sleep's name,
/// an event topic, a published state's key, a child step's name, a branch's name): it may not
/// hold [`SUFFIX_SEPARATOR`], so that no call's name is ever another call's suffixed name
/// (a second wait on `ping` is `event/ping:1`, which a wait on a topic `ping:1` would be
/// too). Names written at compile time (workflow and step names) obey
/// [`limits::is_valid_name`](crate::limits::is_valid_name), which refuses it as well.
pub(crate) fn check_chosen_name(field: Field, name: &str) -> Result<(), LimitError> {
    if name.contains(SUFFIX_SEPARATOR) {
        return Err(LimitError::InvalidName {
            field,
            value: name.to_owned(),
            reason: format!(
                "`{SUFFIX_SEPARATOR}` is reserved for the call-order suffix of repeated calls \
                 (`name{SUFFIX_SEPARATOR}1`, `name{SUFFIX_SEPARATOR}2`, ...)"
            ),
        });
    }
    Ok(())
}

/// A resolved call: its name, and the identity to record with its attempts (under `call`
/// in their config).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// The resolved step name.
    pub(crate) name: String,
    /// `{"position": .., "path": .., "signature": ..}`.
    pub(crate) record: Value,
}

/// What [`Replay::patch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patch {
    /// The run recorded the patch's marker: it took the patched code.
    Taken,
    /// The run went past this point without the patch: the old code.
    Skipped,
    /// The run is past everything it recorded: the patched code, once its marker is written.
    New,
}

/// The step name of a patch's marker attempt. No call of a step has it: a call's name gets
/// `:` only before its suffix, a number, and a patch name is never digits alone
/// ([`WorkflowContext::patched`](crate::WorkflowContext::patched) refuses them).
pub(crate) fn patch_marker(patch: &str) -> String {
    format!("patch:{patch}")
}

/// The replay state of one execution of a run.
#[derive(Debug)]
pub(crate) struct Replay {
    /// Attempts by resolved step name, oldest first.
    history: HashMap<String, Vec<StepAttempt>>,
    /// The resolved name recorded at each position of each scope (`""`: the workflow).
    positions: HashMap<(String, u32), String>,
    /// The next position of each scope.
    next_position: HashMap<String, u32>,
    /// How often each base name was resolved so far.
    counters: HashMap<String, u32>,
    /// The names resolved so far.
    consumed: HashSet<String>,
    /// What each patch asked in this execution answered: the same all through it.
    patches: HashMap<String, bool>,
    /// How many names were resolved so far.
    resolved: u32,
    /// Most names one execution may resolve.
    max_steps: u32,
}

impl Replay {
    /// Replay of `history` (every attempt of the run, oldest first), allowing at most
    /// `max_steps` step calls and sleeps.
    ///
    /// `retried_at` is when the run was last retried: the attempts created before it that
    /// did not complete (failed, timed out, interrupted) are forgotten, so a step that failed
    /// runs again with its full retry budget and its stored final error is not handed back;
    /// completed attempts keep replaying their outputs.
    pub(crate) fn new(
        history: Vec<StepAttempt>,
        retried_at: Option<DateTime<Utc>>,
        max_steps: u32,
    ) -> Self {
        let mut by_name: HashMap<String, Vec<StepAttempt>> = HashMap::new();
        let current = |attempt: &StepAttempt| {
            attempt.status == StepStatus::Completed
                || retried_at.is_none_or(|retried| attempt.created_at >= retried)
        };
        for attempt in history.into_iter().filter(current) {
            by_name
                .entry(attempt.step_name.clone())
                .or_default()
                .push(attempt);
        }
        let positions = by_name
            .iter()
            .filter_map(|(name, attempts)| {
                let call = recorded_call(attempts.last()?);
                Some((
                    (call.branch.unwrap_or_default(), call.position?),
                    name.clone(),
                ))
            })
            .collect();
        Replay {
            history: by_name,
            positions,
            next_position: HashMap::new(),
            counters: HashMap::new(),
            consumed: HashSet::new(),
            patches: HashMap::new(),
            resolved: 0,
            max_steps,
        }
    }

    /// The name of the next call of `base` in `branch` (`base` the first time, then
    /// `base:1`, `base:2`, ...; in a branch `branch/base`, ...), checked against the history
    /// ([module docs](self)), with the identity to record with its attempts.
    pub(crate) fn resolve(
        &mut self,
        base: &str,
        branch: Option<&str>,
        call: Call<'_>,
    ) -> Result<Resolved, ResolveError> {
        if self.resolved >= self.max_steps {
            return Err(ResolveError::Limit(StepLimitExceeded {
                limit: self.max_steps,
            }));
        }
        let scoped;
        let base = match branch {
            Some(branch) => {
                scoped = format!("{branch}/{base}");
                scoped.as_str()
            }
            None => base,
        };
        let scope = branch.unwrap_or_default();
        let position = self.next_position.get(scope).copied().unwrap_or(0);
        let count = self.counters.get(base).copied().unwrap_or(0);
        let name = if count == 0 {
            base.to_owned()
        } else {
            format!("{base}{SUFFIX_SEPARATOR}{count}")
        };
        let called = CallIdentity {
            branch: branch.map(str::to_owned),
            position: Some(position),
            name: name.clone(),
            kind: call.kind,
            path: call.path.map(str::to_owned),
            signature: call.signature.map(str::to_owned),
        };
        // A chosen name with the separator could be another call's suffixed name. Only a
        // history that recorded this very call under it (before the rule) replays it.
        if base.contains(SUFFIX_SEPARATOR)
            && !(self.history.contains_key(&name) && self.mismatch(&called).is_none())
        {
            check_chosen_name(Field::StepName, base).map_err(ResolveError::Reserved)?;
        }
        if let Some(recorded) = self.mismatch(&called) {
            return Err(ResolveError::NonDeterminism(Box::new(NonDeterminism {
                recorded,
                called,
            })));
        }
        self.resolved += 1;
        self.next_position.insert(scope.to_owned(), position + 1);
        self.counters.insert(base.to_owned(), count + 1);
        self.consumed.insert(name.clone());
        let mut record = json!({ "position": position });
        if let Some(branch) = branch {
            record["branch"] = json!(branch);
        }
        if let Some(path) = call.path {
            record["path"] = json!(path);
        }
        if let Some(signature) = call.signature {
            record["signature"] = json!(signature);
        }
        Ok(Resolved { name, record })
    }

    /// Whether the run takes the code of `patch` ([`Patch`]). After [`Patch::New`], the
    /// caller writes the marker; later calls in this execution get the same answer.
    pub(crate) fn patch(&mut self, patch: &str) -> Patch {
        match self.patches.get(patch) {
            Some(true) => return Patch::Taken,
            Some(false) => return Patch::Skipped,
            None => {}
        }
        if self.history.contains_key(&patch_marker(patch)) {
            self.patches.insert(patch.to_owned(), true);
            return Patch::Taken;
        }
        let went_further = self.history.iter().any(|(name, attempts)| {
            !self.consumed.contains(name)
                && attempts
                    .last()
                    .is_some_and(|attempt| attempt.kind != StepKind::Patch)
        });
        self.patches.insert(patch.to_owned(), !went_further);
        if went_further {
            Patch::Skipped
        } else {
            Patch::New
        }
    }

    /// How many names were resolved so far.
    pub(crate) fn resolved(&self) -> u32 {
        self.resolved
    }

    /// The newest attempt recorded under `name`.
    pub(crate) fn last(&self, name: &str) -> Option<&StepAttempt> {
        self.history.get(name).and_then(|attempts| attempts.last())
    }

    /// The completed attempt of `name`, when its newest attempt completed: the call returns
    /// its stored output instead of running.
    pub(crate) fn completed(&self, name: &str) -> Option<&StepAttempt> {
        self.last(name)
            .filter(|attempt| attempt.status == StepStatus::Completed)
    }

    /// How many attempts of `name` failed: the next attempt's number is one more. Attempts
    /// whose error asked to be retried after a delay do not count.
    pub(crate) fn failed_attempts(&self, name: &str) -> u32 {
        self.history.get(name).map_or(0, |attempts| {
            let failed = attempts
                .iter()
                .filter(|attempt| attempt.status == StepStatus::Failed && !retried_after(attempt))
                .count();
            u32::try_from(failed).unwrap_or(u32::MAX)
        })
    }

    /// Records an attempt written during this execution (or its new state).
    pub(crate) fn remember(&mut self, attempt: StepAttempt) {
        let attempts = self.history.entry(attempt.step_name.clone()).or_default();
        match attempts.iter_mut().find(|known| known.id == attempt.id) {
            Some(known) => *known = attempt,
            None => attempts.push(attempt),
        }
    }
}

/// Whether the attempt's error asked to be retried after a delay (see
/// [`RetryAfter`](crate::RetryAfter)): it parked the run without using up an attempt.
fn retried_after(attempt: &StepAttempt) -> bool {
    attempt
        .error
        .as_ref()
        .and_then(|error| error.get("kind"))
        .and_then(serde_json::Value::as_str)
        == Some(crate::step_failure::RETRY_AFTER_KIND)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::{Value, json};
    use uuid::Uuid;

    use super::*;
    use crate::model::StepKind;

    pub(super) const FUNCTION: Call<'static> = Call {
        kind: StepKind::Function,
        path: None,
        signature: None,
    };

    pub(super) fn call<'a>(path: &'a str, signature: &'a str) -> Call<'a> {
        Call {
            kind: StepKind::Function,
            path: Some(path),
            signature: Some(signature),
        }
    }

    /// Resolves a function call with no identity.
    fn step(replay: &mut Replay, base: &str) -> String {
        replay.resolve(base, None, FUNCTION).unwrap().name
    }

    /// A completed attempt of step `name` recorded at `position` by `path` with
    /// `signature`.
    pub(super) fn recorded(name: &str, position: u32, path: &str, signature: &str) -> StepAttempt {
        let mut attempt = attempt(name, StepStatus::Completed, json!(1));
        attempt.config = json!({
            "call": { "position": position, "path": path, "signature": signature }
        });
        attempt
    }

    #[test]
    fn patches_are_taken_by_new_runs_and_skipped_by_runs_that_went_past() {
        // A new run: taken, and the same answer all through the execution.
        let mut replay = Replay::new(Vec::new(), None, 100);
        assert_eq!(replay.patch("fraud-check"), Patch::New);
        assert_eq!(replay.patch("fraud-check"), Patch::Taken);

        // A run that called `charge` after this point without the patch: skipped, and
        // its history still lines up (a marker takes no position).
        let history = vec![recorded("charge", 0, "shop::charge", "() -> Result<(), E>")];
        let mut replay = Replay::new(history.clone(), None, 100);
        assert_eq!(replay.patch("fraud-check"), Patch::Skipped);
        step(&mut replay, "charge");
        assert_eq!(replay.patch("fraud-check"), Patch::Skipped, "decided once");

        // A run whose history ends before the patch: taken.
        let mut replay = Replay::new(history.clone(), None, 100);
        step(&mut replay, "charge");
        assert_eq!(replay.patch("fraud-check"), Patch::New);

        // A run that recorded the marker: taken on every replay, and the marker is not
        // mistaken for calls made further on.
        let mut marker = attempt(
            &patch_marker("fraud-check"),
            StepStatus::Completed,
            Value::Null,
        );
        marker.kind = StepKind::Patch;
        let mut replay = Replay::new(vec![marker.clone()], None, 100);
        assert_eq!(replay.patch("fraud-check"), Patch::Taken);
        assert_eq!(replay.patch("other"), Patch::New);
    }

    pub(super) fn attempt(name: &str, status: StepStatus, output: Value) -> StepAttempt {
        let now = Utc::now();
        StepAttempt {
            namespace: "test".into(),
            id: Uuid::now_v7(),
            workflow_run_id: Uuid::nil(),
            step_name: name.into(),
            kind: StepKind::Function,
            status,
            config: json!({}),
            context: None,
            output: Some(output),
            error: None,
            args: None,
            child_workflow_run_namespace: None,
            child_workflow_run_id: None,
            started_at: Some(now),
            finished_at: Some(now),
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn repeated_calls_resolve_in_call_order() {
        let mut replay = Replay::new(Vec::new(), None, 100);
        let names: Vec<String> = ["charge", "ship", "charge", "charge", "ship"]
            .into_iter()
            .map(|base| step(&mut replay, base))
            .collect();
        assert_eq!(names, ["charge", "ship", "charge:1", "charge:2", "ship:1"]);
    }

    #[test]
    fn each_call_finds_its_own_recorded_output() {
        let history = vec![
            attempt("charge", StepStatus::Completed, json!("first")),
            attempt("charge:1", StepStatus::Completed, json!("second")),
        ];
        let mut replay = Replay::new(history, None, 100);
        let first = step(&mut replay, "charge");
        let second = step(&mut replay, "charge");
        let third = step(&mut replay, "charge");
        assert_eq!(
            replay.completed(&first).unwrap().output,
            Some(json!("first"))
        );
        assert_eq!(
            replay.completed(&second).unwrap().output,
            Some(json!("second"))
        );
        assert!(replay.completed(&third).is_none(), "a new call runs");
    }

    #[test]
    fn failed_attempts_count_and_only_a_completed_newest_attempt_replays() {
        let history = vec![
            attempt("charge", StepStatus::Failed, Value::Null),
            attempt("charge", StepStatus::Failed, Value::Null),
        ];
        let mut replay = Replay::new(history, None, 100);
        let name = step(&mut replay, "charge");
        assert_eq!(replay.failed_attempts(&name), 2);
        assert!(replay.completed(&name).is_none());

        let done = attempt("charge", StepStatus::Completed, json!(7));
        replay.remember(done.clone());
        assert_eq!(replay.completed(&name), Some(&done));
        assert_eq!(replay.failed_attempts(&name), 2);
    }

    #[test]
    fn a_retry_forgets_earlier_failures_but_keeps_completed_steps() {
        let mut before = vec![
            attempt("charge", StepStatus::Completed, json!("paid")),
            attempt("ship", StepStatus::Failed, Value::Null),
            attempt("ship", StepStatus::Failed, Value::Null),
        ];
        let retried = Utc::now() + chrono::Duration::seconds(1);
        let mut after = attempt("ship", StepStatus::Failed, Value::Null);
        after.created_at = retried + chrono::Duration::milliseconds(5);
        before.push(after);
        let mut replay = Replay::new(before, Some(retried), 100);
        let charge = step(&mut replay, "charge");
        let ship = step(&mut replay, "ship");
        assert_eq!(
            replay.completed(&charge).unwrap().output,
            Some(json!("paid"))
        );
        assert_eq!(
            replay.failed_attempts(&ship),
            1,
            "only the failure after the retry"
        );
    }

    #[test]
    fn remembering_an_attempt_again_replaces_it() {
        let mut replay = Replay::new(Vec::new(), None, 100);
        let mut sleep = attempt("nap", StepStatus::Running, Value::Null);
        replay.remember(sleep.clone());
        sleep.status = StepStatus::Completed;
        replay.remember(sleep.clone());
        assert_eq!(replay.last("nap"), Some(&sleep));
        assert_eq!(replay.history["nap"].len(), 1);
    }

    #[test]
    fn the_step_limit_counts_every_resolution() {
        let mut replay = Replay::new(Vec::new(), None, 2);
        step(&mut replay, "a");
        step(&mut replay, "b");
        assert_eq!(
            replay.resolve("a", None, FUNCTION),
            Err(ResolveError::Limit(StepLimitExceeded { limit: 2 }))
        );
    }

    /// Every sequence of up to four calls over names chosen at run time resolves each call
    /// to its own name, or is refused: no sequence makes two calls share an identity.
    #[test]
    fn no_sequence_of_chosen_names_makes_two_calls_share_a_name() {
        let alphabet = ["nap", "nap:1", "nap:2", "nap:1:1", "a/nap", "nap/1", "x:"];
        let mut sequences: Vec<Vec<&str>> = vec![vec![]];
        for _ in 0..4 {
            sequences = sequences
                .into_iter()
                .flat_map(|sequence| {
                    alphabet.iter().map(move |name| {
                        let mut longer = sequence.clone();
                        longer.push(name);
                        longer
                    })
                })
                .collect();
            for sequence in &sequences {
                let mut replay = Replay::new(Vec::new(), None, 100);
                let mut seen = HashSet::new();
                for base in sequence {
                    match replay.resolve(base, None, Call::of(StepKind::Sleep)) {
                        Ok(resolved) => assert!(
                            seen.insert(resolved.name.clone()),
                            "{sequence:?} resolved {} twice",
                            resolved.name
                        ),
                        Err(ResolveError::Reserved(_)) => assert!(base.contains(':')),
                        Err(other) => panic!("{sequence:?}: {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_chosen_name_with_the_separator_is_refused_before_it_is_counted() {
        let mut replay = Replay::new(Vec::new(), None, 100);
        assert_eq!(step(&mut replay, "ping"), "ping");
        assert_eq!(step(&mut replay, "ping"), "ping:1");
        match replay.resolve("ping:1", None, FUNCTION) {
            Err(ResolveError::Reserved(LimitError::InvalidName { field, value, .. })) => {
                assert_eq!((field, value.as_str()), (Field::StepName, "ping:1"));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Nothing was counted: the next plain call goes on where it was.
        assert_eq!(step(&mut replay, "ping"), "ping:2");
    }

    /// A run that recorded a chosen name with `:` before the rule (the call that made it,
    /// at its position) replays it; the same name at another position is refused.
    #[test]
    fn a_history_recorded_before_the_rule_keeps_replaying() {
        let history = vec![
            recorded("a:b", 0, "shop::a", "() -> ()"),
            recorded("c", 1, "shop::c", "() -> ()"),
        ];
        let mut replay = Replay::new(history, None, 100);
        let a = replay
            .resolve("a:b", None, call("shop::a", "() -> ()"))
            .unwrap();
        assert_eq!(a.name, "a:b");
        // Called first, where the history has another call: refused, not replayed.
        let mut moved = Replay::new(
            vec![
                recorded("c", 0, "shop::c", "() -> ()"),
                recorded("a:b", 1, "shop::a", "() -> ()"),
            ],
            None,
            100,
        );
        assert!(matches!(
            moved.resolve("a:b", None, call("shop::a", "() -> ()")),
            Err(ResolveError::Reserved(_))
        ));
    }
}
