//! Choosing the store from one setting: a database URL.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // `DATABASE_URL`, or a SQLite file `tasks.sqlite` in the current directory when unset.
//! let store = tasks_runtime::connect_from_env().await?;
//! // Any namespace, on the same connections.
//! let tenant = store.scoped("tenant-a")?;
//! # Ok(()) }
//! ```

use crate::error::StoreError;
use crate::store::SharedStore;

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
    /// The URL selects a store whose cargo feature this build left out.
    #[error("the {backend} store is not compiled in: enable the `{feature}` feature of tasks")]
    NotCompiled {
        /// `"SQLite"` or `"Postgres"`.
        backend: &'static str,
        /// The feature that compiles it.
        feature: &'static str,
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
    /// The schema could not be brought up to date.
    #[error("cannot migrate the {backend} store")]
    Migration {
        /// `"SQLite"` or `"Postgres"`.
        backend: &'static str,
        /// What failed.
        #[source]
        source: crate::migration::MigrateError,
    },
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
/// [default namespace](crate::DEFAULT_NAMESPACE); [`Store::scoped`](crate::Store::scoped) gives other namespaces.
///
/// * `sqlite://path/to/file.sqlite` (relative to the current directory),
///   `sqlite:///absolute/path.sqlite`: the [SQLite store](crate::sqlite), creating the file
///   if it is missing;
/// * `sqlite::memory:`: a SQLite store on a private in-memory database, gone when the store
///   is dropped (for tests and experiments);
/// * `postgres://…` or `postgresql://…`: the [Postgres store](crate::postgres);
/// * anything else: [`ConnectError::UnsupportedScheme`].
pub async fn connect(url: &str) -> Result<SharedStore, ConnectError> {
    match backend_of(url)? {
        Backend::Sqlite => open_sqlite_with(url, true).await,
        Backend::Postgres => open_postgres_with(url, true).await,
    }
}

/// Opens the store `url` selects, like [`connect`], but applies no migration: for work that
/// only reads and must not change the database, such as a
/// [replay verification](crate::verify) run by a new binary before it is deployed (whose
/// migrations are not yet meant for the database). A schema behind this version's fails
/// the first statement that needs what is missing, with a [`StoreError`].
pub async fn connect_unmigrated(url: &str) -> Result<SharedStore, ConnectError> {
    match backend_of(url)? {
        Backend::Sqlite => open_sqlite_with(url, false).await,
        Backend::Postgres => open_postgres_with(url, false).await,
    }
}

#[cfg(feature = "sqlite")]
async fn open_sqlite_with(url: &str, migrated: bool) -> Result<SharedStore, ConnectError> {
    use crate::sqlite::SqliteStore;
    let connect = SqliteStore::connect(url);
    open("SQLite", connect, async |store: &SqliteStore| {
        if migrated {
            store.migrate().await
        } else {
            Ok(())
        }
    })
    .await
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite_with(_url: &str, _migrated: bool) -> Result<SharedStore, ConnectError> {
    Err(ConnectError::NotCompiled {
        backend: "SQLite",
        feature: "sqlite",
    })
}

#[cfg(feature = "postgres")]
async fn open_postgres_with(url: &str, migrated: bool) -> Result<SharedStore, ConnectError> {
    use crate::postgres::PgStore;
    let connect = PgStore::connect(url);
    open("Postgres", connect, async |store: &PgStore| {
        if migrated {
            store.migrate().await
        } else {
            Ok(())
        }
    })
    .await
}

/// A connected and migrated store of `backend`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
async fn open<S: crate::Store>(
    backend: &'static str,
    connect: impl std::future::Future<Output = crate::StoreResult<S>>,
    migrate: impl AsyncFnOnce(&S) -> Result<(), crate::migration::MigrateError>,
) -> Result<SharedStore, ConnectError> {
    let store = connect
        .await
        .map_err(|source| ConnectError::Connect { backend, source })?;
    migrate(&store)
        .await
        .map_err(|source| ConnectError::Migration { backend, source })?;
    Ok(store.into())
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres_with(_url: &str, _migrated: bool) -> Result<SharedStore, ConnectError> {
    Err(ConnectError::NotCompiled {
        backend: "Postgres",
        feature: "postgres",
    })
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
pub async fn connect_from_env() -> Result<SharedStore, ConnectError> {
    connect(&database_url_from_env()).await
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

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn in_memory_sqlite_works_through_connect() {
        use crate::store::CreateRun;
        use std::time::Duration;

        let store = connect("sqlite::memory:").await.unwrap();
        let run = store
            .contract()
            .create_run(CreateRun::new("wf"))
            .await
            .unwrap();
        let claimed = store
            .contract()
            .claim_runs("w", Duration::from_secs(60), 1)
            .await
            .unwrap();
        assert_eq!(claimed[0].run.id, run.id);
        assert!(claimed[0].first_execution);
        // A second in-memory store is another database.
        let other = connect("sqlite::memory:").await.unwrap();
        assert_eq!(other.contract().get_run(run.id).await.unwrap(), None);
        let scoped = store.scoped("elsewhere").unwrap();
        assert_eq!(scoped.contract().get_run(run.id).await.unwrap(), None);
    }
}
