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
    beats: Mutex<Beats>,
    stale_after: Duration,
}

#[derive(Debug, Default)]
struct Beats {
    /// When the last beat that went through was sent.
    last: Option<Instant>,
    /// When the first beat after a gap (two beats further apart than [`BeatClock::fresh`]
    /// trusts) was sent: the worker's row may have been stale before it, and its runs taken.
    resumed: Option<Instant>,
}

impl BeatClock {
    pub(crate) fn new(stale_after: Duration) -> Arc<Self> {
        Arc::new(BeatClock {
            beats: Mutex::new(Beats::default()),
            stale_after,
        })
    }

    /// The beats. A panic while holding the lock leaves plain instants behind: keep going.
    fn beats(&self) -> std::sync::MutexGuard<'_, Beats> {
        self.beats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long after a beat the row is surely still fresh: two thirds of the staleness (the
    /// rest is slack for the database's clock and the statement's own time).
    fn trusted_for(&self) -> Duration {
        self.stale_after.mul_f64(2.0 / 3.0)
    }

    fn record(&self, sent: Instant) {
        let trusted_for = self.trusted_for();
        let mut beats = self.beats();
        match beats.last {
            Some(last) if last >= sent => {}
            Some(last) => {
                if sent.duration_since(last) >= trusted_for {
                    beats.resumed = Some(sent);
                }
                beats.last = Some(sent);
            }
            None => beats.last = Some(sent),
        }
    }

    /// Whether the worker's row is surely fresh: the last heartbeat that went through was
    /// sent less than two thirds of the staleness ago. `false` before the first one.
    pub(crate) fn fresh(&self) -> bool {
        let trusted_for = self.trusted_for();
        self.beats()
            .last
            .is_some_and(|last| last.elapsed() < trusted_for)
    }

    /// When the beats last resumed after a gap in which the row may have gone stale, if
    /// they ever did. A hold confirmed before then says nothing of the runs held now:
    /// another worker may have taken them during the gap, and the fresh row that follows
    /// does not give them back.
    pub(crate) fn resumed(&self) -> Option<Instant> {
        self.beats().resumed
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
            .contract()
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
            self.store
                .contract()
                .heartbeat(&self.worker_id, Duration::ZERO)
                .await
        } else {
            self.store.contract().remove_worker(&self.worker_id).await
        };
        if let Err(error) = result {
            tracing::warn!(%error, "could not remove the worker's heartbeat row; it goes stale on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_closer_than_the_trusted_window_are_no_gap() {
        let clock = BeatClock::new(Duration::from_secs(3));
        let start = Instant::now();
        clock.record(start);
        clock.record(start + Duration::from_secs(1));
        clock.record(start + Duration::from_millis(2_900));
        assert_eq!(clock.resumed(), None);
    }

    #[test]
    fn a_beat_after_a_gap_marks_when_the_beats_resumed() {
        let clock = BeatClock::new(Duration::from_secs(3));
        let start = Instant::now();
        clock.record(start);
        let resumed = start + Duration::from_secs(10);
        clock.record(resumed);
        assert_eq!(clock.resumed(), Some(resumed));
        // Regular beats after it keep the mark; a late answer of an older beat changes
        // nothing.
        clock.record(resumed + Duration::from_secs(1));
        clock.record(start + Duration::from_secs(5));
        assert_eq!(clock.resumed(), Some(resumed));
    }

    #[test]
    fn the_first_beat_is_no_gap() {
        let clock = BeatClock::new(Duration::from_secs(3));
        assert!(!clock.fresh());
        clock.record(Instant::now());
        assert!(clock.fresh());
        assert_eq!(clock.resumed(), None);
    }
}
