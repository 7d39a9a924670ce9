//! Named queues in the store ([`QueueStore`]): their concurrency and rate limits, which every
//! claim of the namespace reads.

use crate::error::StoreResult;
use crate::queue::{Queue, QueueOptions};

#[cfg(doc)]
use crate::{Store, StoreError};

/// Named queues and their limits (see the [`queue`](crate::queue) module). A capability: reached through
/// [`Store::queues`].
#[async_trait::async_trait]
pub trait QueueStore: Send + Sync {
    /// Creates or replaces the configuration of a queue: its concurrency and rate limits
    /// (a limit left out is removed). The current rate window is kept. Every claim of the
    /// namespace reads it from then on.
    ///
    /// Errors: a refused name or limit ([`StoreError::Limit`]; nothing is written), else the
    /// database's.
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue>;

    /// The configuration of the queue with this name, or `None` when it has none (a queue
    /// without configuration has no limits).
    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>>;

    /// Every configured queue of this namespace, by name.
    async fn list_queues(&self) -> StoreResult<Vec<Queue>>;

    /// Removes the configuration of a queue: its runs are claimed without limits from then
    /// on. Its runs are kept.
    ///
    /// Errors: [`StoreError::QueueNotFound`].
    async fn delete_queue(&self, name: &str) -> StoreResult<()>;
}
