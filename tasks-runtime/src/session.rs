//! The worker side of one claimed run: every write the run makes goes through its
//! [`RunSession`], which owns the holding and batching of finished step records and knows
//! why the run must stop.
//!
//! A finished step's record is *held* until the run's next write, so that a workflow that
//! returns right after its last step completes with that step in the same transaction
//! ([`LeaseStore::complete_run_with_steps`](crate::LeaseStore::complete_run_with_steps)). Every write
//! of the run, and every step before it runs, writes what is held first; a timer writes it
//! after [`HOLD_WINDOW`] if nothing else did.
//!
//! A write that fails because the database failed (a lost connection, a restart) is tried
//! again with backoff for up to the run's lease ([`retrying`]) instead of abandoning the run
//! to it: the worker is alive and still holds the run. Refusals (lease lost, wrong state,
//! not found) are answers, not failures, and are never retried. A retried write is fenced
//! like the first, so a write that did commit before its connection broke is refused the
//! second time (a completion, a failure, a sleep). A step record is written once whatever
//! the retries: each attempt carries an id chosen here, once, before the first try, and a
//! store answers a record whose id it holds with the attempt it stored
//! ([`StepStore::record_step_attempt`](crate::StepStore::record_step_attempt)); the steps that
//! write by name (events, children, published state) find their stored attempt by name.
//!
//! A session made for a replay verification ([`RunSession::verifying`]) writes nothing:
//! every write, and every step body, is refused with [`Halt::Unrecorded`], so the replay
//! stops at the first call the history does not hold.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::Holder;
use crate::error::{StoreError, StoreResult};
use crate::liveness::BeatClock;
use crate::model::{StepAttempt, StepKind, StepStatus};
use crate::store::{CreateStepAttempt, RecordStepAttempt, SharedStore, StepUpdate};

mod halt;
mod outcome;

pub(crate) use halt::{Halt, limit_failure, retrying};

/// How long a finished step's record may wait for the run's next write (the next step, a
/// sleep, the completion) before it is written on its own. Workflow code between two steps
/// normally takes microseconds; this bounds the wait when it does not.
pub(crate) const HOLD_WINDOW: Duration = Duration::from_millis(2);

/// The writes of one claimed run, under its claim's lease: every write carries the claim's
/// [`Holder`] (the worker and the claim epoch), so once the run is claimed again, even by
/// this same worker, the store refuses them all.
pub(crate) struct RunSession {
    store: SharedStore,
    run_id: Uuid,
    holder: Holder,
    /// How long a write failing on database errors is tried again (the run's lease).
    retry_for: Duration,
    /// Finished function-step attempts not written yet, with when each was held.
    held: Mutex<Vec<(tokio::time::Instant, RecordStepAttempt)>>,
    /// Since when the run's lease surely runs, by the monotonic clock: the claim's sending,
    /// then each lease extension's. [`RunSession::confirm_held`] reads it.
    lease_from: Mutex<std::time::Instant>,
    /// The worker's heartbeats, which [`RunSession::confirm_held`] reads too.
    beats: Arc<BeatClock>,
    /// Held while held records are written, so that whoever writes next waits for a write
    /// in flight.
    writing: tokio::sync::Mutex<()>,
    /// A timer will write the held records unless the run's next write does first.
    timer_scheduled: AtomicBool,
    /// Why the run stops, once something decided it must.
    halt: Mutex<Option<Halt>>,
    halted: Notify,
    /// A replay verification's session: every write is refused.
    verifying: bool,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl RunSession {
    /// The session of `run_id`, held by `holder` by a claim sent at `claimed_at`, on
    /// a worker whose heartbeats `beats` records; writes failing on database errors are
    /// tried again for up to `retry_for` (the lease).
    pub(crate) fn new(
        store: SharedStore,
        run_id: Uuid,
        holder: Holder,
        retry_for: Duration,
        claimed_at: std::time::Instant,
        beats: Arc<BeatClock>,
    ) -> Arc<Self> {
        Arc::new(RunSession {
            store,
            run_id,
            holder,
            retry_for,
            held: Mutex::new(Vec::new()),
            lease_from: Mutex::new(claimed_at),
            beats,
            writing: tokio::sync::Mutex::new(()),
            timer_scheduled: AtomicBool::new(false),
            halt: Mutex::new(None),
            halted: Notify::new(),
            verifying: false,
        })
    }

    /// The session of a replay verification of `run_id` (see [`crate::verify`]): it reads
    /// nothing and writes nothing. Each write, and each step body, is refused with
    /// [`Halt::Unrecorded`] before it reaches the store, so that the replay stops at the
    /// first call the run's history does not hold.
    pub(crate) fn verifying(store: SharedStore, run_id: Uuid) -> Arc<Self> {
        Arc::new(RunSession {
            store,
            run_id,
            // Never written with: every write is refused first.
            holder: Holder::new("replay-verification", 0),
            retry_for: Duration::ZERO,
            held: Mutex::new(Vec::new()),
            lease_from: Mutex::new(std::time::Instant::now()),
            beats: BeatClock::new(Duration::from_secs(1)),
            writing: tokio::sync::Mutex::new(()),
            timer_scheduled: AtomicBool::new(false),
            halt: Mutex::new(None),
            halted: Notify::new(),
            verifying: true,
        })
    }

    /// Refuses, in a verification, what the call `step_name` would write or execute.
    fn writable(&self, step_name: &str) -> Result<(), Halt> {
        if self.verifying {
            return Err(Halt::Unrecorded(step_name.to_owned()));
        }
        Ok(())
    }

    /// Refuses, in a verification, a write of the run's own row (the executor's and the
    /// heartbeat's, which a verification never makes).
    fn run_writable(&self) -> StoreResult<()> {
        if self.verifying {
            return Err(StoreError::InvalidArgument(
                "a replay verification writes nothing".into(),
            ));
        }
        Ok(())
    }

    /// Confirms, before a step body starts, that the run is still this worker's. Nothing
    /// to do while the lease surely runs (less than three quarters of it since the claim or
    /// the last extension), the worker's heartbeat row is surely fresh, and it has not been
    /// stale since that claim or extension (a heartbeat that goes through again after a gap
    /// does not give back the runs taken during it). Otherwise (a
    /// worker that was stopped, starved or cut off from the database past that) another
    /// worker may already have taken the run over, and the body would repeat its side
    /// effects for nothing: the lease is extended first, a fenced write, and the body starts
    /// only when it goes through.
    ///
    /// In a verification, the body of `step_name` never starts: [`Halt::Unrecorded`].
    pub(crate) async fn confirm_held(&self, step_name: &str) -> Result<(), Halt> {
        self.writable(step_name)?;
        let lease_from = *lock(&self.lease_from);
        let fresh = self.beats.fresh();
        // A hold confirmed before the heartbeat's last gap proves nothing after it.
        let held_since_gap = self
            .beats
            .resumed()
            .is_none_or(|resumed| lease_from >= resumed);
        if fresh && held_since_gap && lease_from.elapsed() < self.retry_for.mul_f64(0.75) {
            return Ok(());
        }
        tracing::debug!(
            since_lease = ?lease_from.elapsed(),
            heartbeat_fresh = fresh,
            held_since_gap,
            "confirming the lease before a step body starts"
        );
        match self.extend_lease(self.retry_for).await {
            Ok(_) => Ok(()),
            Err(error) => Err(Halt::after(error)),
        }
    }

    // ---- Why the run stops ----

    /// Records why the run must stop (the first reason wins) and wakes the executor.
    pub(crate) fn set_halt(&self, halt: Halt) {
        let mut slot = lock(&self.halt);
        if slot.is_none() {
            *slot = Some(halt);
        }
        drop(slot);
        self.halted.notify_one();
    }

    /// Whether a reason to stop is recorded and not yet taken.
    pub(crate) fn is_halted(&self) -> bool {
        lock(&self.halt).is_some()
    }

    /// Waits until something halts the run, and says why.
    pub(crate) async fn halted(&self) -> Halt {
        loop {
            let notified = self.halted.notified();
            if let Some(halt) = lock(&self.halt).take() {
                return halt;
            }
            notified.await;
        }
    }

    /// The halt recorded without the executor having seen it yet (set just before the
    /// workflow returned, for instance).
    pub(crate) fn take_halt(&self) -> Option<Halt> {
        lock(&self.halt).take()
    }

    // ---- Step writes ----

    /// A finished function-step attempt of this run, as written.
    pub(crate) fn finished_attempt(
        &self,
        step_name: &str,
        config: Value,
        args: Option<Value>,
        result: Result<Value, Value>,
        elapsed: Duration,
    ) -> RecordStepAttempt {
        let (status, output, error) = match result {
            Ok(output) => (StepStatus::Completed, Some(output), None),
            Err(error) => (StepStatus::Failed, None, Some(error)),
        };
        RecordStepAttempt {
            // Chosen once: every retry of this record carries it.
            id: Uuid::now_v7(),
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_name: step_name.to_owned(),
            kind: StepKind::Function,
            config,
            status,
            output,
            error,
            args,
            elapsed,
        }
    }

    /// Holds a completed step's record until the run's next write (see the module docs).
    pub(crate) fn hold(self: &Arc<Self>, params: RecordStepAttempt) -> Result<(), Halt> {
        self.writable(&params.step_name)?;
        lock(&self.held).push((tokio::time::Instant::now(), params));
        if !self.timer_scheduled.swap(true, Ordering::SeqCst) {
            tokio::spawn(Arc::clone(self).write_held_too_long());
        }
        Ok(())
    }

    /// The timer of [`RunSession::hold`]: writes the held records once the oldest has
    /// waited [`HOLD_WINDOW`], and ends when none is held. Records held for less are left to
    /// the run's next write, which normally comes first.
    async fn write_held_too_long(self: Arc<Self>) {
        loop {
            let oldest = lock(&self.held).first().map(|(at, _)| *at);
            match oldest {
                Some(at) if at.elapsed() >= HOLD_WINDOW => {
                    // What the timer writes needs no replay entry: each call resolves a
                    // name of its own, and this one's call already returned.
                    if let Err(halt) = self.write_held().await {
                        self.set_halt(halt);
                        return;
                    }
                }
                Some(at) => tokio::time::sleep_until(at + HOLD_WINDOW).await,
                None => {
                    self.timer_scheduled.store(false, Ordering::SeqCst);
                    // A record held just now found the flag still set: stay for it.
                    let held = !lock(&self.held).is_empty();
                    if !held || self.timer_scheduled.swap(true, Ordering::SeqCst) {
                        return;
                    }
                }
            }
        }
    }

    /// Writes the held records, after any write of them in flight, and returns what was
    /// written; says why the run must stop when a record was refused.
    pub(crate) async fn write_held(&self) -> Result<Vec<StepAttempt>, Halt> {
        let _writing = self.writing.lock().await;
        let held = std::mem::take(&mut *lock(&self.held));
        if held.is_empty() {
            return Ok(Vec::new());
        }
        if let Some((_, first)) = held.first() {
            self.writable(&first.step_name)?;
        }
        // Several only after parallel steps; their records share the store's next batch.
        let store = &self.store;
        let writes = held.into_iter().map(|(_, params)| {
            retrying(self.retry_for, move || {
                store.contract().record_step_attempt(params.clone())
            })
        });
        let mut written = Vec::new();
        let mut halt = None;
        for result in futures::future::join_all(writes).await {
            match result {
                Ok(StepUpdate::Recorded(attempt)) => written.push(attempt),
                Ok(StepUpdate::Interrupted { run_status }) => {
                    halt.get_or_insert(Halt::Interrupted(run_status));
                }
                Err(error) => {
                    halt.get_or_insert(Halt::after(error));
                }
            }
        }
        match halt {
            Some(halt) => Err(halt),
            None => Ok(written),
        }
    }

    /// Takes the held records for the run's completion, after any write of them in flight.
    async fn take_held(&self) -> Vec<RecordStepAttempt> {
        let _writing = self.writing.lock().await;
        std::mem::take(&mut *lock(&self.held))
            .into_iter()
            .map(|(_, params)| params)
            .collect()
    }

    /// Writes a finished function-step attempt in one statement.
    pub(crate) async fn record(&self, params: RecordStepAttempt) -> Result<StepAttempt, Halt> {
        self.writable(&params.step_name)?;
        let store = &self.store;
        let recorded = retrying(self.retry_for, || {
            store.contract().record_step_attempt(params.clone())
        });
        match recorded.await {
            Ok(StepUpdate::Recorded(attempt)) => Ok(attempt),
            Ok(StepUpdate::Interrupted { run_status }) => Err(Halt::Interrupted(run_status)),
            Err(error) => Err(Halt::after(error)),
        }
    }

    /// Starts a running attempt (a durable sleep).
    pub(crate) async fn start_attempt(
        &self,
        step_name: &str,
        kind: StepKind,
        config: Value,
    ) -> Result<StepAttempt, Halt> {
        self.writable(step_name)?;
        let params = CreateStepAttempt {
            id: Uuid::now_v7(),
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_name: step_name.to_owned(),
            kind,
            config,
            context: None,
        };
        retrying(self.retry_for, || {
            self.store.contract().create_step_attempt(params.clone())
        })
        .await
        .map_err(Halt::after)
    }

    /// Completes a running attempt (a durable sleep that ended), named `step_name`.
    pub(crate) async fn finish_attempt(
        &self,
        step_name: &str,
        attempt_id: Uuid,
    ) -> Result<StepAttempt, Halt> {
        self.finish_attempt_with(step_name, attempt_id, Value::Null)
            .await
    }

    /// Completes a running attempt named `step_name` with `output` (a select that decided
    /// its winner).
    pub(crate) async fn finish_attempt_with(
        &self,
        step_name: &str,
        attempt_id: Uuid,
        output: Value,
    ) -> Result<StepAttempt, Halt> {
        self.writable(step_name)?;
        let update = retrying(self.retry_for, || {
            self.store.contract().complete_step_attempt(
                self.run_id,
                attempt_id,
                &self.holder,
                output.clone(),
            )
        })
        .await;
        let update = match update {
            // A retry whose first try completed it (the answer was lost): the same outcome.
            Err(StoreError::StepAlreadyFinished {
                id,
                status: StepStatus::Completed,
            }) if id == attempt_id => {
                match self.store.contract().get_step_attempt(attempt_id).await {
                    Ok(Some(attempt)) => Ok(StepUpdate::Recorded(attempt)),
                    Ok(None) => Err(StoreError::StepNotFound { id: attempt_id }),
                    Err(error) => Err(error),
                }
            }
            update => update,
        };
        match update {
            Ok(StepUpdate::Recorded(attempt)) => Ok(attempt),
            Ok(StepUpdate::Interrupted { run_status }) => Err(Halt::Interrupted(run_status)),
            Err(error) => Err(Halt::after(error)),
        }
    }

    /// An event wait (see [`EventStore::wait_for_event`](crate::EventStore::wait_for_event)).
    pub(crate) async fn wait_for_event(
        &self,
        step_name: &str,
        topic: &str,
        timeout: Option<Duration>,
        call: Value,
    ) -> Result<crate::events::EventWait, Halt> {
        self.writable(step_name)?;
        let params = crate::events::WaitForEvent {
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_name: step_name.to_owned(),
            topic: topic.to_owned(),
            timeout,
            call: Some(call),
        };
        let store = self.store.contract().events().map_err(Halt::after)?;
        retrying(self.retry_for, || store.wait_for_event(params.clone()))
            .await
            .map_err(Halt::after)
    }

    /// A publication of state (see [`StateStore::set_state`](crate::StateStore::set_state)).
    pub(crate) async fn set_state(
        &self,
        step_name: &str,
        key: &str,
        value: Value,
        call: Value,
    ) -> Result<crate::state::StateSet, Halt> {
        self.writable(step_name)?;
        let params = crate::state::SetState {
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_name: step_name.to_owned(),
            key: key.to_owned(),
            value,
            call: Some(call),
        };
        let store = self
            .store
            .contract()
            .published_state()
            .map_err(Halt::after)?;
        retrying(self.retry_for, || store.set_state(params.clone()))
            .await
            .map_err(Halt::after)
    }

    /// The namespace of the run's store.
    pub(crate) fn namespace(&self) -> &str {
        self.store.namespace()
    }

    /// Starts a child run from step `step_name` (see
    /// [`ChildStore::start_child`](crate::ChildStore::start_child)).
    pub(crate) async fn start_child(
        &self,
        step_name: &str,
        child: crate::store::CreateRun,
        on_parent_cancel: crate::children::ParentCancel,
        call: Value,
    ) -> Result<crate::children::StartedChild, Halt> {
        self.writable(step_name)?;
        let params = crate::children::StartChild {
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_name: step_name.to_owned(),
            child,
            on_parent_cancel,
            call: Some(call),
        };
        let store = self.store.contract().children().map_err(Halt::after)?;
        retrying(self.retry_for, || store.start_child(params.clone()))
            .await
            .map_err(Halt::after)
    }

    /// Waits for the children started by the steps `step_names` (see
    /// [`ChildStore::wait_for_children`](crate::ChildStore::wait_for_children)).
    pub(crate) async fn wait_for_children(
        &self,
        step_names: Vec<String>,
    ) -> Result<crate::children::ChildWait, Halt> {
        self.writable(&step_names.join(", "))?;
        let params = crate::children::WaitForChildren {
            run_id: self.run_id,
            holder: self.holder.clone(),
            step_names,
        };
        let store = self.store.contract().children().map_err(Halt::after)?;
        retrying(self.retry_for, || store.wait_for_children(params.clone()))
            .await
            .map_err(Halt::after)
    }

    /// The look of a select, parking the run when nothing is ready and `park` (see
    /// [`SelectStore::wait_for_any`](crate::select::SelectStore::wait_for_any)).
    pub(crate) async fn wait_for_any(
        &self,
        step_name: &str,
        topics: Vec<String>,
        child_steps: Vec<String>,
        until: DateTime<Utc>,
        park: bool,
    ) -> Result<tasks_core::select::AnyWait, Halt> {
        // It may park the run: a write.
        self.writable(step_name)?;
        let params = tasks_core::select::WaitForAny {
            run_id: self.run_id,
            holder: self.holder.clone(),
            topics,
            child_steps,
            until,
            park,
        };
        let store = self.store.contract().select().map_err(Halt::after)?;
        retrying(self.retry_for, || store.wait_for_any(params.clone()))
            .await
            .map_err(Halt::after)
    }
}
