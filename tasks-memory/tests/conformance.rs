//! The store conformance suite against the in-memory store: every case on a fresh store
//! and a fresh namespace.

use tasks_memory::MemoryStore;

/// A fresh store on a fresh namespace: the setup of the suite.
async fn memory_store() -> MemoryStore {
    tasks_test_support::memory::store()
}

tasks_conformance::conformance_suite!(memory_store);
