//! What the Postgres and SQLite migrators share: embedded migrations, their checksums and
//! errors.

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Monotonic version number.
    pub version: i64,
    /// Short description.
    pub name: &'static str,
    /// The SQL, run in one transaction.
    pub sql: &'static str,
}

/// Why migrating a store's schema failed.
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

pub(crate) fn database(operation: impl Into<String>) -> impl FnOnce(sqlx::Error) -> MigrateError {
    let operation = operation.into();
    move |source| MigrateError::Database { operation, source }
}

/// A stable checksum of a migration's SQL (FNV-1a, 64 bit), as hex.
pub(crate) fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn checksums_are_stable_and_distinct() {
        assert_eq!(checksum("a"), checksum("a"));
        assert_ne!(checksum("a"), checksum("b"));
        assert_eq!(checksum(""), "cbf29ce484222325");
    }
}
