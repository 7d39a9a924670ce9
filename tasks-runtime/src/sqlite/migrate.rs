//! Schema migrations of the SQLite store, tracked in `tasks_schema_migrations`.
//!
//! Like the Postgres migrations, these do not use `sqlx::migrate!`, whose bookkeeping table
//! would collide with an application's own `_sqlx_migrations` in the same file.

use sqlx::{Executor as _, Row, SqlitePool};

/// One embedded SQLite migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Monotonic version number.
    pub version: i64,
    /// Short description.
    pub name: &'static str,
    /// The SQL, run in one transaction.
    pub sql: &'static str,
}

/// Every SQLite migration this version of the runtime knows, in order.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "initial",
    sql: include_str!("../../../migrations/sqlite/0001_initial.sql"),
}];

/// Why migrating a SQLite database failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The database failed while `operation`.
    #[error("database error while {operation}")]
    Database {
        /// What was being done.
        operation: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration that was applied earlier has different SQL now.
    #[error("migration {version} ({name}) was applied with different SQL (checksum {applied}, expected {expected})")]
    Changed {
        /// The migration's version.
        version: i64,
        /// The migration's name.
        name: &'static str,
        /// The checksum recorded in the database.
        applied: String,
        /// The checksum of the SQL in this binary.
        expected: String,
    },
    /// The database has migrations that this binary does not know: it is older than the
    /// schema.
    #[error("the database schema is at version {applied}, newer than this binary's {known}")]
    TooNew {
        /// Highest version applied.
        applied: i64,
        /// Highest version known.
        known: i64,
    },
}

fn database(operation: impl Into<String>) -> impl FnOnce(sqlx::Error) -> MigrateError {
    let operation = operation.into();
    move |source| MigrateError::Database { operation, source }
}

/// A stable checksum of a migration's SQL (FNV-1a, 64 bit), as hex.
fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Brings the tables of the SQLite store up to date. Safe to call from many processes at once
/// and any number of times: the whole migration runs in one `BEGIN IMMEDIATE` transaction,
/// which holds SQLite's write lock and so serializes migrators, and applied migrations are
/// skipped. Touches no table without the `tasks_` prefix.
pub async fn migrate(pool: &SqlitePool) -> Result<(), MigrateError> {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(database("starting the migration transaction"))?;
    const BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS tasks_schema_migrations (
             version     INTEGER PRIMARY KEY,
             name        TEXT    NOT NULL,
             checksum    TEXT    NOT NULL,
             applied_at  TEXT    NOT NULL
         );";
    // `tx.execute(raw_sql(..))` rather than `raw_sql(..).execute(&mut *tx)`: the latter makes
    // the future not `Send` (a higher-ranked lifetime limitation).
    (&mut *tx)
        .execute(sqlx::raw_sql(BOOKKEEPING))
        .await
        .map_err(database("creating the migrations table"))?;

    let applied =
        sqlx::query("SELECT version, checksum FROM tasks_schema_migrations ORDER BY version")
            .fetch_all(&mut *tx)
            .await
            .map_err(database("reading applied migrations"))?;
    let applied: Vec<(i64, String)> = applied
        .iter()
        .map(|row| (row.get::<i64, _>(0), row.get::<String, _>(1)))
        .collect();

    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    if let Some(&(newest, _)) = applied.last() {
        if newest > known {
            return Err(MigrateError::TooNew {
                applied: newest,
                known,
            });
        }
    }

    for migration in MIGRATIONS {
        let expected = checksum(migration.sql);
        if let Some((_, recorded)) = applied.iter().find(|(v, _)| *v == migration.version) {
            if *recorded != expected {
                return Err(MigrateError::Changed {
                    version: migration.version,
                    name: migration.name,
                    applied: recorded.clone(),
                    expected,
                });
            }
            continue;
        }
        (&mut *tx)
            .execute(sqlx::raw_sql(migration.sql))
            .await
            .map_err(database(format!(
                "applying migration {} ({})",
                migration.version, migration.name
            )))?;
        sqlx::query(
            "INSERT INTO tasks_schema_migrations (version, name, checksum, applied_at)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .bind(migration.version)
        .bind(migration.name)
        .bind(&expected)
        .bind(super::rows::ts_bound(chrono::Utc::now()))
        .execute(&mut *tx)
        .await
        .map_err(database("recording a migration"))?;
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "applied SQLite migration"
        );
    }
    tx.commit()
        .await
        .map_err(database("committing migrations"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_are_stable_and_distinct() {
        assert_eq!(checksum("a"), checksum("a"));
        assert_ne!(checksum("a"), checksum("b"));
        assert_eq!(checksum(""), "cbf29ce484222325");
    }

    #[test]
    fn versions_increase() {
        assert!(MIGRATIONS.windows(2).all(|w| w[0].version < w[1].version));
    }
}
