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
    /// Checksums that databases migrated by earlier builds may have recorded for this
    /// migration, when its file had other comments around the same statements. A recorded
    /// checksum among them is accepted as [`checksum`] of `sql` is; anything else is
    /// [`MigrateError::Changed`]. Empty for a migration whose text never changed.
    pub earlier_checksums: &'static [&'static str],
}

impl Migration {
    /// Whether `recorded`, the checksum a database recorded when it applied this
    /// migration, is one of this migration's: that of its SQL, or an earlier one.
    pub fn accepts(&self, recorded: &str) -> bool {
        recorded == checksum(self.sql) || self.earlier_checksums.contains(&recorded)
    }
}

/// Why migrating a store's schema failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The database failed while `operation`.
    #[error("database error while {operation}: {source}")]
    Database {
        /// What was being done.
        operation: String,
        /// The driver's error.
        #[source]
        source: crate::error::BoxError,
    },
    /// A migration that was applied earlier has different SQL now.
    #[error(
        "migration {version} ({name}) was applied with different SQL (checksum {applied}, expected {expected})"
    )]
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

/// Builds a closure that wraps a driver error met while `operation`, for `map_err`.
pub fn database<E: Into<crate::error::BoxError>>(
    operation: impl Into<String>,
) -> impl FnOnce(E) -> MigrateError {
    let operation = operation.into();
    move |source| MigrateError::Database {
        operation,
        source: source.into(),
    }
}

/// A stable checksum of a migration's SQL (FNV-1a, 64 bit), as hex.
pub fn checksum(sql: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in sql.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The migrations of `migrations` still to apply, with their checksums, given the
/// `(version, checksum)` pairs already recorded. Fails when the database is newer than
/// `migrations` or when an applied migration's SQL changed since.
pub fn pending(
    migrations: &'static [Migration],
    applied: &[(i64, String)],
) -> Result<Vec<(&'static Migration, String)>, MigrateError> {
    let known = migrations.last().map_or(0, |m| m.version);
    if let Some(&(newest, _)) = applied.last()
        && newest > known
    {
        return Err(MigrateError::TooNew {
            applied: newest,
            known,
        });
    }
    let mut todo = Vec::new();
    for migration in migrations {
        let expected = checksum(migration.sql);
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, recorded)) if !migration.accepts(recorded) => {
                return Err(MigrateError::Changed {
                    version: migration.version,
                    name: migration.name,
                    applied: recorded.clone(),
                    expected,
                });
            }
            Some(_) => {}
            None => todo.push((migration, expected)),
        }
    }
    Ok(todo)
}

#[cfg(test)]
mod tests {
    use super::{MigrateError, Migration, checksum, pending};

    const MIGRATIONS: &[Migration] = &[
        Migration {
            version: 1,
            name: "one",
            sql: "SELECT 1",
            earlier_checksums: &[],
        },
        Migration {
            version: 2,
            name: "two",
            sql: "-- two\nSELECT 2",
            earlier_checksums: &["0123456789abcdef"],
        },
    ];

    #[test]
    fn pending_skips_applied_and_rejects_drift() {
        let todo = pending(MIGRATIONS, &[(1, checksum("SELECT 1"))]).unwrap();
        assert_eq!(todo.len(), 1);
        assert_eq!(todo[0].0.version, 2);
        assert!(matches!(
            pending(MIGRATIONS, &[(1, "bogus".into())]),
            Err(MigrateError::Changed { version: 1, .. })
        ));
        assert!(matches!(
            pending(MIGRATIONS, &[(3, "x".into())]),
            Err(MigrateError::TooNew {
                applied: 3,
                known: 2
            })
        ));
    }

    #[test]
    fn an_earlier_checksum_is_accepted_and_no_other() {
        let both = [(1, checksum("SELECT 1")), (2, "0123456789abcdef".into())];
        assert!(pending(MIGRATIONS, &both).unwrap().is_empty());
        let current = [(1, checksum("SELECT 1")), (2, checksum("-- two\nSELECT 2"))];
        assert!(pending(MIGRATIONS, &current).unwrap().is_empty());
        // Another migration's earlier checksum is not this one's.
        assert!(matches!(
            pending(MIGRATIONS, &[(1, "0123456789abcdef".into())]),
            Err(MigrateError::Changed { version: 1, .. })
        ));
    }

    #[test]
    fn checksums_are_stable_and_distinct() {
        assert_eq!(checksum("a"), checksum("a"));
        assert_ne!(checksum("a"), checksum("b"));
        assert_eq!(checksum(""), "cbf29ce484222325");
    }
}
