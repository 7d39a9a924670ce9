//! Schema migrations, tracked in `tasks.schema_migrations`.
//!
//! We do not use `sqlx::migrate!`: its bookkeeping table lives in the application's search
//! path and would collide with the application's own `_sqlx_migrations`.

pub use crate::migration::{MigrateError, Migration};
use crate::migration::{database, pending};
use sqlx::{Executor as _, PgPool, Row};

/// Every migration this version of the runtime knows, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../../migrations/postgres/0002_parent_step_index.sql"),
    },
    Migration {
        version: 3,
        name: "claim indexes",
        sql: include_str!("../../migrations/postgres/0003_claim_indexes.sql"),
    },
    Migration {
        version: 4,
        name: "workers",
        sql: include_str!("../../migrations/postgres/0004_workers.sql"),
    },
    Migration {
        version: 5,
        name: "events",
        sql: include_str!("../../migrations/postgres/0005_events.sql"),
    },
    Migration {
        version: 6,
        name: "run retries and forks",
        sql: include_str!("../../migrations/postgres/0006_run_retries.sql"),
    },
    Migration {
        version: 7,
        name: "flow control",
        sql: include_str!("../../migrations/postgres/0007_flow_control.sql"),
    },
    Migration {
        version: 8,
        name: "schedules",
        sql: include_str!("../../migrations/postgres/0008_schedules.sql"),
    },
    Migration {
        version: 9,
        name: "retention",
        sql: include_str!("../../migrations/postgres/0009_retention.sql"),
    },
    Migration {
        version: 10,
        name: "child workflows",
        sql: include_str!("../../migrations/postgres/0010_child_workflows.sql"),
    },
    Migration {
        version: 11,
        name: "published state",
        sql: include_str!("../../migrations/postgres/0011_published_state.sql"),
    },
    Migration {
        version: 12,
        name: "step arguments",
        sql: include_str!("../../migrations/postgres/0012_step_args.sql"),
    },
    Migration {
        version: 13,
        name: "trace context",
        sql: include_str!("../../migrations/postgres/0013_trace_context.sql"),
    },
    Migration {
        version: 14,
        name: "idempotency scopes",
        sql: include_str!("../../migrations/postgres/0014_idempotency_scopes.sql"),
    },
    Migration {
        version: 15,
        name: "queues",
        sql: include_str!("../../migrations/postgres/0015_queues.sql"),
    },
    Migration {
        version: 16,
        name: "queue key concurrency",
        sql: include_str!("../../migrations/postgres/0016_queue_key_concurrency.sql"),
    },
    Migration {
        version: 17,
        name: "queue running index",
        sql: include_str!("../../migrations/postgres/0017_queue_running_index.sql"),
    },
    Migration {
        version: 18,
        name: "running worker index",
        sql: include_str!("../../migrations/postgres/0018_running_worker_index.sql"),
    },
];

/// The Postgres schema that holds every table of ours.
pub const SCHEMA: &str = "tasks";

/// Key of the advisory lock that serializes concurrent migrators ("tasks" + "mig").
const MIGRATION_LOCK: i64 = 0x7461_736b_735f_6d69;

/// Brings the `tasks` schema up to date. Safe to call from many processes at once and any
/// number of times: an advisory lock serializes migrators, and applied migrations are
/// skipped. Touches nothing outside the `tasks` schema.
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    let mut tx = pool
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
