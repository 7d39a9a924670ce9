//! Choosing the store from one setting: a database URL.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // `DATABASE_URL`, or a SQLite file `tasks.sqlite` in the current directory when unset.
//! let store = tasks_runtime::connect_from_env().await?;
//! // Any namespace, on the same connections.
//! let tenant = store.scoped("tenant-a");
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::model::{StepAttempt, WorkflowRun};
use crate::postgres::PgStore;
use crate::sqlite::SqliteStore;
use crate::store::{
    CreateRun, CreateStepAttempt, FailRun, ListRuns, ListStepAttempts, Notification,
    NotificationStream, Page, RecordStepAttempt, StepUpdate, Store,
};

/// The environment variable [`connect_from_env`] reads.
pub const DATABASE_URL_VAR: &str = "DATABASE_URL";

/// The database [`connect_from_env`] uses when `DATABASE_URL` is not set: the SQLite file
/// `tasks.sqlite` in the current directory, created on first use.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://tasks.sqlite";

/// Why [`connect`] could not open a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL selects no store this library has.
    #[error(
        "unsupported database URL scheme {scheme:?}: use sqlite://path/to/file.sqlite, \
         sqlite::memory: or postgres://user@host/database"
    )]
    UnsupportedScheme {
        /// The part of the URL before the first `:` (never the rest, which may hold a
        /// password).
        scheme: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot open the {backend} store")]
    Connect {
        /// `"SQLite"` or `"Postgres"`.
        backend: &'static str,
        /// What failed.
        #[source]
        source: StoreError,
    },
    /// The Postgres schema could not be brought up to date.
    #[error("cannot migrate the Postgres store")]
    PostgresMigration(#[source] crate::postgres::MigrateError),
    /// The SQLite tables could not be brought up to date.
    #[error("cannot migrate the SQLite store")]
    SqliteMigration(#[source] crate::sqlite::MigrateError),
}

/// The backend a database URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

fn backend_of(url: &str) -> Result<Backend, ConnectError> {
    let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => Ok(Backend::Sqlite),
        "postgres" | "postgresql" => Ok(Backend::Postgres),
        _ => Err(ConnectError::UnsupportedScheme {
            scheme: scheme.to_owned(),
        }),
    }
}

/// Opens the store `url` selects, migrated and in the
/// [default namespace](crate::DEFAULT_NAMESPACE); [`Store::scoped`] gives other namespaces.
///
/// * `sqlite://path/to/file.sqlite` (relative to the current directory),
///   `sqlite:///absolute/path.sqlite`: the [SQLite store](crate::sqlite), creating the file
///   if it is missing;
/// * `sqlite::memory:`: a SQLite store on a private in-memory database, gone when the store
///   is dropped (for tests and experiments);
/// * `postgres://…` or `postgresql://…`: the [Postgres store](crate::postgres);
/// * anything else: [`ConnectError::UnsupportedScheme`].
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, ConnectError> {
    match backend_of(url)? {
        Backend::Sqlite => {
            let store =
                SqliteStore::connect(url)
                    .await
                    .map_err(|source| ConnectError::Connect {
                        backend: "SQLite",
                        source,
                    })?;
            store
                .migrate()
                .await
                .map_err(ConnectError::SqliteMigration)?;
            Ok(Arc::new(store))
        }
        Backend::Postgres => {
            let store = PgStore::connect(url)
                .await
                .map_err(|source| ConnectError::Connect {
                    backend: "Postgres",
                    source,
                })?;
            store
                .migrate()
                .await
                .map_err(ConnectError::PostgresMigration)?;
            Ok(Arc::new(store))
        }
    }
}

/// The URL [`connect_from_env`] opens: `DATABASE_URL` when it is set and not empty,
/// otherwise [`DEFAULT_DATABASE_URL`].
pub fn database_url_from_env() -> String {
    url_or_default(std::env::var(DATABASE_URL_VAR).ok())
}

fn url_or_default(value: Option<String>) -> String {
    value
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned())
}

/// [`connect`]s to `DATABASE_URL`, or, when it is unset, to the SQLite file `tasks.sqlite`
/// in the current directory ([`DEFAULT_DATABASE_URL`]), so that a program runs without any
/// database server.
pub async fn connect_from_env() -> Result<Arc<dyn Store>, ConnectError> {
    connect(&database_url_from_env()).await
}

/// A shared store is a store, so that what [`connect`] returns can be handed to anything that
/// takes `impl Store` (a worker, a client).
#[async_trait]
impl Store for Arc<dyn Store> {
    fn namespace(&self) -> &str {
        (**self).namespace()
    }

    fn scoped(&self, namespace: &str) -> Arc<dyn Store> {
        (**self).scoped(namespace)
    }

    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        (**self).create_run(params).await
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        (**self).get_run(run_id).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        (**self).list_runs(params).await
    }

    async fn claim_runs(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowRun>> {
        (**self).claim_runs(worker_id, lease, limit).await
    }

    async fn claim_run(
        &self,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<Option<WorkflowRun>> {
        (**self).claim_run(worker_id, lease).await
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        (**self).extend_lease(run_id, worker_id, lease).await
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        (**self).sleep_run(run_id, worker_id, until).await
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        (**self).complete_run(run_id, worker_id, output).await
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        (**self)
            .complete_run_with_steps(run_id, worker_id, output, steps)
            .await
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        (**self).fail_run(params).await
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        (**self).release_run(run_id, worker_id, delay, reason).await
    }

    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        (**self).cancel_run(run_id).await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        (**self).pause_run(run_id).await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        (**self).resume_run(run_id).await
    }

    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        (**self).create_step_attempt(params).await
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        (**self).get_step_attempt(step_attempt_id).await
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        (**self).list_step_attempts(params).await
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        (**self).step_history(run_id).await
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        (**self)
            .complete_step_attempt(run_id, step_attempt_id, worker_id, output)
            .await
    }

    async fn fail_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        error: Value,
    ) -> StoreResult<StepUpdate> {
        (**self)
            .fail_step_attempt(run_id, step_attempt_id, worker_id, error)
            .await
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        (**self).record_step_attempt(params).await
    }

    async fn publish(&self, notification: Notification) -> StoreResult<()> {
        (**self).publish(notification).await
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        (**self).subscribe().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_select_backends() {
        assert_eq!(
            backend_of("sqlite://tasks.sqlite").unwrap(),
            Backend::Sqlite
        );
        assert_eq!(backend_of("sqlite:///tmp/x.db").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("sqlite::memory:").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("SQLite://a.db").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("postgres://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(
            backend_of("postgresql://u@h/db").unwrap(),
            Backend::Postgres
        );
        for url in ["mysql://u:secret@h/db", "tasks.sqlite", "", "http://x"] {
            match backend_of(url) {
                Err(ConnectError::UnsupportedScheme { scheme }) => {
                    assert!(!scheme.contains("secret"));
                }
                other => panic!("{url:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn unset_or_empty_url_means_the_default_sqlite_file() {
        assert_eq!(url_or_default(None), DEFAULT_DATABASE_URL);
        assert_eq!(url_or_default(Some("  ".into())), DEFAULT_DATABASE_URL);
        assert_eq!(
            url_or_default(Some("postgres://u@h/db".into())),
            "postgres://u@h/db"
        );
    }

    #[tokio::test]
    async fn in_memory_sqlite_works_through_connect() {
        let store = connect("sqlite::memory:").await.unwrap();
        let run = store.create_run(CreateRun::new("wf")).await.unwrap();
        let claimed = store
            .claim_run("w", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claimed.id, run.id);
        // A second in-memory store is another database.
        let other = connect("sqlite::memory:").await.unwrap();
        assert_eq!(other.get_run(run.id).await.unwrap(), None);
        // The shared store is a store too.
        let scoped = store.scoped("elsewhere");
        assert_eq!(scoped.get_run(run.id).await.unwrap(), None);
    }
}
