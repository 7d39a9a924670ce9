//! Schema migrations of the SQLite store, tracked in `tasks_schema_migrations`.
//!
//! Like the Postgres migrations, these do not use `sqlx::migrate!`, whose bookkeeping table
//! would collide with an application's own `_sqlx_migrations` in the same file.

pub use crate::migration::{MigrateError, Migration};
use crate::migration::{database, pending};
use sqlx::{Executor as _, Row, SqlitePool};

/// Every SQLite migration this version of the runtime knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../../migrations/sqlite/0002_parent_step_index.sql"),
    },
    Migration {
        version: 3,
        name: "workers",
        sql: include_str!("../../migrations/sqlite/0003_workers.sql"),
    },
    Migration {
        version: 4,
        name: "events",
        sql: include_str!("../../migrations/sqlite/0004_events.sql"),
    },
    Migration {
        version: 5,
        name: "run retries and forks",
        sql: include_str!("../../migrations/sqlite/0005_run_retries.sql"),
    },
    Migration {
        version: 6,
        name: "flow control",
        sql: include_str!("../../migrations/sqlite/0006_flow_control.sql"),
    },
    Migration {
        version: 7,
        name: "schedules",
        sql: include_str!("../../migrations/sqlite/0007_schedules.sql"),
    },
    Migration {
        version: 8,
        name: "retention",
        sql: include_str!("../../migrations/sqlite/0008_retention.sql"),
    },
    Migration {
        version: 9,
        name: "child workflows",
        sql: include_str!("../../migrations/sqlite/0009_child_workflows.sql"),
    },
    Migration {
        version: 10,
        name: "published state",
        sql: include_str!("../../migrations/sqlite/0010_published_state.sql"),
    },
    Migration {
        version: 11,
        name: "step arguments",
        sql: include_str!("../../migrations/sqlite/0011_step_args.sql"),
    },
    Migration {
        version: 12,
        name: "trace context",
        sql: include_str!("../../migrations/sqlite/0012_trace_context.sql"),
    },
    Migration {
        version: 13,
        name: "idempotency scopes",
        sql: include_str!("../../migrations/sqlite/0013_idempotency_scopes.sql"),
    },
    Migration {
        version: 14,
        name: "queues",
        sql: include_str!("../../migrations/sqlite/0014_queues.sql"),
    },
    Migration {
        version: 15,
        name: "queue key concurrency",
        sql: include_str!("../../migrations/sqlite/0015_queue_key_concurrency.sql"),
    },
];

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
