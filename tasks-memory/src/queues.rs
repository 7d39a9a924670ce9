//! Queue configurations: their limits, and the rate window a put keeps. The claim reads
//! them (see `tasks_core::transition::Admission`).

use crate::MemoryStore;
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::queue::{Queue, QueueOptions, RateLimit};
use tasks_core::store::{QueueStore, check};

/// A rate limit as the SQL stores keep it: its period in whole milliseconds.
fn as_stored((starts, period_ms): (Option<i32>, Option<i64>)) -> Option<RateLimit> {
    Queue::rate_from_row(starts.map(i64::from), period_ms)
}

#[async_trait]
impl QueueStore for MemoryStore {
    /// Creates or replaces a queue's limits; its rate window and creation time are kept.
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        check::put_queue(&self.namespace, options)?;
        self.write(|tx| {
            let now = tx.now;
            let existing = tx.space.queues.get(options.name());
            let queue = Queue {
                name: options.name().to_owned(),
                concurrency: options.concurrency_limit(),
                rate_limit: as_stored(options.stored_rate()),
                key_rate_limit: as_stored(options.stored_key_rate()),
                key_concurrency: options.key_concurrency_limit(),
                window_start: existing.and_then(|queue| queue.window_start),
                window_starts: existing.map_or(0, |queue| queue.window_starts),
                created_at: existing.map_or(now, |queue| queue.created_at),
                updated_at: now,
            };
            tx.space.queues.insert(queue.name.clone(), queue.clone());
            Ok(queue)
        })
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        check::queue_name(name)?;
        Ok(self.read(|space| space.queues.get(name).cloned()))
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        Ok(self.read(|space| space.queues.values().cloned().collect()))
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        check::queue_name(name)?;
        self.write(|tx| match tx.space.queues.remove(name) {
            Some(_) => Ok(()),
            None => Err(StoreError::QueueNotFound {
                name: name.to_owned(),
            }),
        })
    }
}
