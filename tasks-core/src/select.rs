//! Selects: a run waiting for the first of several events, timers and children, and the
//! parameters and outcome of the store operation [`SelectStore::wait_for_any`].
//!
//! The store only answers "is anything ready yet?" and, when nothing is, parks the run so
//! that any of the things it waits for wakes it: a send on one of its topics, the earliest
//! of its timers, the end of one of its children. Which of the ready things wins, and what
//! is recorded for the winner, is the engine's rule (the declaration order of the select's
//! arms), written once in `tasks-runtime`; the store never consumes an event or completes a
//! step here.
//!
//! A parked select reuses the columns of the other waits, so no schema change is needed:
//! `wait_topic` holds its one topic, or [`ANY_TOPIC`] when it waits on several (a send on
//! any topic wakes the run, which looks again and parks again when the event was not for
//! it), and `awaiting_children` is 1 when it waits for children (the first of them that
//! ends wakes it; a child it does not wait for can wake it too, with the same result).

#[cfg(doc)]
use crate::{Notification, StepKind};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::holder::Holder;
use crate::limits::{self, Field};
use crate::model::WorkflowRun;

/// The `wait_topic` of a run parked in a select over several topics: a send on any topic
/// wakes it. [`limits::check_topic`] refuses the empty topic, so no event is ever sent on
/// it.
pub const ANY_TOPIC: &str = "";

/// Parameters of [`SelectStore::wait_for_any`].
#[derive(Debug, Clone)]
pub struct WaitForAny {
    /// The run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
    /// The topics whose unconsumed events the select waits for.
    pub topics: Vec<String>,
    /// The resolved step names of the child starts whose children the select waits for.
    pub child_steps: Vec<String>,
    /// The earliest deadline of the select's timers, [`limits::LATEST`] without one.
    pub until: DateTime<Utc>,
    /// Park the run when nothing is ready; `false` only looks (a select that also waits
    /// for work running in the worker's process, which a parked run would abandon).
    pub park: bool,
}

impl WaitForAny {
    /// Checks the holder's worker id, the topics, the step names and the deadline against
    /// the [`limits`]. A store reaches it through
    /// [`store::check`](crate::store::check).
    pub fn check(&self) -> StoreResult<()> {
        limits::check_worker_id(&self.holder.worker_id)?;
        for topic in &self.topics {
            limits::check_topic(topic)?;
        }
        for name in &self.child_steps {
            limits::check_step_name(name)?;
        }
        limits::check_time(Field::EventTimeout, self.until)?;
        if self.topics.len() > limits::MAX_SELECT_ARMS
            || self.child_steps.len() > limits::MAX_SELECT_ARMS
        {
            return Err(StoreError::InvalidArgument(format!(
                "a select waits for at most {} topics and {} children",
                limits::MAX_SELECT_ARMS,
                limits::MAX_SELECT_ARMS
            )));
        }
        Ok(())
    }

    /// The `wait_topic` the run parks with: its one topic, [`ANY_TOPIC`] for several,
    /// `None` (SQL `NULL`) for none.
    pub fn park_topic(&self) -> Option<&str> {
        match self.topics.as_slice() {
            [] => None,
            [topic] => Some(topic),
            _ => Some(ANY_TOPIC),
        }
    }

    /// The `awaiting_children` the run parks with: 1 when it waits for any child (the
    /// first that ends wakes it), else 0.
    pub fn awaiting_children(&self) -> u32 {
        u32::from(!self.child_steps.is_empty())
    }
}

/// What was ready when a select looked, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The topics of the select holding at least one unconsumed event, in the order of
    /// [`WaitForAny::topics`].
    pub topics: Vec<String>,
    /// The child steps of the select whose child has ended (or whose step is completed
    /// already, or whose child no longer exists), in the order of
    /// [`WaitForAny::child_steps`].
    pub children: Vec<String>,
    /// The store's clock when it looked: a timer whose deadline is at or before it is due.
    pub now: DateTime<Utc>,
}

impl Readiness {
    /// Whether anything is ready: an event, an ended child, or `until` reached.
    pub fn any(&self, until: DateTime<Utc>) -> bool {
        !self.topics.is_empty() || !self.children.is_empty() || until <= self.now
    }
}

/// The outcome of [`SelectStore::wait_for_any`].
#[derive(Debug, Clone, PartialEq)]
pub enum AnyWait {
    /// Something is ready (or nothing is and the select only looked): what, and when. The
    /// run is still running; nothing was written but the clearing of its wait columns.
    Ready(Readiness),
    /// Nothing is ready: the run is parked (sleeping until [`WaitForAny::until`], no
    /// worker) and the worker must let it go.
    Parked(Box<WorkflowRun>),
}

/// Whether a select that found `readiness` parks: when nothing is ready and it was asked
/// to ([`WaitForAny::park`]).
pub fn parks(readiness: &Readiness, until: DateTime<Utc>, park: bool) -> bool {
    park && !readiness.any(until)
}

/// Selects (see the module docs). A capability: reached through
/// [`Store::select`](crate::Store::select).
#[async_trait::async_trait]
pub trait SelectStore: Send + Sync {
    /// The look of a select of a run that `params.holder` holds, in one transaction that
    /// first locks the run (fenced on the lease): finds which of `params.topics` hold an
    /// unconsumed event and which of the children of `params.child_steps` have ended, and
    /// reads the store's clock. When something is ready, or `params.park` is false, clears
    /// the run's `wait_topic` and `awaiting_children` and answers [`AnyWait::Ready`];
    /// otherwise parks the run (sleeping until `params.until`, no worker, `wait_topic` =
    /// [`WaitForAny::park_topic`], `awaiting_children` = [`WaitForAny::awaiting_children`])
    /// and announces it ([`AnyWait::Parked`]). A send on a topic it waits on (any topic for
    /// [`ANY_TOPIC`]) or the end of a child then makes it available, as for an event wait or
    /// a join. Consumes nothing and completes no step.
    ///
    /// Errors: [`StoreError::UnknownStep`] when a child step is not a child step of the
    /// run; the limit errors of [`WaitForAny::check`]; worker-side errors.
    async fn wait_for_any(&self, params: WaitForAny) -> StoreResult<AnyWait>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(topics: &[&str], children: &[&str]) -> WaitForAny {
        WaitForAny {
            run_id: Uuid::now_v7(),
            holder: Holder::new("w", 1),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            child_steps: children.iter().map(|c| (*c).to_owned()).collect(),
            until: limits::LATEST,
            park: true,
        }
    }

    #[test]
    fn a_select_parks_on_its_one_topic_or_on_any() {
        assert_eq!(wait(&[], &[]).park_topic(), None);
        assert_eq!(wait(&["a"], &[]).park_topic(), Some("a"));
        assert_eq!(wait(&["a", "b"], &[]).park_topic(), Some(ANY_TOPIC));
        assert_eq!(wait(&[], &["child/x"]).awaiting_children(), 1);
        assert_eq!(wait(&["a"], &[]).awaiting_children(), 0);
    }

    #[test]
    fn the_empty_topic_is_refused() {
        assert!(wait(&[""], &[]).check().is_err());
        assert!(wait(&["a"], &["child/x"]).check().is_ok());
        let many: Vec<String> = (0..=limits::MAX_SELECT_ARMS)
            .map(|i| i.to_string())
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(matches!(
            wait(&refs, &[]).check(),
            Err(StoreError::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_select_parks_only_when_nothing_is_ready() {
        let now = Utc::now();
        let later = now + chrono::TimeDelta::seconds(1);
        let nothing = Readiness {
            topics: vec![],
            children: vec![],
            now,
        };
        assert!(parks(&nothing, later, true));
        assert!(!parks(&nothing, later, false), "only looking");
        assert!(!parks(&nothing, now, true), "a timer is due");
        let event = Readiness {
            topics: vec!["a".into()],
            ..nothing.clone()
        };
        assert!(!parks(&event, later, true));
        let child = Readiness {
            children: vec!["child/x".into()],
            ..nothing
        };
        assert!(!parks(&child, later, true));
    }
}
