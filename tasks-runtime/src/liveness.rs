//! A worker's liveness: one heartbeat row per worker, rewritten about once a second, so that
//! the runs of a worker that died are claimed within seconds instead of when their leases
//! expire (see [`LeaseStore::heartbeat`](crate::LeaseStore::heartbeat)). One write per worker, whatever
//! number of runs it holds; the per-run lease stays as the fallback for stores and workers
//! without a heartbeat row.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use crate::store::SharedStore;

/// Default time between two heartbeats of a worker.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Default staleness, in heartbeat intervals: a worker whose row was not rewritten for this
/// many intervals is presumed dead.
pub(crate) const DEFAULT_STALE_INTERVALS: u32 = 3;

/// The heartbeat of one worker in one namespace.
#[derive(Clone)]
pub(crate) struct Liveness {
    pub(crate) store: SharedStore,
    pub(crate) worker_id: String,
    pub(crate) interval: Duration,
    pub(crate) stale_after: Duration,
    /// When the last heartbeat that went through was sent.
    pub(crate) beats: Arc<BeatClock>,
}

/// When the worker's last heartbeat that went through was sent, by the process's monotonic
/// clock, which goes on while the process is stopped (`SIGSTOP`) or starved: what a worker
/// reads before it starts a step body, to know whether other workers may already take its
/// runs for a dead worker's.
#[derive(Debug)]
pub(crate) struct BeatClock {
    last: Mutex<Option<Instant>>,
    stale_after: Duration,
}

impl BeatClock {
    pub(crate) fn new(stale_after: Duration) -> Arc<Self> {
        Arc::new(BeatClock {
            last: Mutex::new(None),
            stale_after,
        })
    }

    /// The last beat's instant. A panic while holding the lock leaves a plain instant
    /// behind: keep going.
    fn last(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, sent: Instant) {
        let mut last = self.last();
        if last.is_none_or(|last| last < sent) {
            *last = Some(sent);
        }
    }

    /// Whether the worker's row is surely fresh: the last heartbeat that went through was
    /// sent less than two thirds of the staleness ago (the rest is slack for the database's
    /// clock and the statement's own time). `false` before the first one.
    pub(crate) fn fresh(&self) -> bool {
        self.last()
            .is_some_and(|last| last.elapsed() < self.stale_after.mul_f64(2.0 / 3.0))
    }
}

/// The running heartbeat task: aborted when dropped, so no heartbeat outlives its worker
/// whatever way the worker's future ends.
pub(crate) struct Beating {
    stop: CancellationToken,
    task: AbortOnDropHandle<()>,
}

impl Liveness {
    /// Writes the first heartbeat (so the row exists before the worker claims anything; a
    /// failure is logged and the loop keeps trying), then beats every interval until the
    /// returned handle is stopped or dropped.
    pub(crate) async fn start(&self) -> Beating {
        self.beat().await;
        let stop = CancellationToken::new();
        let liveness = self.clone();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut ticks = tokio::time::interval(liveness.interval);
                ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
                ticks.tick().await;
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = ticks.tick() => liveness.beat().await,
                    }
                }
            }
            .instrument(tracing::Span::current())
        });
        Beating {
            stop,
            task: AbortOnDropHandle::new(task),
        }
    }

    async fn beat(&self) {
        let sent = Instant::now();
        match self
            .store
            .heartbeat(&self.worker_id, self.stale_after)
            .await
        {
            Ok(()) => self.beats.record(sent),
            Err(error) => {
                tracing::warn!(%error, "worker heartbeat failed; retrying at the next interval");
            }
        }
    }

    /// Stops the heartbeat once the worker has stopped: removes the worker's row, or, when
    /// runs were abandoned in flight, makes it stale at once so that other workers take
    /// them now rather than when their leases expire.
    pub(crate) async fn stop(&self, beating: Beating, abandoned: bool) {
        beating.stop.cancel();
        if let Err(error) = beating.task.await {
            tracing::debug!(%error, "the heartbeat task ended abnormally");
        }
        let result = if abandoned {
            self.store.heartbeat(&self.worker_id, Duration::ZERO).await
        } else {
            self.store.remove_worker(&self.worker_id).await
        };
        if let Err(error) = result {
            tracing::warn!(%error, "could not remove the worker's heartbeat row; it goes stale on its own");
        }
    }
}
