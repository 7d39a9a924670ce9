//! Errors raised by stores.

use uuid::Uuid;

use crate::model::RunStatus;

/// An operation on a run or step that a store refused or could not carry out.
///
/// Match on the variant to tell a missing run from one in the wrong state, or a worker that
/// lost its lease from a database failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run with this id exists in the store's namespace.
    #[error("workflow run {id} does not exist")]
    RunNotFound {
        /// The id that was looked up.
        id: Uuid,
    },
    /// No step attempt with this id exists for the run in the store's namespace.
    #[error("step attempt {id} does not exist")]
    StepNotFound {
        /// The id that was looked up.
        id: Uuid,
    },
    /// The run exists but its status forbids the operation.
    #[error("cannot {operation} workflow run {id} with status {status}")]
    WrongState {
        /// The run.
        id: Uuid,
        /// What was attempted, e.g. "cancel".
        operation: &'static str,
        /// The status the run is in.
        status: RunStatus,
    },
    /// The run is running, but under another worker's lease (or its lease was taken over).
    #[error("worker {worker_id} no longer holds the lease on workflow run {id}")]
    LeaseLost {
        /// The run.
        id: Uuid,
        /// The worker that thought it held the lease.
        worker_id: String,
    },
    /// The step attempt exists but is no longer running, so it cannot be finished again.
    #[error("step attempt {id} is already {status}")]
    StepAlreadyFinished {
        /// The attempt.
        id: Uuid,
        /// Its status.
        status: crate::model::StepStatus,
    },
    /// A pagination cursor that this store did not produce.
    #[error("invalid cursor: {reason}")]
    InvalidCursor {
        /// What is wrong with it.
        reason: String,
    },
    /// An argument the store cannot accept (for example a negative limit).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The database failed while carrying out `operation`.
    #[error("database error while {operation}")]
    Database {
        /// What the store was doing, e.g. "claiming workflow runs".
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: Box<sqlx::Error>,
    },
    /// A row in the database could not be decoded (a status unknown to this version, ...).
    #[error("corrupt row while {operation}: {reason}")]
    Corrupt {
        /// What the store was doing.
        operation: &'static str,
        /// What could not be decoded.
        reason: String,
    },
}

impl StoreError {
    /// `true` when the error says the run or step does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            StoreError::RunNotFound { .. } | StoreError::StepNotFound { .. }
        )
    }
}

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Builds a closure that wraps an `sqlx::Error` with the operation that failed.
pub(crate) fn db(operation: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database {
        operation,
        source: Box::new(source),
    }
}
