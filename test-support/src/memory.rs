//! In-memory stores for tests.

use tasks_memory::MemoryStore;

/// An in-memory store on a fresh namespace: nothing to connect to, nothing kept past the
/// process.
pub fn store() -> MemoryStore {
    MemoryStore::new()
        .with_namespace(crate::unique_namespace("test"))
        .expect("a generated namespace is valid")
}
