//! Row types and their conversion into the model.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, Row};
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::{StepAttempt, UnknownStatus, WorkflowRun};
use tasks_core::store::{ClaimedRun, UndecodableStepRow, status_of, step_column};
use tasks_core::transition::JSON_COLUMNS;
use uuid::Uuid;

/// Columns of `workflow_runs`, in the order of [`RunRow`].
pub(crate) const RUN_COLUMNS: &str = "namespace, id, workflow_name, version, status, \
    idempotency_key, config, context, input, output, error, attempts, \
    parent_step_attempt_namespace, parent_step_attempt_id, worker_id, claim_epoch, \
    available_at, deadline_at, started_at, finished_at, created_at, updated_at, retried_at, \
    forked_from_run_id, forked_from_step, parent_run_id, cancel_with_parent, traceparent, \
    tracestate, queue, lineage_root_id, continued_from_run_id, continued_as_run_id";

/// Columns of `step_attempts`, in the order of [`StepRow`].
pub(crate) const STEP_COLUMNS: &str = "namespace, id, workflow_run_id, step_name, kind, status, \
    config, context, output, error, child_workflow_run_namespace, child_workflow_run_id, \
    started_at, finished_at, created_at, updated_at, args";

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
pub(crate) struct RunRow {
    namespace: String,
    id: Uuid,
    workflow_name: String,
    version: Option<String>,
    status: String,
    idempotency_key: Option<String>,
    config: Value,
    context: Option<Value>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
    attempts: i32,
    parent_step_attempt_namespace: Option<String>,
    parent_step_attempt_id: Option<Uuid>,
    worker_id: Option<String>,
    claim_epoch: i64,
    available_at: Option<DateTime<Utc>>,
    deadline_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    retried_at: Option<DateTime<Utc>>,
    forked_from_run_id: Option<Uuid>,
    forked_from_step: Option<String>,
    parent_run_id: Option<Uuid>,
    cancel_with_parent: bool,
    traceparent: Option<String>,
    tracestate: Option<String>,
    queue: String,
    lineage_root_id: Option<Uuid>,
    continued_from_run_id: Option<Uuid>,
    continued_as_run_id: Option<Uuid>,
}
);

/// Decodes a run from a returned row; a row that does not decode (JSON the decoder refuses,
/// an unknown status) is a [`StoreError::CorruptRun`] naming the run.
pub(crate) fn decode_run(row: &PgRow, operation: Operation) -> StoreResult<WorkflowRun> {
    RunRow::from_row(row)
        .map_err(|error| corrupt_row(row, operation, error))?
        .into_run(operation)
}

/// Decodes a claimed run from a row of the claim statement, like [`decode_run`].
pub(crate) fn decode_claimed(row: &PgRow, operation: Operation) -> StoreResult<ClaimedRun> {
    ClaimRow::from_row(row)
        .map_err(|error| corrupt_row(row, operation, error))?
        .into_claimed(operation)
}

/// The JSON columns of a run row that do not decode (see [`JSON_COLUMNS`]).
pub(crate) fn undecodable_json(row: &PgRow) -> Vec<&'static str> {
    JSON_COLUMNS
        .iter()
        .map(|(column, _)| *column)
        .filter(|column| row.try_get::<Option<Value>, _>(*column).is_err())
        .collect()
}

fn corrupt_row(row: &PgRow, operation: Operation, error: sqlx::Error) -> StoreError {
    let reason = error.to_string();
    match row.try_get::<Uuid, _>("id") {
        Ok(id) => StoreError::CorruptRun {
            id,
            operation,
            reason,
        },
        Err(_) => StoreError::Corrupt { operation, reason },
    }
}

impl RunRow {
    pub(crate) fn into_run(self, operation: Operation) -> StoreResult<WorkflowRun> {
        let id = self.id;
        self.into_run_unnamed(operation)
            .map_err(|error| match error {
                StoreError::Corrupt { operation, reason } => StoreError::CorruptRun {
                    id,
                    operation,
                    reason,
                },
                other => other,
            })
    }

    fn into_run_unnamed(self, operation: Operation) -> StoreResult<WorkflowRun> {
        Ok(WorkflowRun {
            status: status_of(&self.status, operation)?,
            namespace: self.namespace,
            id: self.id,
            workflow_name: self.workflow_name,
            version: self.version,
            idempotency_key: self.idempotency_key,
            config: self.config,
            context: json_null_to_none(self.context),
            input: json_null_to_none(self.input),
            output: self.output,
            error: self.error,
            attempts: self.attempts,
            parent_step_attempt_namespace: self.parent_step_attempt_namespace,
            parent_step_attempt_id: self.parent_step_attempt_id,
            worker_id: self.worker_id,
            claim_epoch: self.claim_epoch,
            available_at: self.available_at,
            deadline_at: self.deadline_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
            retried_at: self.retried_at,
            forked_from_run_id: self.forked_from_run_id,
            forked_from_step: self.forked_from_step,
            parent_run_id: self.parent_run_id,
            cancel_with_parent: self.cancel_with_parent,
            trace_context: tasks_core::trace::from_columns(self.traceparent, self.tracestate),
            queue: self.queue,
            lineage_root_id: self.lineage_root_id,
            continued_from_run_id: self.continued_from_run_id,
            continued_as_run_id: self.continued_as_run_id,
        })
    }
}

/// A claimed run: its row and whether the claim is its first execution.
pub(crate) struct ClaimRow {
    run: RunRow,
    first_execution: bool,
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for ClaimRow {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> sqlx::Result<Self> {
        use sqlx::Row as _;
        Ok(Self {
            run: RunRow::from_row(row)?,
            first_execution: row.try_get("first_execution")?,
        })
    }
}

impl ClaimRow {
    pub(crate) fn into_claimed(self, operation: Operation) -> StoreResult<ClaimedRun> {
        Ok(ClaimedRun {
            run: self.run.into_run(operation)?,
            first_execution: self.first_execution,
        })
    }
}

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
/// The columns of a step attempt row that read as their types.
pub(crate) struct StepColumns {
    namespace: String,
    id: Uuid,
    workflow_run_id: Uuid,
    step_name: String,
    kind: String,
    status: String,
    config: Value,
    context: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
    child_workflow_run_namespace: Option<String>,
    args: Option<Value>,
    child_workflow_run_id: Option<Uuid>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}
);

/// A step attempt row as read: its columns, or the first column that does not decode. Reading
/// one never fails, so that a row that does not decode is the typed error of
/// [`StepRow::into_step`] at every query that returns step rows, never a database error.
pub(crate) struct StepRow(Result<StepColumns, UndecodableStepRow>);

impl<'r> FromRow<'r, PgRow> for StepRow {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        Ok(Self(
            StepColumns::from_row(row).map_err(|error| undecodable_step(row, &error)),
        ))
    }
}

/// What identifies a step row that does not decode, and the column that does not.
fn undecodable_step(row: &PgRow, error: &sqlx::Error) -> UndecodableStepRow {
    let (column, reason) = match error {
        sqlx::Error::ColumnDecode { index, source } => (step_column(index), source.to_string()),
        sqlx::Error::ColumnNotFound(column) => (step_column(column), "missing".to_owned()),
        other => ("?", other.to_string()),
    };
    UndecodableStepRow {
        run_id: row.try_get("workflow_run_id").ok(),
        step_id: row.try_get("id").ok(),
        step_name: row.try_get("step_name").ok(),
        column,
        reason,
    }
}

impl StepRow {
    /// The attempt; a row that does not decode (JSON the decoder refuses, an unknown status
    /// or kind) is a [`StoreError::CorruptStep`] naming its run, the attempt and the column.
    pub(crate) fn into_step(self, operation: Operation) -> StoreResult<StepAttempt> {
        self.0
            .and_then(StepColumns::into_step)
            .map_err(|undecodable| undecodable.into_error(operation))
    }
}

impl StepColumns {
    fn into_step(self) -> Result<StepAttempt, UndecodableStepRow> {
        let undecodable = |column: &'static str, reason: String| UndecodableStepRow {
            run_id: Some(self.workflow_run_id),
            step_id: Some(self.id),
            step_name: Some(self.step_name.clone()),
            column,
            reason,
        };
        let status = self
            .status
            .parse()
            .map_err(|e: UnknownStatus| undecodable("status", e.to_string()))?;
        let kind = self
            .kind
            .parse()
            .map_err(|e: UnknownStatus| undecodable("kind", e.to_string()))?;
        Ok(StepAttempt {
            status,
            kind,
            namespace: self.namespace,
            id: self.id,
            workflow_run_id: self.workflow_run_id,
            step_name: self.step_name,
            config: self.config,
            context: json_null_to_none(self.context),
            output: self.output,
            error: self.error,
            args: json_null_to_none(self.args),
            child_workflow_run_namespace: self.child_workflow_run_namespace,
            child_workflow_run_id: self.child_workflow_run_id,
            started_at: self.started_at,
            finished_at: self.finished_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// Inputs and contexts are stored as SQL NULL when absent; a JSON `null` written by an older
/// client reads back the same way.
fn json_null_to_none(value: Option<Value>) -> Option<Value> {
    value.filter(|v| !v.is_null())
}

pub(crate) fn runs(rows: &[PgRow], operation: Operation) -> StoreResult<Vec<WorkflowRun>> {
    rows.iter().map(|row| decode_run(row, operation)).collect()
}

/// Decodes step attempts from returned rows: a row that does not decode (JSON the decoder
/// refuses, an unknown status or kind) is a [`StoreError::CorruptStep`] naming its run, the
/// attempt and the column, not a database error.
pub(crate) fn steps(rows: &[PgRow], operation: Operation) -> StoreResult<Vec<StepAttempt>> {
    rows.iter()
        .map(|row| {
            StepRow::from_row(row)
                .map_err(|error| StoreError::database(operation, error))?
                .into_step(operation)
        })
        .collect()
}
