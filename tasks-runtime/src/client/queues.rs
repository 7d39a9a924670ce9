//! The configuration of named queues, from the client: see [`crate::queue`].

use super::Client;
use crate::error::StoreError;

impl Client {
    /// Creates or replaces the configuration of a queue (its concurrency and rate limits),
    /// which every worker's claim applies from then on. A refused name or limit is a
    /// [`StoreError::Limit`], and nothing is written.
    ///
    /// ```no_run
    /// # async fn demo(client: tasks_runtime::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tasks_runtime::QueueOptions;
    ///
    /// client
    ///     .put_queue(QueueOptions::new("emails").concurrency(10).rate_limit(100, Duration::from_secs(60)))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn put_queue(
        &self,
        options: crate::queue::QueueOptions,
    ) -> Result<crate::queue::Queue, StoreError> {
        self.store.contract().queues()?.put_queue(&options).await
    }

    /// The configuration of a queue, or `None` when it has none (no limits).
    pub async fn get_queue(&self, name: &str) -> Result<Option<crate::queue::Queue>, StoreError> {
        self.store.contract().queues()?.get_queue(name).await
    }

    /// Every configured queue of the namespace, by name.
    pub async fn list_queues(&self) -> Result<Vec<crate::queue::Queue>, StoreError> {
        self.store.contract().queues()?.list_queues().await
    }

    /// Removes a queue's configuration: its runs are claimed without limits from then on
    /// ([`StoreError::QueueNotFound`] when it has none).
    pub async fn delete_queue(&self, name: &str) -> Result<(), StoreError> {
        self.store.contract().queues()?.delete_queue(name).await
    }
}
