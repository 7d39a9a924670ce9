//! How values are stored in SQLite, and row types with their conversion into the model.
//!
//! SQLite has no UUID, timestamp or JSON types, so this module owns the text encodings:
//!
//! * ids are the canonical lowercase hyphenated UUID text, whose text order is the byte
//!   order Postgres sorts UUIDs in;
//! * timestamps are UTC text of fixed width, `YYYY-MM-DDTHH:MM:SS.ffffffZ`, exact to the
//!   microsecond like Postgres, so that text comparison is time order and cursors are exact;
//! * JSON documents are their serialized text; an absent value is SQL NULL, a JSON `null` is
//!   the text `null` (as in Postgres, where `Some(Value::Null)` is stored as JSON `null`).
//!
//! Never bind a `Uuid` or a `DateTime` directly: sqlx would encode them differently (a UUID
//! as a blob, a timestamp in a variable-width format), and comparisons would silently fail.
//! Always go through [`id`], [`ts`] and [`json`].

use chrono::{DateTime, NaiveDate, NaiveDateTime, SubsecRound, Utc};
use serde_json::Value;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::{StepAttempt, UnknownStatus, WorkflowRun};
use tasks_core::store::{ClaimedRun, UndecodableStepRow, status_of, step_column};
use tasks_core::transition::JSON_COLUMNS;
use uuid::Uuid;

/// Columns of `tasks_workflow_runs`, in the order of [`RunRow`].
pub(crate) const RUN_COLUMNS: &str = "namespace, id, workflow_name, version, status, \
    idempotency_key, config, context, input, output, error, attempts, \
    parent_step_attempt_namespace, parent_step_attempt_id, worker_id, claim_epoch, \
    available_at, deadline_at, started_at, finished_at, created_at, updated_at, retried_at, \
    forked_from_run_id, forked_from_step, parent_run_id, cancel_with_parent, traceparent, \
    tracestate, queue, lineage_root_id, continued_from_run_id, continued_as_run_id";

/// Columns of `tasks_step_attempts`, in the order of [`StepRow`].
pub(crate) const STEP_COLUMNS: &str = "namespace, id, workflow_run_id, step_name, kind, status, \
    config, context, output, error, child_workflow_run_namespace, child_workflow_run_id, \
    started_at, finished_at, created_at, updated_at, args";

/// The stored timestamp format: fixed width, so text order is time order.
const TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// The earliest instant the format holds with a fixed width (year 0000).
fn earliest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(0, 1, 1)
        .and_then(|d| d.and_hms_micro_opt(0, 0, 0, 0))
        .expect("a valid date")
        .and_utc()
}

/// The latest instant the format holds with a fixed width (the end of year 9999).
fn latest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_micro_opt(23, 59, 59, 999_999))
        .expect("a valid date")
        .and_utc()
}

/// The text of an id.
pub(crate) fn id(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// The text of an instant that is stored, truncated to the microsecond like Postgres does.
/// Instants outside the years 0000–9999 cannot be stored with a fixed width and are refused
/// (the store's callers have checked the narrower range of [`tasks_core::limits::EARLIEST`] and
/// [`tasks_core::limits::LATEST`], years 0001–9999, already).
pub(crate) fn ts(t: DateTime<Utc>) -> StoreResult<String> {
    if t < earliest() || t > latest() {
        return Err(StoreError::InvalidArgument(format!(
            "timestamp {t} is outside the years 0000-9999 that the SQLite store can hold"
        )));
    }
    Ok(t.trunc_subsecs(6).format(TIMESTAMP_FORMAT).to_string())
}

/// The text of an instant that is only compared against (a filter or a cursor): instants
/// outside the storable range are clamped to it, which keeps every comparison right.
pub(crate) fn ts_bound(t: DateTime<Utc>) -> String {
    let clamped = t.clamp(earliest(), latest());
    clamped
        .trunc_subsecs(6)
        .format(TIMESTAMP_FORMAT)
        .to_string()
}

/// `Some(text)` of an optional stored instant.
pub(crate) fn ts_opt(t: Option<DateTime<Utc>>) -> StoreResult<Option<String>> {
    t.map(ts).transpose()
}

/// The text of a JSON document.
pub(crate) fn json(value: &Value) -> String {
    // Serializing a `Value` cannot fail: its map keys are strings.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// The text of an optional JSON document (`None` is SQL NULL).
pub(crate) fn json_opt(value: Option<&Value>) -> Option<String> {
    value.map(json)
}

fn corrupt(
    operation: Operation,
    what: &str,
    value: &str,
    error: impl std::fmt::Display,
) -> StoreError {
    StoreError::Corrupt {
        operation,
        reason: format!("{what} {value:?}: {error}"),
    }
}

pub(crate) fn parse_id(value: &str, operation: Operation) -> StoreResult<Uuid> {
    Uuid::parse_str(value).map_err(|e| corrupt(operation, "id", value, e))
}

fn parse_id_opt(value: Option<String>, operation: Operation) -> StoreResult<Option<Uuid>> {
    value.as_deref().map(|v| parse_id(v, operation)).transpose()
}

pub(crate) fn parse_ts(value: &str, operation: Operation) -> StoreResult<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(value, TIMESTAMP_FORMAT)
        .map(|t| t.and_utc())
        .map_err(|e| corrupt(operation, "timestamp", value, e))
}

fn parse_ts_opt(value: Option<String>, operation: Operation) -> StoreResult<Option<DateTime<Utc>>> {
    value.as_deref().map(|v| parse_ts(v, operation)).transpose()
}

pub(crate) fn parse_json(value: &str, operation: Operation) -> StoreResult<Value> {
    serde_json::from_str(value).map_err(|e| corrupt(operation, "JSON document", value, e))
}

fn parse_json_opt(value: Option<String>, operation: Operation) -> StoreResult<Option<Value>> {
    value
        .as_deref()
        .map(|v| parse_json(v, operation))
        .transpose()
}

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
pub(crate) struct RunRow {
    namespace: String,
    id: String,
    workflow_name: String,
    version: Option<String>,
    status: String,
    idempotency_key: Option<String>,
    config: String,
    context: Option<String>,
    input: Option<String>,
    output: Option<String>,
    error: Option<String>,
    attempts: i32,
    parent_step_attempt_namespace: Option<String>,
    parent_step_attempt_id: Option<String>,
    worker_id: Option<String>,
    claim_epoch: i64,
    available_at: Option<String>,
    deadline_at: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    created_at: String,
    updated_at: String,
    retried_at: Option<String>,
    forked_from_run_id: Option<String>,
    forked_from_step: Option<String>,
    parent_run_id: Option<String>,
    cancel_with_parent: bool,
    traceparent: Option<String>,
    tracestate: Option<String>,
    queue: String,
    lineage_root_id: Option<String>,
    continued_from_run_id: Option<String>,
    continued_as_run_id: Option<String>,
}
);

impl RunRow {
    /// The run; a row that does not decode is a [`StoreError::CorruptRun`] naming the run
    /// (a [`StoreError::Corrupt`] when even its id does not parse).
    pub(crate) fn into_run(self, operation: Operation) -> StoreResult<WorkflowRun> {
        let id = Uuid::parse_str(&self.id).ok();
        self.into_run_unnamed(operation)
            .map_err(|error| match (error, id) {
                (StoreError::Corrupt { operation, reason }, Some(id)) => StoreError::CorruptRun {
                    id,
                    operation,
                    reason,
                },
                (other, _) => other,
            })
    }

    /// The JSON columns of the row that do not parse, with their stored text (see
    /// [`JSON_COLUMNS`]).
    pub(crate) fn undecodable_json(&self) -> Vec<(&'static str, &str)> {
        let values = [
            Some(self.config.as_str()),
            self.context.as_deref(),
            self.input.as_deref(),
            self.output.as_deref(),
            self.error.as_deref(),
        ];
        JSON_COLUMNS
            .iter()
            .zip(values)
            .filter_map(|((column, _), value)| {
                let value = value?;
                serde_json::from_str::<Value>(value)
                    .is_err()
                    .then_some((*column, value))
            })
            .collect()
    }

    fn into_run_unnamed(self, operation: Operation) -> StoreResult<WorkflowRun> {
        let op = operation;
        Ok(WorkflowRun {
            status: status_of(&self.status, op)?,
            namespace: self.namespace,
            id: parse_id(&self.id, op)?,
            workflow_name: self.workflow_name,
            version: self.version,
            idempotency_key: self.idempotency_key,
            config: parse_json(&self.config, op)?,
            context: json_null_to_none(parse_json_opt(self.context, op)?),
            input: json_null_to_none(parse_json_opt(self.input, op)?),
            output: parse_json_opt(self.output, op)?,
            error: parse_json_opt(self.error, op)?,
            attempts: self.attempts,
            parent_step_attempt_namespace: self.parent_step_attempt_namespace,
            parent_step_attempt_id: parse_id_opt(self.parent_step_attempt_id, op)?,
            worker_id: self.worker_id,
            claim_epoch: self.claim_epoch,
            available_at: parse_ts_opt(self.available_at, op)?,
            deadline_at: parse_ts_opt(self.deadline_at, op)?,
            started_at: parse_ts_opt(self.started_at, op)?,
            finished_at: parse_ts_opt(self.finished_at, op)?,
            created_at: parse_ts(&self.created_at, op)?,
            updated_at: parse_ts(&self.updated_at, op)?,
            retried_at: parse_ts_opt(self.retried_at, op)?,
            forked_from_run_id: parse_id_opt(self.forked_from_run_id, op)?,
            forked_from_step: self.forked_from_step,
            parent_run_id: parse_id_opt(self.parent_run_id, op)?,
            cancel_with_parent: self.cancel_with_parent,
            trace_context: tasks_core::trace::from_columns(self.traceparent, self.tracestate),
            queue: self.queue,
            lineage_root_id: parse_id_opt(self.lineage_root_id, op)?,
            continued_from_run_id: parse_id_opt(self.continued_from_run_id, op)?,
            continued_as_run_id: parse_id_opt(self.continued_as_run_id, op)?,
        })
    }
}

/// A claimed run: its row and whether the claim is its first execution.
pub(crate) struct ClaimRow {
    run: RunRow,
    first_execution: bool,
}

impl<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> for ClaimRow {
    fn from_row(row: &'r sqlx::sqlite::SqliteRow) -> sqlx::Result<Self> {
        use sqlx::Row as _;
        Ok(Self {
            run: RunRow::from_row(row)?,
            first_execution: row.try_get("first_execution")?,
        })
    }
}

impl ClaimRow {
    /// The row of the claimed run, as stored.
    pub(crate) fn run_row(&self) -> &RunRow {
        &self.run
    }

    /// The claim epoch the claim left the run at: a plain integer, which reads when the
    /// row's JSON does not.
    pub(crate) fn claim_epoch(&self) -> i64 {
        self.run.claim_epoch
    }

    pub(crate) fn into_claimed(self, operation: Operation) -> StoreResult<ClaimedRun> {
        Ok(ClaimedRun {
            run: self.run.into_run(operation)?,
            first_execution: self.first_execution,
        })
    }
}

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
/// The columns of a step attempt row, as their stored text.
pub(crate) struct StepColumns {
    namespace: String,
    id: String,
    workflow_run_id: String,
    step_name: String,
    kind: String,
    status: String,
    config: String,
    context: Option<String>,
    output: Option<String>,
    error: Option<String>,
    child_workflow_run_namespace: Option<String>,
    args: Option<String>,
    child_workflow_run_id: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    created_at: String,
    updated_at: String,
}
);

/// A step attempt row as read: its columns, or the first column that is not text (SQLite
/// stores any type in any column). Reading one never fails, so that a row that does not
/// decode is the typed error of [`StepRow::into_step`] at every query that returns step
/// rows, never a database error.
pub(crate) struct StepRow(Result<StepColumns, UndecodableStepRow>);

impl<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> for StepRow {
    fn from_row(row: &'r sqlx::sqlite::SqliteRow) -> sqlx::Result<Self> {
        use sqlx::Row as _;
        Ok(Self(StepColumns::from_row(row).map_err(|error| {
            let (column, reason) = match &error {
                sqlx::Error::ColumnDecode { index, source } => {
                    (step_column(index), source.to_string())
                }
                sqlx::Error::ColumnNotFound(column) => (step_column(column), "missing".to_owned()),
                other => ("?", other.to_string()),
            };
            let text = |column: &str| row.try_get::<String, _>(column).ok();
            UndecodableStepRow {
                run_id: text("workflow_run_id").and_then(|id| Uuid::parse_str(&id).ok()),
                step_id: text("id").and_then(|id| Uuid::parse_str(&id).ok()),
                step_name: text("step_name"),
                column,
                reason,
            }
        })))
    }
}

impl StepRow {
    /// The attempt; a row that does not decode is a [`StoreError::CorruptStep`] naming its
    /// run, the attempt and the column (see [`UndecodableStepRow::into_error`] for a row
    /// whose ids do not parse either).
    pub(crate) fn into_step(self, operation: Operation) -> StoreResult<StepAttempt> {
        self.0
            .and_then(StepColumns::into_step)
            .map_err(|undecodable| undecodable.into_error(operation))
    }
}

impl StepColumns {
    fn into_step(self) -> Result<StepAttempt, UndecodableStepRow> {
        let run_id = Uuid::parse_str(&self.workflow_run_id).ok();
        let step_id = Uuid::parse_str(&self.id).ok();
        let step_name = self.step_name.clone();
        let undecodable = |column: &'static str, value: &str, reason: String| UndecodableStepRow {
            run_id,
            step_id,
            step_name: Some(step_name.clone()),
            column,
            reason: format!("{value:?}: {reason}"),
        };
        let id = |column: &'static str, value: &str| {
            Uuid::parse_str(value).map_err(|e| undecodable(column, value, e.to_string()))
        };
        let id_opt =
            |column: &'static str, value: Option<&str>| value.map(|v| id(column, v)).transpose();
        let json = |column: &'static str, value: &str| {
            serde_json::from_str::<Value>(value)
                .map_err(|e| undecodable(column, value, e.to_string()))
        };
        let json_opt =
            |column: &'static str, value: Option<&str>| value.map(|v| json(column, v)).transpose();
        let time = |column: &'static str, value: &str| {
            NaiveDateTime::parse_from_str(value, TIMESTAMP_FORMAT)
                .map(|t| t.and_utc())
                .map_err(|e| undecodable(column, value, e.to_string()))
        };
        let time_opt =
            |column: &'static str, value: Option<&str>| value.map(|v| time(column, v)).transpose();
        Ok(StepAttempt {
            status: self
                .status
                .parse()
                .map_err(|e: UnknownStatus| undecodable("status", &self.status, e.to_string()))?,
            kind: self
                .kind
                .parse()
                .map_err(|e: UnknownStatus| undecodable("kind", &self.kind, e.to_string()))?,
            id: id("id", &self.id)?,
            workflow_run_id: id("workflow_run_id", &self.workflow_run_id)?,
            config: json("config", &self.config)?,
            context: json_null_to_none(json_opt("context", self.context.as_deref())?),
            output: json_opt("output", self.output.as_deref())?,
            error: json_opt("error", self.error.as_deref())?,
            args: json_null_to_none(json_opt("args", self.args.as_deref())?),
            child_workflow_run_id: id_opt(
                "child_workflow_run_id",
                self.child_workflow_run_id.as_deref(),
            )?,
            started_at: time_opt("started_at", self.started_at.as_deref())?,
            finished_at: time_opt("finished_at", self.finished_at.as_deref())?,
            created_at: time("created_at", &self.created_at)?,
            updated_at: time("updated_at", &self.updated_at)?,
            namespace: self.namespace,
            step_name: self.step_name,
            child_workflow_run_namespace: self.child_workflow_run_namespace,
        })
    }
}

/// Inputs and contexts are stored as SQL NULL when absent; a JSON `null` reads back the same
/// way, as in the Postgres store.
fn json_null_to_none(value: Option<Value>) -> Option<Value> {
    value.filter(|v| !v.is_null())
}

pub(crate) fn runs(rows: Vec<RunRow>, operation: Operation) -> StoreResult<Vec<WorkflowRun>> {
    rows.into_iter()
        .map(|row| row.into_run(operation))
        .collect()
}

pub(crate) fn steps(rows: Vec<StepRow>, operation: Operation) -> StoreResult<Vec<StepAttempt>> {
    rows.into_iter()
        .map(|row| row.into_step(operation))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_fixed_width_exact_and_ordered() {
        let t = DateTime::parse_from_rfc3339("2024-03-05T07:08:09.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        let text = ts(t).unwrap();
        assert_eq!(text, "2024-03-05T07:08:09.123456Z");
        assert_eq!(
            parse_ts(&text, Operation::GetRun).unwrap(),
            t.trunc_subsecs(6)
        );
        let whole = DateTime::parse_from_rfc3339("2024-03-05T07:08:09Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(ts(whole).unwrap(), "2024-03-05T07:08:09.000000Z");
        assert_eq!(ts(earliest()).unwrap().len(), text.len());
        assert_eq!(ts(latest()).unwrap().len(), text.len());
        assert!(ts(whole).unwrap() < text);
    }

    #[test]
    fn out_of_range_timestamps_are_refused_or_clamped() {
        let far = DateTime::from_timestamp(400_000_000_000, 0).unwrap();
        assert!(matches!(ts(far), Err(StoreError::InvalidArgument(_))));
        assert_eq!(ts_bound(far), "9999-12-31T23:59:59.999999Z");
        let ancient = DateTime::from_timestamp(-100_000_000_000, 0).unwrap();
        assert_eq!(ts_bound(ancient), "0000-01-01T00:00:00.000000Z");
    }

    #[test]
    fn id_text_order_is_byte_order() {
        let low = Uuid::from_u128(0x0fff_ffff_ffff_ffff_ffff_ffff_ffff_ffff);
        let high = Uuid::from_u128(0xa000_0000_0000_0000_0000_0000_0000_0000);
        assert!(id(low) < id(high));
        assert!(id(Uuid::nil()) < id(low));
        assert!(id(high) < id(Uuid::max()));
        assert_eq!(parse_id(&id(high), Operation::GetRun).unwrap(), high);
    }
}
