//! Decoding stored statuses, shared by every store.

use crate::error::{Operation, StoreError, StoreResult};
use crate::model::{RunStatus, StepStatus};

#[cfg(doc)]
use super::Store;

/// The reason of a [`StoreError::CorruptRun`] for a step attempt row of the run that does
/// not decode: it names the row (`id`, any display) and its step, then says why.
pub fn corrupt_step_reason(id: impl std::fmt::Display, step_name: &str, reason: &str) -> String {
    format!("its step attempt {id} (step {step_name:?}) does not decode: {reason}")
}

/// Decodes a stored run status; an unknown one is a [`StoreError::Corrupt`] row.
pub fn status_of(status: &str, operation: Operation) -> StoreResult<RunStatus> {
    status
        .parse()
        .map_err(|e: crate::model::UnknownStatus| StoreError::Corrupt {
            operation,
            reason: e.to_string(),
        })
}

/// Decodes a stored step status; an unknown one is a [`StoreError::Corrupt`] row.
pub fn step_status_of(status: &str, operation: Operation) -> StoreResult<StepStatus> {
    status
        .parse()
        .map_err(|e: crate::model::UnknownStatus| StoreError::Corrupt {
            operation,
            reason: e.to_string(),
        })
}
