//! The purges that repeat [`RetentionStore::purge_runs`]: batch after batch for
//! [`Client::purge`](crate::Client::purge), and a worker's periodic purge
//! ([`WorkerBuilder::retention`](crate::WorkerBuilder::retention)), which takes the
//! namespace's turn first so that a fleet purges once per period. What a purge deletes is
//! in [`retention`](crate::retention).

#[cfg(doc)]
use crate::RetentionStore;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::StoreResult;
use crate::retention::PurgeRuns;
use crate::store::{SharedStore, Store};

/// Purges batch after batch until one comes back short (nothing more is due) or `stop` is
/// cancelled between two batches. Returns how many runs were deleted, also when a later
/// batch failed: the error of that batch is returned with the count so far.
pub(crate) async fn purge_batches(
    store: &dyn Store,
    params: &PurgeRuns,
    stop: Option<&CancellationToken>,
) -> (u64, StoreResult<()>) {
    let mut purged = 0;
    let retention = match store.retention() {
        Ok(retention) => retention,
        Err(unsupported) => return (purged, Err(unsupported)),
    };
    loop {
        if stop.is_some_and(CancellationToken::is_cancelled) {
            return (purged, Ok(()));
        }
        match retention.purge_runs(params).await {
            Ok(batch) => {
                purged += batch;
                if batch < u64::from(params.batch_size) {
                    return (purged, Ok(()));
                }
            }
            Err(error) => return (purged, Err(error)),
        }
    }
}

/// A worker's periodic purge: every `interval` it tries to take the namespace's retention
/// turn, and purges the runs older than `max_age` when it won it.
#[derive(Clone)]
pub(crate) struct Retention {
    pub(crate) store: SharedStore,
    pub(crate) worker_id: String,
    pub(crate) max_age: Duration,
    pub(crate) interval: Duration,
}

impl Retention {
    /// Runs until `stop` is cancelled; a purge in progress stops between two batches.
    pub(crate) async fn run(self, stop: CancellationToken) {
        loop {
            self.tick(&stop).await;
            // ± 20 % so the workers of a fleet do not all ask at once.
            let wait = self
                .interval
                .mul_f64(rand::Rng::random_range(&mut rand::rng(), 0.8..1.2));
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn tick(&self, stop: &CancellationToken) {
        let turn = match self.store.contract().retention() {
            Ok(retention) => {
                retention
                    .take_retention_turn(&self.worker_id, self.interval)
                    .await
            }
            Err(unsupported) => Err(unsupported),
        };
        match turn {
            Ok(Some(turn)) => {
                let params = PurgeRuns::older_than(self.max_age);
                let (purged, result) =
                    purge_batches(self.store.contract(), &params, Some(stop)).await;
                match result {
                    Ok(()) => tracing::debug!(turn, purged, "retention purge done"),
                    Err(error) => {
                        tracing::warn!(turn, purged, %error, "retention purge failed; retrying next period")
                    }
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "taking the retention turn failed; retrying next period")
            }
        }
    }
}
