//! Step records shared across runs: finished step attempts of many runs that queue up while
//! one insert is in flight go to the database in the next single statement, so a busy
//! worker pays one commit for many steps instead of one each. An idle store sends a record
//! at once, alone, so latency does not suffer.
//!
//! The batch insert is fenced per row exactly like the single-row path: a row is inserted
//! only if its run is running under its worker. Rows the fence refused are handed back to
//! the caller, which takes the single-row path to classify the miss (interrupted, lease
//! lost, not found).

use std::collections::HashMap;
use std::sync::OnceLock;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::rows::{StepRow, STEP_COLUMNS};
use crate::error::{StoreError, StoreResult};
use crate::model::StepAttempt;
use crate::store::RecordStepAttempt;

/// Most records in one statement.
const BATCH: usize = 256;

const OPERATION: &str = "recording step attempts";

struct Pending {
    namespace: String,
    id: Uuid,
    params: RecordStepAttempt,
    /// `Some(attempt)` when written, `None` when the fence refused the row.
    reply: oneshot::Sender<StoreResult<Option<StepAttempt>>>,
}

pub(crate) struct Recorder {
    pool: PgPool,
    queue: OnceLock<mpsc::UnboundedSender<Pending>>,
}

impl Recorder {
    pub(crate) fn new(pool: PgPool) -> Self {
        Recorder {
            pool,
            queue: OnceLock::new(),
        }
    }

    /// Writes one finished attempt (in a batch with whatever else is waiting). `Ok(None)`
    /// means the fence refused it and nothing was written.
    pub(crate) async fn record(
        &self,
        namespace: &str,
        params: RecordStepAttempt,
    ) -> StoreResult<Option<StepAttempt>> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(drain(self.pool.clone(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            namespace: namespace.to_owned(),
            id: Uuid::now_v7(),
            params,
            reply,
        };
        if queue.send(pending).is_err() {
            return Err(lost("the step recorder stopped"));
        }
        answer
            .await
            .unwrap_or_else(|_| Err(lost("the step recorder dropped a record")))
    }
}

fn lost(message: &str) -> StoreError {
    StoreError::Database {
        operation: OPERATION,
        source: Box::new(sqlx::Error::Protocol(message.to_owned())),
    }
}

async fn drain(pool: PgPool, mut queue: mpsc::UnboundedReceiver<Pending>) {
    let mut batch = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut batch, BATCH).await > 0 {
        match insert(&pool, &batch).await {
            Ok(mut written) => {
                for pending in batch.drain(..) {
                    let attempt = written.remove(&pending.id);
                    let _ = pending.reply.send(Ok(attempt));
                }
            }
            Err(error) => {
                let message = error.to_string();
                for pending in batch.drain(..) {
                    let _ = pending.reply.send(Err(StoreError::Database {
                        operation: OPERATION,
                        source: Box::new(sqlx::Error::Protocol(message.clone())),
                    }));
                }
            }
        }
    }
}

async fn insert(
    pool: &PgPool,
    batch: &[Pending],
) -> Result<HashMap<Uuid, StepAttempt>, StoreError> {
    let mut namespaces = Vec::with_capacity(batch.len());
    let mut ids = Vec::with_capacity(batch.len());
    let mut run_ids = Vec::with_capacity(batch.len());
    let mut workers = Vec::with_capacity(batch.len());
    let mut names = Vec::with_capacity(batch.len());
    let mut kinds = Vec::with_capacity(batch.len());
    let mut statuses = Vec::with_capacity(batch.len());
    let mut configs = Vec::with_capacity(batch.len());
    let mut outputs: Vec<Option<String>> = Vec::with_capacity(batch.len());
    let mut errors: Vec<Option<String>> = Vec::with_capacity(batch.len());
    let mut elapsed = Vec::with_capacity(batch.len());
    for pending in batch {
        let params = &pending.params;
        namespaces.push(pending.namespace.clone());
        ids.push(pending.id);
        run_ids.push(params.run_id);
        workers.push(params.worker_id.clone());
        names.push(params.step_name.clone());
        kinds.push(params.kind.as_str());
        statuses.push(params.status.as_str());
        configs.push(params.config.to_string());
        outputs.push(params.output.as_ref().map(ToString::to_string));
        errors.push(params.error.as_ref().map(ToString::to_string));
        elapsed.push(i64::try_from(params.elapsed.as_micros()).unwrap_or(i64::MAX));
    }
    let returning = STEP_COLUMNS
        .split(',')
        .map(|column| format!("sa.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "WITH records AS (
             SELECT * FROM unnest($1::text[], $2::uuid[], $3::uuid[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::text[],
                                  $11::bigint[])
                 AS r(namespace, id, run_id, worker_id, step_name, kind, status, config, output,
                      error, elapsed)
         )
         INSERT INTO tasks.step_attempts AS sa
             (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
              started_at, finished_at, created_at, updated_at)
         SELECT r.namespace, r.id, wr.id, r.step_name, r.kind, r.status, r.config::jsonb,
                r.output::jsonb, r.error::jsonb,
                clock_timestamp() - r.elapsed * INTERVAL '1 microsecond',
                clock_timestamp(), clock_timestamp(), clock_timestamp()
           FROM records r
           JOIN tasks.workflow_runs wr
             ON wr.namespace = r.namespace AND wr.id = r.run_id
            AND wr.status = 'running' AND wr.worker_id = r.worker_id
         RETURNING {returning}"
    );
    let rows = sqlx::query_as::<_, StepRow>(&sql)
        .bind(namespaces)
        .bind(ids)
        .bind(run_ids)
        .bind(workers)
        .bind(names)
        .bind(kinds)
        .bind(statuses)
        .bind(configs)
        .bind(outputs)
        .bind(errors)
        .bind(elapsed)
        .fetch_all(pool)
        .await
        .map_err(crate::error::db(OPERATION))?;
    rows.into_iter()
        .map(|row| row.into_step(OPERATION).map(|step| (step.id, step)))
        .collect()
}
