//! Decoding stored statuses, shared by every store.

use crate::error::{Operation, StoreError, StoreResult};
use uuid::Uuid;

use crate::model::{RunStatus, StepStatus};

#[cfg(doc)]
use super::Store;

/// The columns of a step attempt row, named alike in every SQL store.
const STEP_COLUMNS: [&str; 17] = [
    "namespace",
    "id",
    "workflow_run_id",
    "step_name",
    "kind",
    "status",
    "config",
    "context",
    "output",
    "error",
    "child_workflow_run_namespace",
    "child_workflow_run_id",
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
    "args",
];

/// The name of the step attempt column `name` (as a driver reports it, quotes trimmed), or
/// `"?"` for a name that is not one of them.
pub fn step_column(name: &str) -> &'static str {
    let name = name.trim_matches('"');
    STEP_COLUMNS
        .into_iter()
        .find(|column| *column == name)
        .unwrap_or("?")
}

/// A step attempt row that does not decode: what identifies it, as far as that reads, and
/// the first column that does not. A store builds one while reading the row and turns it
/// into the error of the read with [`UndecodableStepRow::into_error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndecodableStepRow {
    /// The run the attempt belongs to, when its column reads.
    pub run_id: Option<Uuid>,
    /// The attempt's id, when its column reads.
    pub step_id: Option<Uuid>,
    /// The step's name, when its column reads.
    pub step_name: Option<String>,
    /// The column that does not decode (see [`step_column`]).
    pub column: &'static str,
    /// Why it does not decode.
    pub reason: String,
}

impl UndecodableStepRow {
    /// The error of `operation`: a [`StoreError::CorruptStep`] naming the run, the attempt,
    /// its step and the column; a [`StoreError::CorruptRun`] when the attempt's own id or
    /// name does not read; a [`StoreError::Corrupt`] when not even its run's id does.
    pub fn into_error(self, operation: Operation) -> StoreError {
        let what = format!("column `{}` does not decode: {}", self.column, self.reason);
        match (self.run_id, self.step_id, self.step_name) {
            (Some(run_id), Some(step_id), Some(step_name)) => StoreError::CorruptStep {
                run_id,
                step_id,
                step_name,
                column: self.column,
                operation,
                reason: self.reason,
            },
            (Some(id), _, _) => StoreError::CorruptRun {
                id,
                operation,
                reason: format!("one of its step attempt rows: {what}"),
            },
            (None, _, _) => StoreError::Corrupt {
                operation,
                reason: format!("a step attempt row: {what}"),
            },
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(run_id: Option<Uuid>, step_id: Option<Uuid>, name: Option<&str>) -> UndecodableStepRow {
        UndecodableStepRow {
            run_id,
            step_id,
            step_name: name.map(str::to_owned),
            column: "output",
            reason: "recursion limit exceeded".to_owned(),
        }
    }

    #[test]
    fn driver_column_names_are_step_columns() {
        assert_eq!(step_column("\"output\""), "output");
        assert_eq!(step_column("created_at"), "created_at");
        assert_eq!(step_column("\"nope\""), "?");
    }

    #[test]
    fn a_step_row_is_named_as_far_as_it_reads() {
        let (run, step) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let error = row(Some(run), Some(step), Some("charge")).into_error(Operation::StepHistory);
        let text = error.to_string();
        assert!(
            matches!(&error, StoreError::CorruptStep { run_id, step_id, step_name, column, .. }
                if *run_id == run && *step_id == step && step_name == "charge" && *column == "output"),
            "{error:?}"
        );
        for named in [
            &run.to_string(),
            &step.to_string(),
            "\"charge\"",
            "`output`",
        ] {
            assert!(text.contains(named), "{named} not in {text}");
        }
        let error = row(Some(run), None, Some("charge")).into_error(Operation::StepHistory);
        assert!(
            matches!(&error, StoreError::CorruptRun { id, reason, .. } if *id == run && reason.contains("`output`")),
            "{error:?}"
        );
        let error = row(None, Some(step), None).into_error(Operation::StepHistory);
        assert!(
            matches!(&error, StoreError::Corrupt { reason, .. } if reason.contains("`output`")),
            "{error:?}"
        );
    }
}
