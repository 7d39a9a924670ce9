//! Schema migrations of the SQLite store, tracked in `tasks_schema_migrations`.
//!
//! Like the Postgres migrations, these do not use `sqlx::migrate!`, whose bookkeeping table
//! would collide with an application's own `_sqlx_migrations` in the same file.

use sqlx::Executor as _;
use sqlx::{Row, SqlitePool};
pub use tasks_core::migration::{MigrateError, Migration};
use tasks_core::migration::{database, pending};

/// Every migration of this store, in order: the SQL files of `migrations/sqlite/`.
pub const MIGRATIONS: &[Migration] = tasks_migrations::SQLITE;

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

    for (migration, expected) in pending(MIGRATIONS, &applied)? {
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
    fn versions_increase() {
        assert!(MIGRATIONS.windows(2).all(|w| w[0].version < w[1].version));
    }
}
