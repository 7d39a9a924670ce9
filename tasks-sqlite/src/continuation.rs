//! Continue-as-new on SQLite: the SQL of [`ContinueStore`]. The rules (the fence, which
//! runs may continue, what the successor copies, where events go) are
//! [`tasks_core::continuation`]'s.
//!
//! The hand-over runs under SQLite's write lock (`BEGIN IMMEDIATE`), like a send: a send
//! before it left its event on the run, which the hand-over moves; a send after it finds
//! the run continued and follows its lineage.

use async_trait::async_trait;
use tasks_core::continuation::{ContinueRun, ContinueStore, ContinuedRun, refusal};
use tasks_core::error::{Operation, StoreResult, db};
use tasks_core::model::WorkflowRun;
use tasks_core::store::check;
use tasks_core::transition::{CONTINUE, CONTINUED, CREATED, Column};
use uuid::Uuid;

use crate::rows::{self, RUN_COLUMNS, RunRow};
use crate::{SqliteStore, Write, fetch_run};

const OPERATION: Operation = Operation::ContinueRun;

/// The current run of lineage `?2`: the run of the lineage that did not continue.
pub(crate) const HEAD_SQL: &str = "FROM tasks_workflow_runs
     WHERE namespace = ?1 AND (id = ?2 OR lineage_root_id = ?2) AND continued_as_run_id IS NULL
     ORDER BY created_at DESC, id DESC LIMIT 1";

#[async_trait]
impl ContinueStore for SqliteStore {
    async fn continue_run(&self, params: ContinueRun) -> StoreResult<ContinuedRun> {
        check::continue_run(&params)?;
        let mut write = self.begin_write(OPERATION).await?;
        let current = fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await?;
        let run = match current {
            Some(run) if CONTINUE.admits(&run, Some(&params.holder)) => run,
            current => {
                return Err(CONTINUE.miss(params.run_id, Some(&params.holder), current.as_ref()));
            }
        };
        if let Some(refused) = refusal(&run) {
            return Err(refused);
        }
        let successor_id = Uuid::now_v7();
        let finished = self.finish(&mut write, &params, successor_id).await?;
        let successor = self
            .insert_successor(&mut write, &run, successor_id, &params.input)
            .await?;
        // Events the finished run did not consume are the successor's now.
        sqlx::query(
            "UPDATE tasks_events SET workflow_run_id = ?3
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND consumed_at IS NULL",
        )
        .bind(&*self.namespace)
        .bind(rows::id(run.id))
        .bind(rows::id(successor_id))
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await?;
        let continued = ContinuedRun {
            finished,
            successor,
        };
        for notification in continued.announcements() {
            self.notify(notification);
        }
        Ok(continued)
    }

    async fn lineage_head(&self, lineage_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        const HEAD: Operation = Operation::LineageHead;
        let sql = format!("SELECT {RUN_COLUMNS} {HEAD_SQL}");
        sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(lineage_id))
            .fetch_optional(&self.pool)
            .await
            .map_err(db(HEAD))?
            .map(|row| row.into_run(HEAD))
            .transpose()
    }
}

impl SqliteStore {
    /// Lands the run, read under the write lock, [`CONTINUED`], naming `successor_id`.
    async fn finish(
        &self,
        write: &mut Write<'_>,
        params: &ContinueRun,
        successor_id: Uuid,
    ) -> StoreResult<WorkflowRun> {
        let sql = format!(
            "UPDATE tasks_workflow_runs SET {set}, updated_at = ?5
              WHERE namespace = ?1 AND id = ?2 AND {fence}
          RETURNING {RUN_COLUMNS}",
            set = CONTINUED.set_sql("?5", &[(Column::ContinuedAs, "?6")]),
            fence = CONTINUE.fence("", "?3", "?4"),
        );
        let now = write.now();
        sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(&params.holder.worker_id)
            .bind(params.holder.claim_epoch)
            .bind(now)
            .bind(rows::id(successor_id))
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)
    }

    /// Creates the successor of `run` (as it was before it finished): what
    /// [`ContinueStore::continue_run`] says it copies, read from the finished run's row, and
    /// the idempotency key `run` held.
    async fn insert_successor(
        &self,
        write: &mut Write<'_>,
        run: &WorkflowRun,
        successor_id: Uuid,
        input: &serde_json::Value,
    ) -> StoreResult<WorkflowRun> {
        let sql = format!(
            "INSERT INTO tasks_workflow_runs
                 (namespace, id, workflow_name, version, status, idempotency_key, config,
                  context, input, attempts, available_at, created_at, updated_at, priority,
                  concurrency_key, concurrency_limit, idempotency_scope, idempotency_expires_at,
                  traceparent, tracestate, queue, lineage_root_id, continued_from_run_id)
             SELECT namespace, ?3, workflow_name, version, '{created}', ?4, config, context,
                    ?5, 0, ?7, ?7, ?7, priority, concurrency_key, concurrency_limit,
                    CASE WHEN ?4 IS NULL THEN NULL ELSE idempotency_scope END,
                    CASE WHEN ?4 IS NULL THEN NULL ELSE idempotency_expires_at END,
                    traceparent, tracestate, queue, ?6, id
               FROM tasks_workflow_runs
              WHERE namespace = ?1 AND id = ?2
          RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let now = write.now();
        sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run.id))
            .bind(rows::id(successor_id))
            .bind(&run.idempotency_key)
            .bind(rows::json(input))
            .bind(rows::id(run.lineage_id()))
            .bind(now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)
    }
}
