//! The schema migrations of the SQL stores, one folder of SQL files per dialect
//! (`migrations/postgres/`, `migrations/sqlite/`), embedded in the binary and handed to each
//! store, which applies them in order and records each one's checksum.
//!
//! A migration's statements are never edited once released: its checksum is compared on
//! every start, and a changed file fails the migration with
//! [`tasks_core::MigrateError::Changed`]. A schema change is a new file with the next
//! version, added to its dialect's list here. When only a file's comments are reworded,
//! the checksum its earlier text had goes into the migration's `earlier_checksums`, so that
//! databases migrated before still start.
#![warn(missing_docs)]

use tasks_core::Migration;

/// The Postgres store's migrations, in order.
pub const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../postgres/0001_initial.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../postgres/0002_parent_step_index.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 3,
        name: "claim indexes",
        sql: include_str!("../postgres/0003_claim_indexes.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 4,
        name: "workers",
        sql: include_str!("../postgres/0004_workers.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 5,
        name: "events",
        sql: include_str!("../postgres/0005_events.sql"),
        earlier_checksums: &["7880754989edfd0c"],
    },
    Migration {
        version: 6,
        name: "run retries and forks",
        sql: include_str!("../postgres/0006_run_retries.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 7,
        name: "flow control",
        sql: include_str!("../postgres/0007_flow_control.sql"),
        earlier_checksums: &["5f46bd7c1aabddd6"],
    },
    Migration {
        version: 8,
        name: "schedules",
        sql: include_str!("../postgres/0008_schedules.sql"),
        earlier_checksums: &["dd39006b783d30ee"],
    },
    Migration {
        version: 9,
        name: "retention",
        sql: include_str!("../postgres/0009_retention.sql"),
        earlier_checksums: &["bca350a8c9a27233"],
    },
    Migration {
        version: 10,
        name: "child workflows",
        sql: include_str!("../postgres/0010_child_workflows.sql"),
        earlier_checksums: &["f143319a3dcff0a7"],
    },
    Migration {
        version: 11,
        name: "published state",
        sql: include_str!("../postgres/0011_published_state.sql"),
        earlier_checksums: &["f5454cae6db4671d"],
    },
    Migration {
        version: 12,
        name: "step arguments",
        sql: include_str!("../postgres/0012_step_args.sql"),
        earlier_checksums: &["31221cb7a4cc2c5f"],
    },
    Migration {
        version: 13,
        name: "trace context",
        sql: include_str!("../postgres/0013_trace_context.sql"),
        earlier_checksums: &["85bf5b5666575b80"],
    },
    Migration {
        version: 14,
        name: "idempotency scopes",
        sql: include_str!("../postgres/0014_idempotency_scopes.sql"),
        earlier_checksums: &["b25a15d40ef44df8"],
    },
    Migration {
        version: 15,
        name: "queues",
        sql: include_str!("../postgres/0015_queues.sql"),
        earlier_checksums: &["62b0e9f9016bd355"],
    },
    Migration {
        version: 16,
        name: "queue key concurrency",
        sql: include_str!("../postgres/0016_queue_key_concurrency.sql"),
        earlier_checksums: &["29fa3ede3de8b016"],
    },
    Migration {
        version: 17,
        name: "queue running index",
        sql: include_str!("../postgres/0017_queue_running_index.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 18,
        name: "running worker index",
        sql: include_str!("../postgres/0018_running_worker_index.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 19,
        name: "claim epoch",
        sql: include_str!("../postgres/0019_claim_epoch.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 20,
        name: "idempotency search",
        sql: include_str!("../postgres/0020_idempotency_search.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 21,
        name: "continue as new",
        sql: include_str!("../postgres/0021_continue_as_new.sql"),
        earlier_checksums: &[],
    },
];

/// The SQLite store's migrations, in order.
pub const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../sqlite/0001_initial.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 2,
        name: "parent step index",
        sql: include_str!("../sqlite/0002_parent_step_index.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 3,
        name: "workers",
        sql: include_str!("../sqlite/0003_workers.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 4,
        name: "events",
        sql: include_str!("../sqlite/0004_events.sql"),
        earlier_checksums: &["f493bfcfc4cbcd44"],
    },
    Migration {
        version: 5,
        name: "run retries and forks",
        sql: include_str!("../sqlite/0005_run_retries.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 6,
        name: "flow control",
        sql: include_str!("../sqlite/0006_flow_control.sql"),
        earlier_checksums: &["d91fc34200014f54"],
    },
    Migration {
        version: 7,
        name: "schedules",
        sql: include_str!("../sqlite/0007_schedules.sql"),
        earlier_checksums: &["baea07973268ab52"],
    },
    Migration {
        version: 8,
        name: "retention",
        sql: include_str!("../sqlite/0008_retention.sql"),
        earlier_checksums: &["1c644c7bb7eadb4c"],
    },
    Migration {
        version: 9,
        name: "child workflows",
        sql: include_str!("../sqlite/0009_child_workflows.sql"),
        earlier_checksums: &["5a858b7939bf3142"],
    },
    Migration {
        version: 10,
        name: "published state",
        sql: include_str!("../sqlite/0010_published_state.sql"),
        earlier_checksums: &["1ca65a7aa9e40014"],
    },
    Migration {
        version: 11,
        name: "step arguments",
        sql: include_str!("../sqlite/0011_step_args.sql"),
        earlier_checksums: &["e7f62892c422698d"],
    },
    Migration {
        version: 12,
        name: "trace context",
        sql: include_str!("../sqlite/0012_trace_context.sql"),
        earlier_checksums: &["3493e50fcac1b9e7"],
    },
    Migration {
        version: 13,
        name: "idempotency scopes",
        sql: include_str!("../sqlite/0013_idempotency_scopes.sql"),
        earlier_checksums: &["6edbd0c477bfde62"],
    },
    Migration {
        version: 14,
        name: "queues",
        sql: include_str!("../sqlite/0014_queues.sql"),
        earlier_checksums: &["3ba83a9403ce66c7"],
    },
    Migration {
        version: 15,
        name: "queue key concurrency",
        sql: include_str!("../sqlite/0015_queue_key_concurrency.sql"),
        earlier_checksums: &["f64c912cbde9b308"],
    },
    Migration {
        version: 16,
        name: "claim epoch",
        sql: include_str!("../sqlite/0016_claim_epoch.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 17,
        name: "idempotency search",
        sql: include_str!("../sqlite/0017_idempotency_search.sql"),
        earlier_checksums: &[],
    },
    Migration {
        version: 18,
        name: "continue as new",
        sql: include_str!("../sqlite/0018_continue_as_new.sql"),
        earlier_checksums: &[],
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

    /// Comments describe the schema; the history of how it came to be belongs in the
    /// CHANGELOG and in commits.
    #[test]
    fn no_migration_names_an_issue() {
        for migration in POSTGRES.iter().chain(SQLITE) {
            assert!(
                !migration.sql.contains("issue #"),
                "{} names an issue",
                migration.name
            );
        }
    }
}
