//! Continue-as-new on Postgres: the SQL of [`ContinueStore`]. The rules (the fence, which
//! runs may continue, what the successor copies, where events go) are
//! [`tasks_core::continuation`]'s.
//!
//! The hand-over is one transaction that locks the finishing run first (`FOR UPDATE`), as a
//! send locks the run it sends to: a send that locked the run before commits its event
//! first, and the hand-over's later statements see it and move it; a send after the
//! hand-over finds the run continued and follows its lineage.

use async_trait::async_trait;
use tasks_core::continuation::{ContinueRun, ContinueStore, ContinuedRun, refusal};
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::check;
use tasks_core::transition::{CONTINUE, CONTINUED, CREATED, Column};
use uuid::Uuid;

use crate::PgStore;
use crate::db::Conn;
use crate::reconnect::{db, retrying};
use crate::rows::{RUN_COLUMNS, decode_run};

const OPERATION: Operation = Operation::ContinueRun;

#[async_trait]
impl ContinueStore for PgStore {
    async fn continue_run(&self, params: ContinueRun) -> StoreResult<ContinuedRun> {
        check::continue_run(&params)?;
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let locked = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
              WHERE namespace = $1 AND id = $2 FOR UPDATE"
        ))
        .bind(&*self.namespace)
        .bind(params.run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db(OPERATION))?
        .map(|row| decode_run(&row, OPERATION))
        .transpose()?;
        let run = match locked {
            Some(run) if CONTINUE.admits(&run, Some(&params.holder)) => run,
            current => {
                return Err(CONTINUE.miss(params.run_id, Some(&params.holder), current.as_ref()));
            }
        };
        if let Some(refused) = refusal(&run) {
            return Err(refused);
        }
        let successor_id = Uuid::now_v7();
        let finished = self.finish(&mut tx, &params, successor_id).await?;
        let successor = self
            .insert_successor(&mut tx, &run, successor_id, &params.input)
            .await?;
        // Events the finished run did not consume are the successor's now.
        sqlx::query(
            "UPDATE tasks.events SET workflow_run_id = $3
              WHERE namespace = $1 AND workflow_run_id = $2 AND consumed_at IS NULL",
        )
        .bind(&*self.namespace)
        .bind(run.id)
        .bind(successor_id)
        .execute(&mut *tx)
        .await
        .map_err(db(OPERATION))?;
        tx.commit().await.map_err(db(OPERATION))?;
        let continued = ContinuedRun {
            finished,
            successor,
        };
        self.notify_now(&continued.announcements()).await;
        Ok(continued)
    }

    async fn lineage_head(&self, lineage_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        const HEAD: Operation = Operation::LineageHead;
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
              WHERE namespace = $1 AND (id = $2 OR lineage_root_id = $2)
                AND continued_as_run_id IS NULL
              ORDER BY created_at DESC, id DESC LIMIT 1"
        );
        retrying(HEAD, || async {
            sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(lineage_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(HEAD))?
                .map(|row| decode_run(&row, HEAD))
                .transpose()
        })
        .await
    }
}

impl PgStore {
    /// Lands the locked run [`CONTINUED`], naming `successor_id`.
    async fn finish(
        &self,
        conn: &mut Conn,
        params: &ContinueRun,
        successor_id: Uuid,
    ) -> StoreResult<WorkflowRun> {
        let sql = format!(
            "UPDATE tasks.workflow_runs SET {set}, updated_at = now()
              WHERE namespace = $1 AND id = $2 AND {fence}
          RETURNING {RUN_COLUMNS}",
            set = CONTINUED.set_sql("now()", &[(Column::ContinuedAs, "$5")]),
            fence = CONTINUE.fence("", "$3", "$4"),
        );
        let row = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(&params.holder.worker_id)
            .bind(params.holder.claim_epoch)
            .bind(successor_id)
            .fetch_one(&mut *conn)
            .await
            .map_err(db(OPERATION))?;
        decode_run(&row, OPERATION)
    }

    /// Creates the successor of `run` (as it was before it finished): what
    /// [`ContinueStore::continue_run`] says it copies, read from the finished run's row, and
    /// the idempotency key `run` held.
    async fn insert_successor(
        &self,
        conn: &mut Conn,
        run: &WorkflowRun,
        successor_id: Uuid,
        input: &serde_json::Value,
    ) -> StoreResult<WorkflowRun> {
        let sql = format!(
            "WITH key_row AS (
                 INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
                 SELECT namespace, concurrency_key FROM tasks.workflow_runs
                  WHERE namespace = $1 AND id = $2 AND concurrency_key IS NOT NULL
                 ON CONFLICT DO NOTHING
             )
             INSERT INTO tasks.workflow_runs
                 (namespace, id, workflow_name, version, status, idempotency_key, config,
                  context, input, attempts, available_at, created_at, updated_at, priority,
                  concurrency_key, concurrency_limit, idempotency_scope, idempotency_expires_at,
                  traceparent, tracestate, queue, lineage_root_id, continued_from_run_id)
             SELECT namespace, $3, workflow_name, version, '{created}', $4, config, context,
                    $5, 0, now(), now(), now(), priority, concurrency_key, concurrency_limit,
                    CASE WHEN $4::text IS NULL THEN NULL ELSE idempotency_scope END,
                    CASE WHEN $4::text IS NULL THEN NULL ELSE idempotency_expires_at END,
                    traceparent, tracestate, queue, $6, id
               FROM tasks.workflow_runs
              WHERE namespace = $1 AND id = $2
          RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let row = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run.id)
            .bind(successor_id)
            .bind(&run.idempotency_key)
            .bind(input)
            .bind(run.lineage_id())
            .fetch_one(&mut *conn)
            .await
            .map_err(db(OPERATION))?;
        decode_run(&row, OPERATION)
    }
}
