//! Schema migrations, tracked in `tasks.schema_migrations`.
//!
//! We do not use `sqlx::migrate!`: its bookkeeping table lives in the application's search
//! path and would collide with the application's own `_sqlx_migrations`.

use crate::db::Db;
use sqlx::Executor as _;
use sqlx::{PgPool, Row};
pub use tasks_core::migration::{MigrateError, Migration};
use tasks_core::migration::{database, pending};

/// Every migration of this store, in order: the SQL files of `migrations/postgres/`.
pub const MIGRATIONS: &[Migration] = tasks_migrations::POSTGRES;

/// The Postgres schema that holds every table of ours.
pub const SCHEMA: &str = "tasks";

/// Key of the advisory lock that serializes concurrent migrators ("tasks" + "mig").
const MIGRATION_LOCK: i64 = 0x7461_736b_735f_6d69;

/// Brings the `tasks` schema up to date. Safe to call from many processes at once and any
/// number of times: an advisory lock serializes migrators, and applied migrations are
/// skipped. Touches nothing outside the `tasks` schema.
///
/// `pool` is taken as a pool of sessions ([`Pooling::Session`](crate::Pooling::Session));
/// through a pooler in transaction mode, migrate with
/// [`PgStore::migrate`](crate::PgStore::migrate), which follows the store's pooling.
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    migrate_on(&Db::new(pool.clone(), crate::Pooling::Session)).await
}

/// [`migrate`] on the store's database handle: all migrations run in one transaction, under a
/// transaction-level advisory lock, so that a pooler in transaction mode keeps them on one
/// server connection.
pub(crate) async fn migrate_on(db: &Db) -> Result<(), MigrateError> {
    let mut tx = db
        .begin()
        .await
        .map_err(database("starting the migration transaction"))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(database("taking the migration lock"))?;
    // `tx.execute(raw_sql(..))`, not `raw_sql(..).execute(&mut *tx)`: the latter makes the
    // future of `migrate` not `Send` (a higher-ranked lifetime limitation), so it could not be
    // spawned.
    const BOOKKEEPING: &str = "CREATE SCHEMA IF NOT EXISTS tasks;
         CREATE TABLE IF NOT EXISTS tasks.schema_migrations (
             version     BIGINT      PRIMARY KEY,
             name        TEXT        NOT NULL,
             checksum    TEXT        NOT NULL,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
         );";
    (&mut *tx)
        .execute(sqlx::raw_sql(BOOKKEEPING))
        .await
        .map_err(database("creating the migrations table"))?;

    let applied =
        sqlx::query("SELECT version, checksum FROM tasks.schema_migrations ORDER BY version")
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
            "INSERT INTO tasks.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        )
        .bind(migration.version)
        .bind(migration.name)
        .bind(&expected)
        .execute(&mut *tx)
        .await
        .map_err(database("recording a migration"))?;
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "applied migration"
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
