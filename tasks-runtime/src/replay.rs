//! Replay: what a run's recorded history says about each step call, as pure code.
//!
//! Every step call and every durable sleep resolves its name in call order (`name`, then
//! `name:1`, `name:2`, ...), and the resolved name finds the attempts recorded under it in
//! the run's history. Nothing here does I/O: the executor loads the history once per claim,
//! the workflow context asks this module what to do with each call and tells it about every
//! attempt it writes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::model::{StepAttempt, StepStatus};

/// The run resolved more step names than its worker allows (a loop calling steps forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepLimitExceeded {
    /// The worker's limit.
    pub(crate) limit: u32,
}

/// The replay state of one execution of a run.
#[derive(Debug)]
pub(crate) struct Replay {
    /// Attempts by resolved step name, oldest first.
    history: HashMap<String, Vec<StepAttempt>>,
    /// How often each base name was resolved so far.
    counters: HashMap<String, u32>,
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
        Replay {
            history: by_name,
            counters: HashMap::new(),
            resolved: 0,
            max_steps,
        }
    }

    /// The name of the next call of `base`: `base` the first time, then `base:1`,
    /// `base:2`, ...
    pub(crate) fn resolve(&mut self, base: &str) -> Result<String, StepLimitExceeded> {
        self.resolved += 1;
        if self.resolved > self.max_steps {
            return Err(StepLimitExceeded {
                limit: self.max_steps,
            });
        }
        let count = self.counters.entry(base.to_owned()).or_insert(0);
        let name = if *count == 0 {
            base.to_owned()
        } else {
            format!("{base}:{count}")
        };
        *count += 1;
        Ok(name)
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

    /// How many attempts of `name` failed: the next attempt's number is one more.
    pub(crate) fn failed_attempts(&self, name: &str) -> u32 {
        self.history.get(name).map_or(0, |attempts| {
            let failed = attempts
                .iter()
                .filter(|attempt| attempt.status == StepStatus::Failed)
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::{Value, json};
    use uuid::Uuid;

    use super::*;
    use crate::model::StepKind;

    fn attempt(name: &str, status: StepStatus, output: Value) -> StepAttempt {
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
            .map(|base| replay.resolve(base).unwrap())
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
        let first = replay.resolve("charge").unwrap();
        let second = replay.resolve("charge").unwrap();
        let third = replay.resolve("charge").unwrap();
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
        let name = replay.resolve("charge").unwrap();
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
        let charge = replay.resolve("charge").unwrap();
        let ship = replay.resolve("ship").unwrap();
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
        assert!(replay.resolve("a").is_ok());
        assert!(replay.resolve("b").is_ok());
        assert_eq!(replay.resolve("a"), Err(StepLimitExceeded { limit: 2 }));
    }
}
