//! What a replay verification found ([`VerifyReport`]): one [`RunVerification`] per run,
//! each consistent with the code so far or a [`Mismatch`], printed for humans by `Display`
//! and serialized for machines.

use std::fmt;

use serde::Serialize;
use uuid::Uuid;

use crate::model::RunStatus;
use crate::replay::CallIdentity;

/// What [`verify_replay`](super::verify_replay) found, run by run: the unfinished runs of
/// the namespace first (oldest first), then the sample of finished ones (newest first).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VerifyReport {
    /// The namespace verified.
    pub namespace: String,
    /// Every run verified.
    pub runs: Vec<RunVerification>,
}

impl VerifyReport {
    /// Whether the code replays every run verified: no [`Mismatch`]. The deploy gate.
    pub fn is_consistent(&self) -> bool {
        self.mismatches().next().is_none()
    }

    /// The runs whose history the code does not replay, with what differs.
    pub fn mismatches(&self) -> impl Iterator<Item = (&RunVerification, &Mismatch)> {
        self.runs.iter().filter_map(|run| match &run.verdict {
            Verdict::Mismatch(mismatch) => Some((run, mismatch)),
            Verdict::Consistent(_) => None,
        })
    }

    /// The verification of `run_id`, if it was verified.
    pub fn run(&self, run_id: Uuid) -> Option<&RunVerification> {
        self.runs.iter().find(|run| run.run_id == run_id)
    }
}

/// The verification of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RunVerification {
    /// The run.
    pub run_id: Uuid,
    /// Its workflow.
    pub workflow_name: String,
    /// The workflow version it is pinned to.
    pub version: Option<String>,
    /// Its status when it was read.
    pub status: RunStatus,
    /// How many calls (steps, sleeps, waits, child starts, branches, recorded values) the
    /// replay made before it stopped.
    pub calls_replayed: u32,
    /// What the replay found (in JSON, its fields `verdict` and `detail`).
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Whether the code replays a run's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict", content = "detail")]
#[non_exhaustive]
pub enum Verdict {
    /// Every call the replay made matched the history, up to where it stopped.
    Consistent(Stop),
    /// The code does not replay the history.
    Mismatch(Mismatch),
}

/// Where the replay of a consistent run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "at")]
#[non_exhaustive]
pub enum Stop {
    /// At a call the history does not hold (named here): the run's next execution will
    /// make it. Everything before it matched ("consistent so far").
    Unrecorded {
        /// The call's resolved name (`charge`, `event/payment`, ...).
        call: String,
    },
    /// At a durable sleep the run is parked in, not over yet.
    Sleeping,
    /// A run that failed for good failed again in the replay, without a mismatch before
    /// (it panicked, or broke a limit, as it did when it ran).
    Failed {
        /// Why the replay failed.
        error: String,
    },
    /// The workflow continued as new (`ctx.continue_as_new`), after every call its history
    /// recorded: where a run that continued ended.
    Continued,
    /// The workflow function returned, after every call its history recorded.
    Returned {
        /// Whether it returned an output (`false`: an error, such as a step's final error
        /// handed back again).
        ok: bool,
    },
}

/// A run whose history the code does not replay: where, and what differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Mismatch {
    /// What kind of difference.
    pub kind: MismatchKind,
    /// The branch (`ctx.spawn`) of the call that differs; `None`: the workflow itself.
    pub branch: Option<String>,
    /// The call's position among the calls of its scope, from 0, when there is one.
    pub position: Option<u32>,
    /// What the history holds (or what the run needs).
    pub expected: String,
    /// What the code does now.
    pub found: String,
}

impl Mismatch {
    /// A mismatch of `kind` that no call position locates.
    pub(crate) fn of_run(kind: MismatchKind, expected: String, found: String) -> Self {
        Mismatch {
            kind,
            branch: None,
            position: None,
            expected,
            found,
        }
    }

    /// A call the code makes where the history recorded `recorded`.
    pub(crate) fn call(recorded: &CallIdentity, found: String) -> Self {
        Mismatch {
            kind: MismatchKind::Call,
            branch: recorded.branch.clone(),
            position: recorded.position,
            expected: recorded.to_string(),
            found,
        }
    }
}

/// The kinds of [`Mismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MismatchKind {
    /// At a position, the code makes another call than the history recorded (a step
    /// renamed, reordered, inserted or retyped, a patch changed): a
    /// [`NonDeterminism`](crate::NonDeterminism).
    Call,
    /// The workflow returned without making a call the history recorded (a step removed).
    Missing,
    /// A recorded value (a step's output or final error, an event, a child's outcome)
    /// no longer reads back into the type the code gives it.
    Value,
    /// The run's workflow (at its version) is not registered in this binary.
    Unregistered,
    /// The run's input no longer decodes into the workflow's input type.
    Input,
    /// The replay failed otherwise: the workflow panicked, or broke a limit (its step
    /// limit, a name the stores refuse).
    Failed,
    /// The replay did not stop within the time allowed (workflow code awaiting something
    /// that is not a durable call).
    TimedOut,
}

impl MismatchKind {
    /// Its name, as `--json` writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            MismatchKind::Call => "call",
            MismatchKind::Missing => "missing",
            MismatchKind::Value => "value",
            MismatchKind::Unregistered => "unregistered",
            MismatchKind::Input => "input",
            MismatchKind::Failed => "failed",
            MismatchKind::TimedOut => "timed_out",
        }
    }
}

impl fmt::Display for MismatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} mismatch", self.kind)?;
        if let Some(position) = self.position {
            write!(f, " at call #{position}")?;
        }
        if let Some(branch) = &self.branch {
            write!(f, " of branch `{branch}`")?;
        }
        write!(f, ": expected {}, found {}", self.expected, self.found)
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Unrecorded { call } => write!(f, "consistent so far (next call `{call}`)"),
            Stop::Sleeping => f.write_str("consistent so far (in a durable sleep)"),
            Stop::Failed { error } => write!(f, "consistent (fails as the run did: {error})"),
            Stop::Continued => f.write_str("consistent (the workflow continued as new)"),
            Stop::Returned { ok: true } => f.write_str("consistent (the workflow returned)"),
            Stop::Returned { ok: false } => {
                f.write_str("consistent (the workflow returned an error)")
            }
        }
    }
}

impl fmt::Display for RunVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = match self.verdict {
            Verdict::Consistent(_) => "ok      ",
            Verdict::Mismatch(_) => "MISMATCH",
        };
        write!(f, "{mark} {} {}", self.run_id, self.workflow_name)?;
        if let Some(version) = &self.version {
            write!(f, "@{version}")?;
        }
        write!(
            f,
            " ({}, calls replayed: {}): ",
            self.status, self.calls_replayed
        )?;
        match &self.verdict {
            Verdict::Consistent(stop) => write!(f, "{stop}"),
            Verdict::Mismatch(mismatch) => write!(f, "{mismatch}"),
        }
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for run in &self.runs {
            writeln!(f, "{run}")?;
        }
        let mismatched = self.mismatches().count();
        write!(
            f,
            "{} runs of namespace {} verified: {} consistent, {mismatched} mismatched",
            self.runs.len(),
            self.namespace,
            self.runs.len() - mismatched,
        )
    }
}
