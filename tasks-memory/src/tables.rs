//! The tables: every namespace's rows behind one lock, and the write transaction every
//! operation runs in.
//!
//! A [`Row`] is a run as stored: the [`WorkflowRun`] callers see, plus the columns only the
//! store reads (priority, concurrency key, idempotency scope, the topic a run waits on, the
//! children it waits for). A [`Space`] holds one namespace's rows; handles of other
//! namespaces never reach it.

use crate::MemoryStore;
use chrono::{DateTime, SubsecRound, TimeDelta, Utc};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::events::RunEvent;
use tasks_core::flow::Concurrency;
use tasks_core::idempotency::KeyHold;
use tasks_core::model::{StepAttempt, StepKind, WorkflowRun};
use tasks_core::queue::Queue;
use tasks_core::schedule::Schedule;
use tasks_core::state::PublishedState;
use tasks_core::store::{Notification, NotificationStream, namespace_stream};
use tasks_core::transition::RateWindow;
use tokio::sync::broadcast;
use uuid::Uuid;

/// How many notifications a slow subscriber may fall behind before it gets a `Missed`.
const CAPACITY: usize = 1024;

/// What every handle of one store shares: the tables and the notification channel.
pub(crate) struct Shared {
    tables: Mutex<BTreeMap<String, Space>>,
    sender: broadcast::Sender<Notification>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            tables: Mutex::new(BTreeMap::new()),
            sender: broadcast::channel(CAPACITY).0,
        }
    }

    /// Sends `notification` to every subscriber; having none is not an error.
    pub(crate) fn publish(&self, notification: Notification) {
        let _ = self.sender.send(notification);
    }

    /// The lock. Every operation checks what may fail before it changes anything, and no
    /// code under the lock panics on a caller's input, so the tables of a poisoned lock are
    /// whole and stay usable.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Space>> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A run as stored.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What callers see.
    pub(crate) run: WorkflowRun,
    /// Pending runs of higher priority are claimed first.
    pub(crate) priority: i32,
    /// The run's concurrency key and limit.
    pub(crate) concurrency: Option<Concurrency>,
    /// How long the run holds `run.idempotency_key`.
    pub(crate) key_scope: KeyHold,
    /// The key a later start took from it once its scope lapsed, for the record.
    pub(crate) released_key: Option<String>,
    /// The topic the run is parked waiting on, until the wait ends.
    pub(crate) wait_topic: Option<String>,
    /// How many of its children the parked run waits for.
    pub(crate) awaiting_children: u32,
}

impl Row {
    /// A row around `run` with every store-only column empty.
    pub(crate) fn new(run: WorkflowRun) -> Self {
        Row {
            run,
            priority: 0,
            concurrency: None,
            key_scope: KeyHold::ForEver,
            released_key: None,
            wait_topic: None,
            awaiting_children: 0,
        }
    }

    /// The run's concurrency key.
    pub(crate) fn key(&self) -> Option<&str> {
        self.concurrency.as_ref().map(Concurrency::key)
    }
}

/// A worker's heartbeat row: when it last beat, and when it goes stale.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    pub(crate) beat_at: DateTime<Utc>,
    pub(crate) stale_at: DateTime<Utc>,
}

/// A namespace's retention lease row.
#[derive(Debug, Clone)]
pub(crate) struct RetentionLease {
    pub(crate) next_at: DateTime<Utc>,
    pub(crate) turns: u64,
}

/// The rows of one namespace.
#[derive(Debug, Default)]
pub(crate) struct Space {
    pub(crate) runs: BTreeMap<Uuid, Row>,
    pub(crate) steps: BTreeMap<Uuid, StepAttempt>,
    pub(crate) events: BTreeMap<Uuid, RunEvent>,
    /// The latest value of each (run, key).
    pub(crate) state: BTreeMap<(Uuid, String), PublishedState>,
    pub(crate) schedules: BTreeMap<String, Schedule>,
    pub(crate) queues: BTreeMap<String, Queue>,
    /// The rate window of each concurrency key, shared by the queues with a rate limit per
    /// key.
    pub(crate) key_windows: HashMap<String, RateWindow>,
    pub(crate) workers: HashMap<String, Heartbeat>,
    pub(crate) retention: Option<RetentionLease>,
}

impl Space {
    /// The run with this id, as callers see it.
    pub(crate) fn run(&self, run_id: Uuid) -> Option<WorkflowRun> {
        self.runs.get(&run_id).map(|row| row.run.clone())
    }

    /// Every attempt of a run, oldest first.
    pub(crate) fn history(&self, run_id: Uuid) -> Vec<&StepAttempt> {
        let mut steps: Vec<&StepAttempt> = self
            .steps
            .values()
            .filter(|step| step.workflow_run_id == run_id)
            .collect();
        steps.sort_by_key(|step| (step.created_at, step.id));
        steps
    }

    /// The newest attempt of a run named `step_name` of `kind`.
    pub(crate) fn last_step(
        &self,
        run_id: Uuid,
        step_name: &str,
        kind: StepKind,
    ) -> Option<&StepAttempt> {
        self.steps
            .values()
            .filter(|step| {
                step.workflow_run_id == run_id && step.step_name == step_name && step.kind == kind
            })
            .max_by_key(|step| (step.created_at, step.id))
    }

    /// The run of `workflow_name` holding `key`.
    pub(crate) fn run_by_key(&self, workflow_name: &str, key: &str) -> Option<&Row> {
        self.runs.values().find(|row| {
            row.run.workflow_name == workflow_name
                && row.run.idempotency_key.as_deref() == Some(key)
        })
    }
}

/// A write: the namespace's rows under the lock, the time it read from the store's clock,
/// and the notifications to send once it succeeded.
pub(crate) struct Tx<'a> {
    pub(crate) space: &'a mut Space,
    /// The store's clock when the write took the lock, to the microsecond.
    pub(crate) now: DateTime<Utc>,
    pub(crate) namespace: &'a str,
    /// The notifications to send once the write succeeded.
    pub(crate) notes: Vec<Notification>,
}

impl Tx<'_> {
    /// `now + duration`, counted in whole milliseconds like the Postgres store's intervals.
    ///
    /// Errors: [`StoreError::InvalidArgument`] past the instants a store holds.
    pub(crate) fn plus(&self, duration: Duration) -> StoreResult<DateTime<Utc>> {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        TimeDelta::try_milliseconds(millis)
            .and_then(|delta| self.now.checked_add_signed(delta))
            .filter(|at| *at <= latest())
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!("a delay of {duration:?} is out of range"))
            })
    }

    /// `now - duration`, to the microsecond.
    ///
    /// Errors: [`StoreError::InvalidArgument`] before the instants a store holds.
    pub(crate) fn minus(&self, duration: Duration) -> StoreResult<DateTime<Utc>> {
        TimeDelta::from_std(duration)
            .ok()
            .and_then(|delta| self.now.checked_sub_signed(delta))
            .filter(|at| *at >= earliest())
            .map(stored)
            .ok_or_else(|| {
                StoreError::InvalidArgument(format!("a duration of {duration:?} is out of range"))
            })
    }
}

/// The earliest instant the SQL stores hold (the year 0000).
fn earliest() -> DateTime<Utc> {
    DateTime::<Utc>::MIN_UTC.max(tasks_core::limits::EARLIEST - TimeDelta::days(366))
}

/// The latest instant the SQL stores hold (the end of the year 9999).
fn latest() -> DateTime<Utc> {
    tasks_core::limits::LATEST
}

/// An instant as stored: to the microsecond.
pub(crate) fn stored(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// An instant a caller gave, as stored.
///
/// Errors: [`StoreError::InvalidArgument`] outside the instants a store holds (callers
/// checked the narrower limits before).
pub(crate) fn storable(at: DateTime<Utc>) -> StoreResult<DateTime<Utc>> {
    if at < earliest() || at > latest() {
        return Err(StoreError::InvalidArgument(format!(
            "timestamp {at} is outside the years 0000-9999 that a store can hold"
        )));
    }
    Ok(stored(at))
}

/// A JSON document that reads back as absent when it is `null`, as in the SQL stores
/// (inputs, contexts and step arguments).
pub(crate) fn absent_if_null(value: Option<Value>) -> Option<Value> {
    value.filter(|value| !value.is_null())
}

impl MemoryStore {
    /// Runs `write` on this namespace's rows under the lock, with the clock read once;
    /// when it succeeds, sends what it announced (still under the lock, so subscribers see
    /// writes in the order they happened).
    pub(crate) fn write<T>(
        &self,
        write: impl FnOnce(&mut Tx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut tables = self.shared.lock();
        let now = stored(self.clock.now());
        let space = tables.entry(self.namespace.to_string()).or_default();
        let mut tx = Tx {
            space,
            now,
            namespace: &self.namespace,
            notes: Vec::new(),
        };
        let outcome = write(&mut tx)?;
        for notification in tx.notes {
            self.shared.publish(notification);
        }
        Ok(outcome)
    }

    /// Runs `read` on this namespace's rows under the lock.
    pub(crate) fn read<T>(&self, read: impl FnOnce(&Space) -> T) -> T {
        let tables = self.shared.lock();
        match tables.get(&*self.namespace) {
            Some(space) => read(space),
            None => read(&Space::default()),
        }
    }

    /// The notifications of this namespace, from now on.
    pub(crate) fn notifications(&self) -> NotificationStream {
        namespace_stream(
            self.shared.sender.subscribe(),
            self.namespace.to_string(),
            Some,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_count_whole_milliseconds_and_stay_in_range() {
        let now = stored(Utc::now());
        let mut space = Space::default();
        let tx = Tx {
            space: &mut space,
            now,
            namespace: "n",
            notes: Vec::new(),
        };
        assert_eq!(
            tx.plus(Duration::from_micros(1_999)).unwrap(),
            now + TimeDelta::milliseconds(1)
        );
        assert!(matches!(
            tx.plus(Duration::from_secs(u64::MAX)),
            Err(StoreError::InvalidArgument(_))
        ));
        assert_eq!(
            tx.minus(Duration::from_nanos(1_500)).unwrap(),
            stored(now - TimeDelta::nanoseconds(1_500))
        );
    }

    #[test]
    fn instants_are_stored_to_the_microsecond() {
        let at = DateTime::parse_from_rfc3339("2024-03-05T07:08:09.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            storable(at).unwrap(),
            DateTime::parse_from_rfc3339("2024-03-05T07:08:09.123456Z").unwrap()
        );
        assert!(storable(DateTime::<Utc>::MAX_UTC).is_err());
        assert_eq!(absent_if_null(Some(Value::Null)), None);
    }
}
