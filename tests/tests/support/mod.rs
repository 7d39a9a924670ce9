//! Helpers shared by the end-to-end test binaries.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tasks::postgres::PgStore;
use tasks::{Client, Store, Worker, WorkerBuilder};
use uuid::Uuid;

/// A fresh store on its own namespace.
pub async fn store() -> PgStore {
    tasks_tests::pg_store().await
}

/// A worker builder tuned for tests: fast polling, short lease.
pub fn worker(store: &PgStore) -> WorkerBuilder {
    Worker::builder(store.clone())
        .concurrency(8)
        .lease(Duration::from_secs(2))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .shutdown_grace(Duration::from_secs(10))
}

/// A client on `store` knowing every workflow of this test binary.
pub fn client(store: &PgStore) -> Client {
    Client::new(store.clone()).expect("registry has no duplicates")
}

fn call_counts() -> &'static Mutex<HashMap<(Uuid, String), u32>> {
    static CALLS: OnceLock<Mutex<HashMap<(Uuid, String), u32>>> = OnceLock::new();
    CALLS.get_or_init(Default::default)
}

/// Counts one more call of `label` for `run_id` and returns the new count. Keyed by run, so
/// tests running in parallel do not see each other's calls.
pub fn bump(run_id: Uuid, label: &str) -> u32 {
    let mut calls = call_counts().lock().unwrap();
    let count = calls.entry((run_id, label.to_owned())).or_insert(0);
    *count += 1;
    *count
}

/// How often `label` ran for `run_id`.
pub fn calls(run_id: Uuid, label: &str) -> u32 {
    let calls = call_counts().lock().unwrap();
    calls.get(&(run_id, label.to_owned())).copied().unwrap_or(0)
}

/// Evaluates `$check` (an expression that may `.await`, giving an `Option`) every 20 ms
/// until it is `Some`, failing the test after `$within`.
#[macro_export]
macro_rules! eventually {
    ($within:expr, $check:expr) => {{
        let within: std::time::Duration = $within;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(value) = $check {
                break value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not reached within {within:?}: {}",
                stringify!($check)
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }};
}

/// The store as a trait object, for helpers that take one.
pub fn shared(store: &PgStore) -> Arc<dyn Store> {
    Arc::new(store.clone())
}
