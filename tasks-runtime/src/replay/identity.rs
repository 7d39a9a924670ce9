//! Call identity: what a call is (its kind, and a step's path and signature), what its
//! attempts recorded, the check that refuses to replay a history the code no longer
//! matches ([`NonDeterminism`]), and the recorded calls a replay has not made
//! ([`Replay::unreached`]).

use std::fmt;

use serde_json::Value;

use super::Replay;
use crate::model::{StepAttempt, StepKind};

/// What a call is, as the code now makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call<'a> {
    /// What the call does.
    pub(crate) kind: StepKind,
    /// A step's path (`module::function`).
    pub(crate) path: Option<&'a str>,
    /// A step's signature: its argument and output types, as written.
    pub(crate) signature: Option<&'a str>,
}

impl<'a> Call<'a> {
    /// A call of `kind` with no path or signature: a sleep, an event wait, a child start.
    pub(crate) fn of(kind: StepKind) -> Self {
        Call {
            kind,
            path: None,
            signature: None,
        }
    }
}

/// One call, as recorded in the history or as made by the code now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallIdentity {
    /// The branch (`ctx.spawn`) the call was made in; `None` for the workflow itself.
    pub branch: Option<String>,
    /// Its place among the calls of its branch or workflow, from 0 (`None`: recorded before
    /// identities were).
    pub position: Option<u32>,
    /// The resolved step name (`charge`, `charge:1`, ...).
    pub name: String,
    /// What the call does.
    pub kind: StepKind,
    /// A step's path (`module::function`).
    pub path: Option<String>,
    /// A step's argument and output types, as written in its signature.
    pub signature: Option<String>,
}

impl fmt::Display for CallIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`", self.kind, self.name)?;
        if let Some(path) = &self.path {
            write!(f, " ({path}")?;
            if let Some(signature) = &self.signature {
                write!(f, ": {signature}")?;
            }
            f.write_str(")")?;
        }
        if let Some(position) = self.position {
            write!(f, " at call #{position}")?;
        }
        if let Some(branch) = &self.branch {
            write!(f, " of branch `{branch}`")?;
        }
        Ok(())
    }
}

/// The code of a workflow changed under a run in flight: the call the code makes now does
/// not match what the run's history recorded for it (a step reordered, renamed, inserted
/// or given other argument or output types).
///
/// The run fails for good with this error (kind [`NonDeterminism::KIND`]) before the call
/// runs or is handed a stored outcome, so nothing is written for it. Deploy code that
/// matches the history (or guard the change with
/// [`WorkflowContext::patched`](crate::WorkflowContext::patched)) and
/// [`retry`](crate::Client::retry) the run, or start a new version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "non-determinism: the history has {recorded}, but the workflow's code now makes {called}; \
     the code changed under a run in flight (use a new version or `ctx.patched`)"
)]
#[non_exhaustive]
pub struct NonDeterminism {
    /// What the history recorded.
    pub recorded: CallIdentity,
    /// What the code calls now.
    pub called: CallIdentity,
}

impl NonDeterminism {
    /// The `kind` of the run's stored error ([`ErrorRecord::kind`](crate::ErrorRecord)).
    pub const KIND: &'static str = "nondeterminism";
}

/// The identity an attempt recorded: position, path and signature from its config.
pub(super) fn recorded_call(attempt: &StepAttempt) -> CallIdentity {
    let call = attempt.config.get("call");
    let text = |key: &str| {
        call.and_then(|call| call.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    CallIdentity {
        branch: text("branch"),
        position: call
            .and_then(|call| call.get("position"))
            .and_then(Value::as_u64)
            .and_then(|position| u32::try_from(position).ok()),
        name: attempt.step_name.clone(),
        kind: attempt.kind,
        path: text("path"),
        signature: text("signature"),
    }
}

impl Replay {
    /// What the history recorded that `called` contradicts, if anything.
    pub(super) fn mismatch(&self, called: &CallIdentity) -> Option<CallIdentity> {
        let scope = called.branch.clone().unwrap_or_default();
        let at_position = called
            .position
            .and_then(|position| self.positions.get(&(scope, position)));
        if let Some(name) = at_position
            && *name != called.name
            && let Some(attempt) = self.last(name)
        {
            return Some(recorded_call(attempt));
        }
        let recorded = recorded_call(self.last(&called.name)?);
        let differs = |was: &Option<String>, now: &Option<String>| matches!((was, now), (Some(was), Some(now)) if was != now);
        let moved = matches!(
            (recorded.position, called.position),
            (Some(was), Some(now)) if was != now || recorded.branch != called.branch
        );
        (recorded.kind != called.kind
            || moved
            || differs(&recorded.path, &called.path)
            || differs(&recorded.signature, &called.signature))
        .then_some(recorded)
    }

    /// The call of the workflow's own scope (not a branch's) at the lowest position that the
    /// history recorded and this execution has not resolved, if any. Once the workflow
    /// returned, such a call is one its code no longer makes (a step removed). Patch markers
    /// take no position and are not counted; branches are not either, since a branch still
    /// running when its workflow returns is aborted wherever it got to.
    pub(crate) fn unreached(&self) -> Option<CallIdentity> {
        self.positions
            .iter()
            .filter(|((scope, _), name)| scope.is_empty() && !self.consumed.contains(*name))
            .min_by_key(|((_, position), _)| *position)
            .and_then(|(_, name)| self.last(name))
            .map(recorded_call)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::StepStatus;
    use crate::replay::tests::{FUNCTION, attempt, call, recorded};
    use crate::replay::{ResolveError, Resolved, patch_marker};

    fn nondeterminism(result: Result<Resolved, ResolveError>) -> NonDeterminism {
        match result {
            Err(ResolveError::NonDeterminism(error)) => *error,
            other => panic!("expected a non-determinism error, got {other:?}"),
        }
    }

    #[test]
    fn the_same_code_replays_and_records_its_identity() {
        let history = vec![
            recorded("charge", 0, "shop::charge", "(u32) -> Result<u32, E>"),
            recorded("ship", 1, "shop::ship", "() -> Result<(), E>"),
        ];
        let mut replay = Replay::new(history, None, 100);
        let charge = replay
            .resolve(
                "charge",
                None,
                call("shop::charge", "(u32) -> Result<u32, E>"),
            )
            .unwrap();
        assert_eq!(
            charge.record,
            json!({ "position": 0, "path": "shop::charge", "signature": "(u32) -> Result<u32, E>" })
        );
        let ship = replay
            .resolve("ship", None, call("shop::ship", "() -> Result<(), E>"))
            .unwrap();
        assert_eq!(ship.record["position"], 1);
        let sleep = replay
            .resolve("nap", None, Call::of(StepKind::Sleep))
            .unwrap();
        assert_eq!(
            sleep.record,
            json!({ "position": 2 }),
            "past the history: new"
        );
    }

    #[test]
    fn a_reordered_step_is_refused() {
        let history = vec![
            recorded("charge", 0, "shop::charge", "() -> Result<(), E>"),
            recorded("ship", 1, "shop::ship", "() -> Result<(), E>"),
        ];
        let mut replay = Replay::new(history, None, 100);
        let error =
            nondeterminism(replay.resolve("ship", None, call("shop::ship", "() -> Result<(), E>")));
        assert_eq!(error.recorded.name, "charge");
        assert_eq!(error.called.name, "ship");
        assert_eq!(error.called.position, Some(0));
        let text = error.to_string();
        assert!(
            text.contains("`charge`") && text.contains("`ship`"),
            "{text}"
        );
    }

    #[test]
    fn a_renamed_or_inserted_step_is_refused() {
        let history = vec![recorded("charge", 0, "shop::charge", "() -> Result<(), E>")];
        let mut replay = Replay::new(history.clone(), None, 100);
        let error = nondeterminism(replay.resolve(
            "charge_card",
            None,
            call("shop::charge_card", "() -> Result<(), E>"),
        ));
        assert_eq!(error.recorded.name, "charge");
        // A sleep inserted before the step.
        let mut replay = Replay::new(history, None, 100);
        let error = nondeterminism(replay.resolve("nap", None, Call::of(StepKind::Sleep)));
        assert_eq!(error.recorded.kind, StepKind::Function);
        assert_eq!(error.called.kind, StepKind::Sleep);
    }

    #[test]
    fn a_changed_signature_or_path_is_refused() {
        let history = vec![recorded(
            "charge",
            0,
            "shop::charge",
            "() -> Result<u32, E>",
        )];
        let mut replay = Replay::new(history.clone(), None, 100);
        let error = nondeterminism(replay.resolve(
            "charge",
            None,
            call("shop::charge", "() -> Result<String, E>"),
        ));
        assert_eq!(
            error.recorded.signature.as_deref(),
            Some("() -> Result<u32, E>")
        );
        assert_eq!(
            error.called.signature.as_deref(),
            Some("() -> Result<String, E>")
        );
        let mut replay = Replay::new(history, None, 100);
        nondeterminism(replay.resolve(
            "charge",
            None,
            call("billing::charge", "() -> Result<u32, E>"),
        ));
    }

    #[test]
    fn branches_count_their_own_positions_whatever_the_interleaving() {
        // First execution: a/leg, b/leg, a/leg:1 (interleaved one way).
        let mut first = Replay::new(Vec::new(), None, 100);
        let mut history = Vec::new();
        for (branch, base) in [("a", "leg"), ("b", "leg"), ("a", "leg")] {
            let resolved = first.resolve(base, Some(branch), FUNCTION).unwrap();
            let mut attempt = attempt(&resolved.name, StepStatus::Completed, json!(1));
            attempt.config = json!({ "call": resolved.record });
            history.push(attempt);
        }
        assert_eq!(history[2].step_name, "a/leg:1");
        assert_eq!(
            history[2].config["call"],
            json!({ "position": 1, "branch": "a" })
        );
        // The replay interleaves the other way: no position moved.
        let mut replay = Replay::new(history, None, 100);
        for (branch, base) in [("b", "leg"), ("a", "leg"), ("a", "leg")] {
            replay.resolve(base, Some(branch), FUNCTION).unwrap();
        }
    }

    #[test]
    fn attempts_without_identity_match_by_name_alone() {
        let history = vec![
            attempt("charge", StepStatus::Completed, json!(1)),
            attempt("ship", StepStatus::Completed, json!(2)),
        ];
        let mut replay = Replay::new(history, None, 100);
        let ship = replay
            .resolve("ship", None, call("shop::ship", "() -> Result<u32, E>"))
            .unwrap();
        assert_eq!(replay.completed(&ship.name).unwrap().output, Some(json!(2)));
    }

    #[test]
    fn the_first_recorded_call_not_made_is_unreached() {
        let history = vec![
            recorded("charge", 0, "shop::charge", "() -> ()"),
            recorded("ship", 1, "shop::ship", "() -> ()"),
            recorded("notify", 2, "shop::notify", "() -> ()"),
        ];
        let mut replay = Replay::new(history, None, 100);
        replay
            .resolve("charge", None, call("shop::charge", "() -> ()"))
            .unwrap();
        let unreached = replay.unreached().unwrap();
        assert_eq!(
            (unreached.name.as_str(), unreached.position),
            ("ship", Some(1))
        );
        replay
            .resolve("ship", None, call("shop::ship", "() -> ()"))
            .unwrap();
        replay
            .resolve("notify", None, call("shop::notify", "() -> ()"))
            .unwrap();
        assert_eq!(replay.unreached(), None);
        assert_eq!(replay.resolved(), 3);

        // A patch marker takes no position: never unreached.
        let mut marker = attempt(&patch_marker("audit"), StepStatus::Completed, Value::Null);
        marker.kind = StepKind::Patch;
        let replay = Replay::new(vec![marker], None, 100);
        assert_eq!(replay.unreached(), None);
    }
}
