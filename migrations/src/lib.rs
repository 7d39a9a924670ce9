//! The schema migrations of the SQL stores, one folder of SQL files per dialect
//! (`migrations/postgres/`, `migrations/sqlite/`), embedded in the binary and handed to each
//! store, which applies them in order and records each one's checksum.
//!
//! A migration is never edited once released: its checksum is compared on every start,
//! and a changed file fails the migration with [`tasks_core::MigrateError::Changed`]. A
//! schema change is a new file with the next version, added to its dialect's list here.
#![warn(missing_docs)]

use tasks_core::Migration;

/// The Postgres store's migrations, in order.
pub const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../postgres/0002_parent_step_index.sql"),
    },
    Migration {
        version: 3,
        name: "claim indexes",
        sql: include_str!("../postgres/0003_claim_indexes.sql"),
    },
    Migration {
        version: 4,
        name: "workers",
        sql: include_str!("../postgres/0004_workers.sql"),
    },
    Migration {
        version: 5,
        name: "events",
        sql: include_str!("../postgres/0005_events.sql"),
    },
    Migration {
        version: 6,
        name: "run retries and forks",
        sql: include_str!("../postgres/0006_run_retries.sql"),
    },
    Migration {
        version: 7,
        name: "flow control",
        sql: include_str!("../postgres/0007_flow_control.sql"),
    },
    Migration {
        version: 8,
        name: "schedules",
        sql: include_str!("../postgres/0008_schedules.sql"),
    },
    Migration {
        version: 9,
        name: "retention",
        sql: include_str!("../postgres/0009_retention.sql"),
    },
    Migration {
        version: 10,
        name: "child workflows",
        sql: include_str!("../postgres/0010_child_workflows.sql"),
    },
    Migration {
        version: 11,
        name: "published state",
        sql: include_str!("../postgres/0011_published_state.sql"),
    },
    Migration {
        version: 12,
        name: "step arguments",
        sql: include_str!("../postgres/0012_step_args.sql"),
    },
    Migration {
        version: 13,
        name: "trace context",
        sql: include_str!("../postgres/0013_trace_context.sql"),
    },
    Migration {
        version: 14,
        name: "idempotency scopes",
        sql: include_str!("../postgres/0014_idempotency_scopes.sql"),
    },
    Migration {
        version: 15,
        name: "queues",
        sql: include_str!("../postgres/0015_queues.sql"),
    },
    Migration {
        version: 16,
        name: "queue key concurrency",
        sql: include_str!("../postgres/0016_queue_key_concurrency.sql"),
    },
    Migration {
        version: 17,
        name: "queue running index",
        sql: include_str!("../postgres/0017_queue_running_index.sql"),
    },
    Migration {
        version: 18,
        name: "running worker index",
        sql: include_str!("../postgres/0018_running_worker_index.sql"),
    },
    Migration {
        version: 19,
        name: "idempotency search",
        sql: include_str!("../postgres/0019_idempotency_search.sql"),
    },
];

/// The SQLite store's migrations, in order.
pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../sqlite/0002_parent_step_index.sql"),
    },
    Migration {
        version: 3,
        name: "workers",
        sql: include_str!("../sqlite/0003_workers.sql"),
    },
    Migration {
        version: 4,
        name: "events",
        sql: include_str!("../sqlite/0004_events.sql"),
    },
    Migration {
        version: 5,
        name: "run retries and forks",
        sql: include_str!("../sqlite/0005_run_retries.sql"),
    },
    Migration {
        version: 6,
        name: "flow control",
        sql: include_str!("../sqlite/0006_flow_control.sql"),
    },
    Migration {
        version: 7,
        name: "schedules",
        sql: include_str!("../sqlite/0007_schedules.sql"),
    },
    Migration {
        version: 8,
        name: "retention",
        sql: include_str!("../sqlite/0008_retention.sql"),
    },
    Migration {
        version: 9,
        name: "child workflows",
        sql: include_str!("../sqlite/0009_child_workflows.sql"),
    },
    Migration {
        version: 10,
        name: "published state",
        sql: include_str!("../sqlite/0010_published_state.sql"),
    },
    Migration {
        version: 11,
        name: "step arguments",
        sql: include_str!("../sqlite/0011_step_args.sql"),
    },
    Migration {
        version: 12,
        name: "trace context",
        sql: include_str!("../sqlite/0012_trace_context.sql"),
    },
    Migration {
        version: 13,
        name: "idempotency scopes",
        sql: include_str!("../sqlite/0013_idempotency_scopes.sql"),
    },
    Migration {
        version: 14,
        name: "queues",
        sql: include_str!("../sqlite/0014_queues.sql"),
    },
    Migration {
        version: 15,
        name: "queue key concurrency",
        sql: include_str!("../sqlite/0015_queue_key_concurrency.sql"),
    },
    Migration {
        version: 16,
        name: "idempotency search",
        sql: include_str!("../sqlite/0016_idempotency_search.sql"),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_by_one_from_one() {
        for migrations in [POSTGRES, SQLITE] {
            for (index, migration) in migrations.iter().enumerate() {
                assert_eq!(migration.version, index as i64 + 1, "{}", migration.name);
                assert!(!migration.sql.trim().is_empty(), "{}", migration.name);
            }
        }
    }
}
