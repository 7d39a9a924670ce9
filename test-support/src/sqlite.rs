//! SQLite stores for the tests: a fresh database file per store.
//!
//! Files live in `<temp dir>/tasks-tests-sqlite/`. A test cannot delete its file when it
//! ends (the store it hands out may outlive it), so each test process removes the files
//! that earlier processes left there more than 15 minutes ago.

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, SystemTime};

use tasks_sqlite::SqliteStore;
use uuid::Uuid;

use crate::unique_namespace;

/// The directory that holds the tests' database files.
pub fn sqlite_dir() -> PathBuf {
    std::env::temp_dir().join("tasks-tests-sqlite")
}

/// A path for a new, unique database file (not created yet).
pub fn temp_database_path() -> PathBuf {
    static PRUNE: Once = Once::new();
    let dir = sqlite_dir();
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|error| panic!("cannot create {}: {error}", dir.display()));
    PRUNE.call_once(|| prune(&dir, Duration::from_secs(15 * 60)));
    dir.join(format!("{}.sqlite", Uuid::new_v4()))
}

/// Removes files in `dir` not modified for `age` (best effort).
fn prune(dir: &Path, age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|elapsed| elapsed > age);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Opens and migrates a SQLite store on the database file at `path`, in the default
/// namespace.
pub async fn open(path: &Path) -> SqliteStore {
    let store = SqliteStore::open(path)
        .await
        .unwrap_or_else(|error| panic!("cannot open {}: {error:?}", path.display()));
    store
        .migrate()
        .await
        .unwrap_or_else(|error| panic!("migrating {} failed: {error:?}", path.display()));
    store
}

/// A SQLite store on a fresh database file, migrated, on a fresh namespace: the setup of the
/// conformance suite against SQLite.
pub async fn store() -> SqliteStore {
    open(&temp_database_path())
        .await
        .with_namespace(unique_namespace("test"))
        .unwrap()
}
