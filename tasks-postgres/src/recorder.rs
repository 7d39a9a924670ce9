//! Step records shared across runs: finished step attempts of many runs that queue up while
//! one insert is in flight go to the database in the next single statement, so a busy
//! worker pays one commit for many steps instead of one each. An idle store sends a record
//! at once, alone, so latency does not suffer.
//!
//! The batch insert is fenced per row exactly like the single-row path: a row is inserted
//! only if its run is running under its claim (the worker and the claim epoch). Rows the
//! fence refused are handed back to the caller, which takes the single-row path to classify
//! the miss (interrupted, lease lost, not found).
//!
//! Both statements find each run by its primary key in a `LATERAL` subquery that the
//! planner may not flatten (`OFFSET 0`), and the completion updates the rows it found by
//! their physical address. A plain join lets the planner pick a plan from its statistics,
//! and with statistics that do not know a namespace yet (a new namespace, a table last
//! analyzed when it was smaller) it hash-joined against a scan of the whole table, or
//! looped over every run of the namespace once per row: milliseconds per batch that grow
//! with the table. The completion's address match is also its fence against concurrent
//! writers: a run changed after the statement's snapshot has a new address, is not updated,
//! and goes back to the caller like any other refusal.

use crate::background::{Background, Task};
use crate::db::Db;
use crate::reconnect::BatchFailed;
use crate::rows::{RUN_COLUMNS, RunRow};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::{StepAttempt, WorkflowRun};
use tasks_core::store::RecordStepAttempt;
use tasks_core::transition::{COMPLETE, COMPLETED, Column, RECORD_STEP};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

/// Most records in one statement.
const BATCH: usize = 256;

const OPERATION: Operation = Operation::RecordStepAttempt;

/// One queued write and where its result goes: `Ok` with what was written, or `Err` with
/// the item back when the fence refused it.
struct Job<T, O> {
    item: T,
    reply: oneshot::Sender<StoreResult<Result<O, T>>>,
}

/// Writes a batch in one statement; returns a receipt for each item written, by key.
type WriteBatch<T, R> = for<'a> fn(&'a Db, &'a [T]) -> BoxFuture<'a, StoreResult<HashMap<Uuid, R>>>;

/// Coalesces writes of one kind: whatever queues up while one statement is in flight goes
/// out in the next single statement (at most [`BATCH`] items).
struct Coalescer<T, R, O> {
    pool: Db,
    background: Arc<Background>,
    queue: Task<mpsc::UnboundedSender<Job<T, O>>>,
    steps: Steps<T, R, O>,
    operation: Operation,
}

/// How a coalescer writes: the key of an item, the batch statement, and what an item and
/// its receipt become.
struct Steps<T, R, O> {
    key: fn(&T) -> Uuid,
    write: WriteBatch<T, R>,
    written: fn(T, R) -> O,
}

impl<T, R, O> Clone for Steps<T, R, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, R, O> Copy for Steps<T, R, O> {}

impl<T: Send + Sync + 'static, R: Send + 'static, O: Send + 'static> Coalescer<T, R, O> {
    fn new(
        pool: Db,
        background: Arc<Background>,
        steps: Steps<T, R, O>,
        operation: Operation,
    ) -> Self {
        Coalescer {
            pool,
            background,
            queue: Task::new("batch writer"),
            steps,
            operation,
        }
    }

    /// Writes `item` in the next batch. `Ok(Err(item))`: the fence refused it, nothing
    /// written.
    async fn submit(&self, item: T) -> StoreResult<Result<O, T>> {
        if self.background.is_closed() {
            return Err(lost(self.operation, "the store was closed"));
        }
        let queue = self.queue.get_or_start(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let drain = drain(self.pool.clone(), rx, self.steps, self.operation);
            (tx, self.background.spawn(drain))
        });
        let (reply, answer) = oneshot::channel();
        if queue.send(Job { item, reply }).is_err() {
            return Err(lost(self.operation, "the batch writer stopped"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(lost(self.operation, "the batch writer dropped a write")))
    }
}

fn lost(operation: Operation, message: &str) -> StoreError {
    StoreError::database(operation, message.to_owned())
}

async fn drain<T, R, O>(
    pool: Db,
    mut queue: mpsc::UnboundedReceiver<Job<T, O>>,
    steps: Steps<T, R, O>,
    operation: Operation,
) {
    let mut jobs = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut jobs, BATCH).await > 0 {
        // The first item of a batch wakes this task, and Tokio runs a task woken that way
        // next, ahead of the others that are ready. Under load those are the runs the
        // previous batch just released, each about to queue its next record: yielding once
        // lets them queue first, so the batch takes them all instead of leaving them to the
        // next commit. Idle, nothing else is ready and the yield costs microseconds.
        if jobs.len() < BATCH {
            tokio::task::yield_now().await;
            while jobs.len() < BATCH {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        let (items, replies): (Vec<T>, Vec<_>) =
            jobs.drain(..).map(|job| (job.item, job.reply)).unzip();
        match (steps.write)(&pool, &items).await {
            Ok(mut written) => {
                for (item, reply) in items.into_iter().zip(replies) {
                    let outcome = match written.remove(&(steps.key)(&item)) {
                        Some(receipt) => Ok((steps.written)(item, receipt)),
                        None => Err(item),
                    };
                    let _ = reply.send(Ok(outcome));
                }
            }
            Err(error) => {
                // Every caller gets the failure; whether the connection broke decides
                // whether a caller may write again (see `reconnect`).
                let failed = BatchFailed::of(&error);
                for reply in replies {
                    let _ = reply.send(Err(StoreError::database(operation, failed.clone())));
                }
            }
        }
    }
}

/// A finished step attempt waiting to be written.
struct StepRecord {
    namespace: String,
    id: Uuid,
    params: RecordStepAttempt,
}

/// Finished step attempts of many runs, written together.
pub(crate) struct Recorder(Coalescer<StepRecord, Written, StepAttempt>);

impl Recorder {
    pub(crate) fn new(pool: Db, background: Arc<Background>) -> Self {
        Recorder(Coalescer::new(
            pool,
            background,
            Steps {
                key: |record| record.id,
                write: |pool, batch| Box::pin(insert(pool, batch)),
                written: written_attempt,
            },
            OPERATION,
        ))
    }

    /// Writes one finished attempt (in a batch with whatever else is waiting).
    /// `Ok(Err(params))`: the fence refused it and nothing was written.
    pub(crate) async fn record(
        &self,
        namespace: &str,
        params: RecordStepAttempt,
    ) -> StoreResult<Result<StepAttempt, RecordStepAttempt>> {
        let record = StepRecord {
            namespace: namespace.to_owned(),
            id: params.id,
            params,
        };
        Ok(self.0.submit(record).await?.map_err(|record| record.params))
    }
}

/// A run completion waiting to be written, with the run's last step attempts.
struct Completion {
    namespace: String,
    run_id: Uuid,
    holder: Holder,
    output: String,
    steps: Vec<StepRecord>,
}

/// Completions of many runs, written together.
pub(crate) struct Completer(Coalescer<Completion, WorkflowRun, WorkflowRun>);

impl Completer {
    pub(crate) fn new(pool: Db, background: Arc<Background>) -> Self {
        Completer(Coalescer::new(
            pool,
            background,
            Steps {
                key: |completion| completion.run_id,
                write: |pool, batch| Box::pin(complete(pool, batch)),
                written: |_, run| run,
            },
            COMPLETE_OPERATION,
        ))
    }

    /// Writes `steps` (finished attempts of this run) and completes the run held by
    /// `holder`, in one statement shared with other completions. `Ok(Err(steps))`: the
    /// fence refused it and nothing was written.
    pub(crate) async fn complete(
        &self,
        namespace: &str,
        run_id: Uuid,
        holder: &Holder,
        output: &serde_json::Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<Result<WorkflowRun, Vec<RecordStepAttempt>>> {
        let steps = steps
            .into_iter()
            .map(|params| StepRecord {
                namespace: namespace.to_owned(),
                id: params.id,
                params,
            })
            .collect();
        let completed = self
            .0
            .submit(Completion {
                namespace: namespace.to_owned(),
                run_id,
                holder: holder.clone(),
                output: output.to_string(),
                steps,
            })
            .await?;
        Ok(completed.map_err(|refused| {
            refused
                .steps
                .into_iter()
                .map(|record| record.params)
                .collect()
        }))
    }
}

const COMPLETE_OPERATION: Operation = Operation::CompleteRun;

async fn complete(
    pool: &Db,
    batch: &[Completion],
) -> Result<HashMap<Uuid, WorkflowRun>, StoreError> {
    let namespaces: Vec<&str> = batch.iter().map(|c| c.namespace.as_str()).collect();
    let run_ids: Vec<Uuid> = batch.iter().map(|c| c.run_id).collect();
    let workers: Vec<&str> = batch.iter().map(|c| c.holder.worker_id.as_str()).collect();
    let outputs: Vec<&str> = batch.iter().map(|c| c.output.as_str()).collect();
    let epochs: Vec<i64> = batch.iter().map(|c| c.holder.claim_epoch).collect();
    let steps = StepArrays::of(batch.iter().flat_map(|c| &c.steps));
    let sql = complete_runs_sql();
    let rows = steps
        .bind(
            sqlx::query_as::<_, RunRow>(sql)
                .bind(namespaces)
                .bind(run_ids)
                .bind(workers)
                .bind(outputs)
                .bind(epochs),
        )
        .fetch_all(pool)
        .await
        .map_err(crate::reconnect::db(COMPLETE_OPERATION))?;
    rows.into_iter()
        .map(|row| row.into_run(COMPLETE_OPERATION).map(|run| (run.id, run)))
        .collect()
}

/// Finished step attempts as the parallel arrays both statements take: namespace, id, run
/// id, worker id, step name, kind, status, config, output, error, args (JSON as text),
/// elapsed microseconds and the holder's claim epoch.
struct StepArrays {
    namespaces: Vec<String>,
    ids: Vec<Uuid>,
    run_ids: Vec<Uuid>,
    workers: Vec<String>,
    names: Vec<String>,
    kinds: Vec<&'static str>,
    statuses: Vec<&'static str>,
    configs: Vec<String>,
    outputs: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    args: Vec<Option<String>>,
    elapsed: Vec<i64>,
    epochs: Vec<i64>,
}

impl StepArrays {
    fn of<'a>(records: impl IntoIterator<Item = &'a StepRecord>) -> Self {
        let records = records.into_iter();
        let n = records.size_hint().0;
        let mut arrays = StepArrays {
            namespaces: Vec::with_capacity(n),
            ids: Vec::with_capacity(n),
            run_ids: Vec::with_capacity(n),
            workers: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            configs: Vec::with_capacity(n),
            outputs: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            args: Vec::with_capacity(n),
            elapsed: Vec::with_capacity(n),
            epochs: Vec::with_capacity(n),
        };
        for record in records {
            let params = &record.params;
            arrays.namespaces.push(record.namespace.clone());
            arrays.ids.push(record.id);
            arrays.run_ids.push(params.run_id);
            arrays.workers.push(params.holder.worker_id.clone());
            arrays.epochs.push(params.holder.claim_epoch);
            arrays.names.push(params.step_name.clone());
            arrays.kinds.push(params.kind.as_str());
            arrays.statuses.push(params.status.as_str());
            arrays.configs.push(params.config.to_string());
            arrays
                .outputs
                .push(params.output.as_ref().map(ToString::to_string));
            arrays
                .errors
                .push(params.error.as_ref().map(ToString::to_string));
            arrays
                .args
                .push(params.args.as_ref().map(ToString::to_string));
            arrays
                .elapsed
                .push(i64::try_from(params.elapsed.as_micros()).unwrap_or(i64::MAX));
        }
        arrays
    }

    /// Binds the thirteen arrays, in order, after whatever `query` already binds.
    fn bind<'q, O>(
        self,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        query
            .bind(self.namespaces)
            .bind(self.ids)
            .bind(self.run_ids)
            .bind(self.workers)
            .bind(self.names)
            .bind(self.kinds)
            .bind(self.statuses)
            .bind(self.configs)
            .bind(self.outputs)
            .bind(self.errors)
            .bind(self.args)
            .bind(self.elapsed)
            .bind(self.epochs)
    }
}

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
/// What the batch insert reads back of each attempt it wrote: its id and the four times
/// the database clock gave it. Everything else the engine sent, so the attempt is built from
/// the record rather than parsed back from the row (the JSON columns were most of the
/// recorder's client time).
struct Written {
    id: Uuid,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}
);

/// The columns of [`Written`], as the batch insert returns them.
const WRITTEN_COLUMNS: &str = "sa.id, sa.started_at, sa.finished_at, sa.created_at, sa.updated_at";

async fn insert(pool: &Db, batch: &[StepRecord]) -> Result<HashMap<Uuid, Written>, StoreError> {
    let steps = StepArrays::of(batch);
    let sql = record_steps_sql();
    let rows = steps
        .bind(sqlx::query_as::<_, Written>(sql))
        .fetch_all(pool)
        .await
        .map_err(crate::reconnect::db(OPERATION))?;
    Ok(rows.into_iter().map(|row| (row.id, row)).collect())
}

/// The attempt `record` became, with the times the database gave it.
fn written_attempt(record: StepRecord, row: Written) -> StepAttempt {
    let params = record.params;
    StepAttempt {
        namespace: record.namespace,
        id: record.id,
        workflow_run_id: params.run_id,
        step_name: params.step_name,
        kind: params.kind,
        status: params.status,
        config: params.config,
        context: None,
        output: params.output,
        error: params.error,
        args: params.args.filter(|args| !args.is_null()),
        child_workflow_run_namespace: None,
        child_workflow_run_id: None,
        started_at: Some(row.started_at),
        finished_at: Some(row.finished_at),
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// The finished step attempts of a batch as rows `r`: thirteen parallel arrays bound from
/// `$first` on (namespace, id, run id, worker id, step name, kind, status, config, output,
/// error, args as text, elapsed microseconds, claim epoch; see `StepArrays`).
fn step_rows(first: usize) -> String {
    let types = [
        "text", "uuid", "uuid", "text", "text", "text", "text", "text", "text", "text", "text",
        "bigint", "bigint",
    ];
    let arrays: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(i, ty)| format!("${}::{ty}[]", first + i))
        .collect();
    format!(
        "unnest({}) AS r(namespace, id, run_id, worker_id, step_name, kind, status, config, \
         output, error, args, elapsed, claim_epoch)",
        arrays.join(", ")
    )
}

/// Inserts the rows `r` of [`step_rows`] as attempts of the runs `run` (with column `id`)
/// they are joined to by the statement's `FROM` clause that follows.
const INSERT_STEPS: &str = "INSERT INTO tasks.step_attempts AS sa
             (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
              args, started_at, finished_at, created_at, updated_at)
         SELECT r.namespace, r.id, run.id, r.step_name, r.kind, r.status, r.config::jsonb,
                r.output::jsonb, r.error::jsonb, r.args::jsonb,
                clock_timestamp() - r.elapsed * INTERVAL '1 microsecond',
                clock_timestamp(), clock_timestamp(), clock_timestamp()";

/// Ends the inserts of [`INSERT_STEPS`]: an attempt whose id is stored already (a retry
/// whose first try committed) is not written again, and is not returned, so the caller
/// takes the single-row path, which answers with the stored attempt.
pub(crate) const SKIP_STORED: &str = "ON CONFLICT (namespace, id) DO NOTHING";

/// The statement that writes a batch of finished step attempts: the thirteen arrays of
/// [`step_rows`] from `$1`; returns the id and times of each row written. The benchmark's ceiling issues
/// exactly this text (through `postgres::__bench`).
pub(crate) fn record_steps_sql() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{INSERT_STEPS}
               FROM {rows}
              CROSS JOIN LATERAL (
                    SELECT w.id, w.status, w.worker_id, w.claim_epoch FROM tasks.workflow_runs w
                     WHERE w.namespace = r.namespace AND w.id = r.run_id
                    OFFSET 0) run
              WHERE {fence}
             {SKIP_STORED}
             RETURNING {returning}",
            rows = step_rows(1),
            fence = RECORD_STEP.fence("run.", "r.worker_id", "r.claim_epoch"),
            returning = WRITTEN_COLUMNS,
        )
    });
    &SQL
}

/// The statement that completes a batch of runs: five parallel arrays (namespace, run id,
/// worker id, output as JSON text, claim epoch), then the runs' last step attempts as the
/// thirteen arrays of [`step_rows`] from `$6`; returns the runs completed. A run's attempts are written only
/// when the run is completed, in the same transaction. The benchmark's ceiling issues
/// exactly this text (through `postgres::__bench`).
pub(crate) fn complete_runs_sql() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "WITH targets AS MATERIALIZED (
                 SELECT w.tid, c.output
                   FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::bigint[])
                        AS c(namespace, run_id, worker_id, output, claim_epoch)
                  CROSS JOIN LATERAL (
                        SELECT x.ctid AS tid, x.status, x.worker_id, x.claim_epoch,
                               x.parent_run_id
                          FROM tasks.workflow_runs x
                         WHERE x.namespace = c.namespace AND x.id = c.run_id
                        OFFSET 0) w
                  -- A child run's completion wakes its parent: the single-run statement
                  -- (`PgStore::transition`) does that, so the batch hands children back.
                  WHERE {fence} AND w.parent_run_id IS NULL
             ), done AS (
                 UPDATE tasks.workflow_runs wr
                    SET {completed}, updated_at = now()
                   FROM targets t
                  WHERE wr.ctid = ANY(ARRAY(SELECT tid FROM targets)) AND wr.ctid = t.tid
              RETURNING {returning}
             ), steps AS (
                 -- The runs' last step attempts, written only for the runs completed above.
                 {INSERT_STEPS}
                   FROM {rows}
                   JOIN done run ON run.namespace = r.namespace AND run.id = r.run_id
                 {SKIP_STORED}
             )
             SELECT {RUN_COLUMNS} FROM done",
            rows = step_rows(6),
            fence = COMPLETE.fence("w.", "c.worker_id", "c.claim_epoch"),
            completed = COMPLETED.set_sql("now()", &[(Column::Output, "t.output::jsonb")]),
            returning = super::prefixed("wr", RUN_COLUMNS),
        )
    });
    &SQL
}
