//! The claim loop: claim as many runs as there are free slots, execute each in a task of
//! its own, sleep until a wake-up, a freed slot or the poll interval, and at shutdown wait
//! for the runs in flight up to the grace period.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use rand::Rng;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use super::{UnknownWorkflowPolicy, Worker};
use crate::error::StoreError;
use crate::executor::Outcome;
use crate::failure::ErrorRecord;
use crate::store::{ClaimedRun, FailRun, NotificationStream};

impl Worker {
    /// Claims and executes runs until `shutdown` is cancelled. Then it stops claiming,
    /// waits up to the grace period for in-flight runs, and abandons the rest without
    /// writing to them: it marks its heartbeat row stale, so other workers replay them at
    /// once (or when their leases expire). A worker that stopped with nothing in flight
    /// removes its heartbeat row.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        tracing::info!(
            worker.id = %inner.executor.worker_id,
            namespace = inner.store.namespace(),
            workflows = inner.registry.len(),
            concurrency = inner.concurrency,
            "worker started"
        );
        let slots = Arc::new(Semaphore::new(inner.concurrency));
        let in_flight = Executions::default();
        let _slots_gauge = crate::metrics::SlotsGauge::new(inner.concurrency);
        let slot_freed = Arc::new(Notify::new());
        let wake = Arc::new(Notify::new());
        let tracker = TaskTracker::new();
        let abandon = CancellationToken::new();
        let mut notifications = self.subscribe().await;
        // The declared queues, before the first claim reads them.
        for queue in &inner.declared_queues {
            let declared = match inner.store.contract().queues() {
                Ok(queues) => queues.put_queue(queue).await.map(drop),
                Err(unsupported) => Err(unsupported),
            };
            if let Err(error) = declared {
                tracing::warn!(%error, queue = queue.name(), "could not declare a queue; the claims apply its stored configuration");
            }
        }
        let mut idle = inner.poll_min;
        // Beats until every run in flight has finished or been abandoned.
        let beating = inner.liveness.start().await;
        // The periodic purge stops with the claim loop (between two batches); the tracker
        // waits for it like for the runs in flight.
        let retention_stop = shutdown.child_token();
        if let Some(retention) = inner.retention.clone() {
            tracker.spawn(
                retention
                    .run(retention_stop.clone())
                    .instrument(tracing::info_span!("retention")),
            );
        }
        #[cfg(feature = "schedules")]
        let ticking = inner.scheduler.as_ref().map(|scheduler| scheduler.start());

        while !shutdown.is_cancelled() {
            let free = slots.available_permits();
            let mut claimed_all = false;
            if free > 0 {
                let claiming = std::time::Instant::now();
                match inner
                    .store
                    .contract()
                    .claim_runs_filtered(
                        &inner.executor.worker_id,
                        inner.executor.lease,
                        free as u32,
                        &inner.claim_filter,
                    )
                    .await
                {
                    Ok(runs) => {
                        crate::metrics::claimed(claiming.elapsed(), runs.len());
                        claimed_all = runs.len() == free;
                        if !runs.is_empty() {
                            idle = inner.poll_min;
                        }
                        for run in runs {
                            let in_flight = in_flight.clone();
                            let Ok(permit) = slots.clone().try_acquire_owned() else {
                                // Cannot happen: we claimed no more than the free slots.
                                tracing::error!(run.id = %run.run.id, "no free slot for a claimed run");
                                break;
                            };
                            let worker = self.clone();
                            let abandon = abandon.clone();
                            let slot_freed = slot_freed.clone();
                            let wake = wake.clone();
                            let shutdown = shutdown.clone();
                            tracker.spawn(async move {
                                let _executing = InFlight::enter(&in_flight, run.run.id).await;
                                let mut slot = Some(Slot {
                                    permit: Some(permit),
                                    freed: slot_freed,
                                    _in_use: crate::metrics::SlotInUse::new(),
                                });
                                let outcome =
                                    worker.process(run, claiming, abandon, &mut slot).await;
                                drop(slot);
                                if let Some(Outcome::Sleeping(wait)) = outcome {
                                    // Come back for the run when its sleep ends rather than
                                    // at the next idle poll. Not tracked: shutdown does not
                                    // wait for timers.
                                    tokio::spawn(async move {
                                        tokio::select! {
                                            () = tokio::time::sleep(wait) => wake.notify_one(),
                                            () = shutdown.cancelled() => {}
                                        }
                                    });
                                }
                            });
                        }
                    }
                    Err(error) => tracing::warn!(%error, "claiming runs failed; retrying"),
                }
            }
            if claimed_all {
                continue;
            }
            let wait = jitter(idle);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = slot_freed.notified(), if free == 0 || slots.available_permits() == 0 => {}
                () = wake.notified() => idle = inner.poll_min,
                woke = next_wakeup(&mut notifications) => {
                    if woke.is_none() {
                        notifications = self.subscribe().await;
                    }
                    idle = inner.poll_min;
                }
                () = tokio::time::sleep(wait) => {
                    idle = (idle * 2).min(inner.poll_max);
                }
            }
        }

        retention_stop.cancel();
        #[cfg(feature = "schedules")]
        if let Some(ticking) = ticking {
            ticking.stop().await;
        }
        tracker.close();
        tracing::info!(
            in_flight = tracker.len(),
            "worker stopping; waiting for in-flight runs"
        );
        let abandoned = tokio::time::timeout(inner.shutdown_grace, tracker.wait())
            .await
            .is_err();
        if abandoned {
            tracing::warn!(
                abandoned = tracker.len(),
                "grace period over; abandoning in-flight runs to other workers"
            );
            abandon.cancel();
            tracker.wait().await;
        }
        inner.liveness.stop(beating, abandoned).await;
        tracing::info!("worker stopped");
    }

    async fn subscribe(&self) -> Option<NotificationStream> {
        match self.inner.store.contract().subscribe().await {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot subscribe to wake-ups; relying on polling");
                None
            }
        }
    }

    async fn process(
        &self,
        claimed: ClaimedRun,
        claimed_at: std::time::Instant,
        abandon: CancellationToken,
        slot: &mut Option<Slot>,
    ) -> Option<Outcome> {
        let inner = &self.inner;
        let Some(definition) = inner
            .registry
            .get(&claimed.run.workflow_name, claimed.run.version.as_deref())
        else {
            self.unknown(claimed).await;
            return None;
        };
        let outcome = inner
            .executor
            .execute(claimed, claimed_at, definition, abandon, || {
                drop(slot.take())
            })
            .await;
        tracing::debug!(?outcome, "execution ended");
        let workflow = definition.name;
        crate::metrics::execution(workflow, outcome.label());
        match outcome {
            Outcome::Completed => crate::metrics::run_finished(workflow, "completed"),
            Outcome::Failed => crate::metrics::run_finished(workflow, "failed"),
            _ => {}
        }
        if matches!(outcome, Outcome::Abandoned) {
            // Give other work a chance before this worker tries again.
            tokio::time::sleep(inner.poll_min).await;
        }
        Some(outcome)
    }

    async fn unknown(&self, claimed: ClaimedRun) {
        let inner = &self.inner;
        let holder = claimed.holder();
        let run = claimed.run;
        let label = match &run.version {
            Some(version) => format!("{}@{}", run.workflow_name, version),
            None => run.workflow_name.clone(),
        };
        let message = format!(
            "workflow {label} is not registered in worker {}",
            inner.executor.worker_id
        );
        let result = match inner.unknown_workflow {
            UnknownWorkflowPolicy::Reschedule { initial, max } => {
                let deferrals = run
                    .error
                    .as_ref()
                    .filter(|e| e.get("kind").and_then(|k| k.as_str()) == Some("unregistered"))
                    .and_then(|e| e.get("deferrals"))
                    .and_then(|d| d.as_u64())
                    .unwrap_or(0);
                let factor = 2u32.saturating_pow(deferrals.min(16) as u32);
                let delay = initial.saturating_mul(factor).min(max);
                tracing::warn!(run.id = %run.id, %message, ?delay, "rescheduling a run this worker cannot execute");
                let reason = json!({
                    "message": message,
                    "kind": "unregistered",
                    "deferrals": deferrals + 1,
                });
                inner
                    .store
                    .contract()
                    .release_run(run.id, &holder, delay, reason)
                    .await
                    .map(|_| ())
            }
            UnknownWorkflowPolicy::Fail => {
                tracing::error!(run.id = %run.id, %message, "failing a run this worker cannot execute");
                inner
                    .store
                    .contract()
                    .fail_run(FailRun {
                        run_id: run.id,
                        holder,
                        error: ErrorRecord::new(message)
                            .with_kind("unregistered")
                            .non_retryable()
                            .to_json(),
                        force: true,
                    })
                    .await
                    .map(|_| ())
            }
        };
        if let Err(error) = result {
            match error {
                StoreError::LeaseLost { .. } | StoreError::WrongState { .. } => {}
                error => tracing::warn!(%error, "could not hand back an unknown workflow's run"),
            }
        }
    }
}

/// The runs this worker executes, each with a lock that its execution holds.
type Executions = Arc<std::sync::Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>>;

/// A run this worker executes: it holds the run's lock in [`Executions`] until dropped.
///
/// A claim can hand this worker a run that one of its own executions still holds:
/// - a lease that ran out while the execution went on (a heartbeat that came late on a
///   starved machine) hands the run back to this same worker;
/// - an execution that just ended the run (failed it, or put it to sleep) has committed, but
///   not dropped its marker yet, when a retry or a short sleep makes the run claimable again.
///
/// Every claim has an epoch of its own, and the store fences each write on it: once the run
/// is claimed again, the execution in flight has every write refused
/// ([`StoreError::LeaseLost`]) by the store itself, whatever this map says. The map only
/// keeps this process from running two executions of one run at once: the new execution
/// waits for the one in flight to end (at its next write, or when its step body returns), so
/// that their step bodies never overlap. Then it goes on with the claim: it replays what was
/// recorded, and runs again what the stale execution could not record, while a run that
/// became claimable again is run as it should be (dropping the claim would leave it held by
/// this worker until its lease ran out, beyond any wait of a client).
struct InFlight {
    executions: Executions,
    run_id: Uuid,
    lock: Arc<tokio::sync::Mutex<()>>,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl InFlight {
    /// Marks `run_id` as executing, once no other execution of this worker holds it.
    async fn enter(executions: &Executions, run_id: Uuid) -> InFlight {
        loop {
            let lock = {
                let mut runs = executions
                    .lock()
                    .unwrap_or_else(|poison| poison.into_inner());
                match runs.get(&run_id) {
                    Some(lock) => lock.clone(),
                    None => {
                        let lock = Arc::new(tokio::sync::Mutex::new(()));
                        let held = lock.clone().try_lock_owned().expect("a new lock is free");
                        runs.insert(run_id, lock.clone());
                        return InFlight {
                            executions: executions.clone(),
                            run_id,
                            lock,
                            _held: held,
                        };
                    }
                }
            };
            tracing::debug!(run.id = %run_id, "claimed a run this worker still executes; waiting for that execution to end");
            // The lock is released when the execution in flight drops its marker, which
            // removes it from the map first; then look again.
            drop(lock.lock_owned().await);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut runs = self
            .executions
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if runs
            .get(&self.run_id)
            .is_some_and(|lock| Arc::ptr_eq(lock, &self.lock))
        {
            runs.remove(&self.run_id);
        }
    }
}

/// A worker slot held by one run: frees it, and wakes the claim loop, when dropped.
struct Slot {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    freed: Arc<Notify>,
    /// Counts the slot in [`WORKER_SLOTS_IN_USE`](crate::metrics::WORKER_SLOTS_IN_USE)
    /// while it lives.
    _in_use: crate::metrics::SlotInUse,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The permit first, so that the woken claim loop sees the free slot.
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

/// Waits for a wake-up; `None` when the stream ended and must be re-subscribed. The
/// wake-ups already waiting behind the first are taken with it: one claim answers them all
/// (a burst of starts in this process announces each run, and claiming once per run would
/// take the runs one at a time).
async fn next_wakeup(notifications: &mut Option<NotificationStream>) -> Option<()> {
    match notifications {
        Some(stream) => {
            loop {
                match stream.next().await {
                    Some(notification) if wakes(&notification) => break,
                    Some(_) => continue,
                    None => return None,
                }
            }
            while let Some(next) = stream.next().now_or_never() {
                // The stream ended: re-subscribe.
                next?;
            }
            Some(())
        }
        None => std::future::pending().await,
    }
}

/// Whether `notification` may make a run claimable: not a finish, a status change or a
/// published value, which are for waiters.
fn wakes(notification: &crate::store::Notification) -> bool {
    !matches!(
        notification,
        crate::store::Notification::RunFinished { .. }
            | crate::store::Notification::StatusChanged { .. }
            | crate::store::Notification::StateChanged { .. }
    )
}

/// `base` ± 20 %, so that idle workers do not poll in lockstep.
fn jitter(base: Duration) -> Duration {
    let factor = rand::rng().random_range(0.8..1.2);
    base.mul_f64(factor)
}
