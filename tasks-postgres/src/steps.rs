//! Step attempts on Postgres: the SQL of [`StepStore`].

use crate::reconnect::{db, retrying};
use crate::recorder::SKIP_STORED;
use crate::rows::{STEP_COLUMNS, StepRow};
use crate::{PgStore, prefixed, rows};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::{Postgres, QueryBuilder};
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::{StepAttempt, StepStatus};
use tasks_core::store::{
    CreateStepAttempt, Cursor, ListStepAttempts, Page, PageQuery, RecordStepAttempt, StepStore,
    StepUpdate, check,
};
use tasks_core::transition::{
    COMPLETE_STEP, CREATE_STEP, MARKABLE_STEP, RECORD_STEP, step_status_in, stored_again,
};
use uuid::Uuid;

#[async_trait]
impl StepStore for PgStore {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        check::create_step_attempt(&params)?;
        // Idempotent by the attempt's id: a second try finds the first's attempt.
        let params = &params;
        retrying(CREATE_STEP.operation, move || async move {
            let operation = CREATE_STEP.operation;
            // clock_timestamp(), not now(): attempts created in one transaction still get
            // increasing timestamps; `id` (UUIDv7) breaks any remaining tie.
            let sql = format!(
                "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             SELECT $1, $3, wr.id, $5, $6, 'running', $7, $8, now(), clock_timestamp(), now()
               FROM tasks.workflow_runs wr
              WHERE wr.namespace = $1 AND wr.id = $2 AND {fence}
             {SKIP_STORED}
          RETURNING {STEP_COLUMNS}",
                fence = CREATE_STEP.fence("wr.", "$4", "$9"),
            );
            let inserted = sqlx::query_as::<_, StepRow>(&sql)
                .bind(&*self.namespace)
                .bind(params.run_id)
                .bind(params.id)
                .bind(&params.holder.worker_id)
                .bind(&params.step_name)
                .bind(params.kind.as_str())
                .bind(&params.config)
                .bind(&params.context)
                .bind(params.holder.claim_epoch)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(operation))?;
            match inserted {
                Some(row) => row.into_step(operation),
                None => {
                    let stored = self.get_step_attempt(params.id).await?;
                    if let Some(step) = stored_again(params.run_id, stored, false)? {
                        return Ok(step);
                    }
                    let current = self.fetch_run(params.run_id, operation).await?;
                    Err(CREATE_STEP.miss(params.run_id, Some(&params.holder), current.as_ref()))
                }
            }
        })
        .await
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        retrying(Operation::GetStepAttempt, move || async move {
            const OPERATION: Operation = Operation::GetStepAttempt;
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM tasks.step_attempts WHERE namespace = $1 AND id = $2"
            );
            sqlx::query_as::<_, StepRow>(&sql)
                .bind(&*self.namespace)
                .bind(step_attempt_id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(OPERATION))?
                .map(|row| row.into_step(OPERATION))
                .transpose()
        })
        .await
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        check::list_step_attempts(&self.namespace, &params)?;
        let params = &params;
        retrying(Operation::ListStepAttempts, move || async move {
            const OPERATION: Operation = Operation::ListStepAttempts;
            let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
            let mut query = QueryBuilder::<Postgres>::new(format!(
                "SELECT {STEP_COLUMNS} FROM tasks.step_attempts WHERE namespace = "
            ));
            query.push_bind(&*self.namespace);
            query
                .push(" AND workflow_run_id = ")
                .push_bind(params.workflow_run_id);
            if let Some(cursor) = page.cursor {
                query.push(format_args!(
                    " AND (created_at, id) {} (",
                    page.cursor_operator()
                ));
                query
                    .push_bind(cursor.created_at())
                    .push(", ")
                    .push_bind(cursor.id())
                    .push(")");
            }
            let direction = page.sql_direction();
            query.push(format_args!(
                " ORDER BY created_at {direction}, id {direction} LIMIT "
            ));
            query.push_bind(i64::from(page.limit) + 1);
            let rows = query
                .build()
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            let steps = rows::steps(&rows, OPERATION)?;
            Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
        })
        .await
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        retrying(Operation::StepHistory, move || async move {
            const OPERATION: Operation = Operation::StepHistory;
            let sql = format!(
                "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2
              ORDER BY created_at, id"
            );
            let rows = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            rows::steps(&rows, OPERATION)
        })
        .await
    }

    // Not tried again on a broken connection: a second try after a committed first would
    // find the attempt finished and answer with a refusal.
    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        let operation = COMPLETE_STEP.operation;
        check::complete_step_attempt(holder, &output)?;
        let sql = format!(
            "UPDATE tasks.step_attempts sa
                SET status = 'completed', output = $4, finished_at = now(), updated_at = now()
               FROM tasks.workflow_runs wr
              WHERE sa.namespace = $1 AND sa.workflow_run_id = $2 AND sa.id = $3
                AND sa.status = 'running'
                AND wr.namespace = sa.namespace AND wr.id = sa.workflow_run_id AND {fence}
          RETURNING {returning}",
            fence = COMPLETE_STEP.fence("wr.", "$5", "$6"),
            returning = prefixed("sa", STEP_COLUMNS)
        );
        let updated = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(step_attempt_id)
            .bind(&output)
            .bind(&holder.worker_id)
            .bind(holder.claim_epoch)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        if let Some(row) = updated {
            return Ok(StepUpdate::Recorded(row.into_step(operation)?));
        }
        let marked = |mark: StepStatus| async move {
            let sql = format!(
                "UPDATE tasks.step_attempts SET status = $4, updated_at = now()
                  WHERE namespace = $1 AND workflow_run_id = $2 AND id = $3 AND {}",
                step_status_in("", MARKABLE_STEP)
            );
            let marked = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .bind(step_attempt_id)
                .bind(mark.as_str())
                .execute(&self.pool)
                .await
                .map_err(db(operation))?;
            Ok(marked.rows_affected() > 0)
        };
        self.step_refused(
            &COMPLETE_STEP,
            run_id,
            Some(step_attempt_id),
            holder,
            marked,
        )
        .await
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        check::record_step_attempt(&params)?;
        // Idempotent by the attempt's id: a second try answers with the stored attempt.
        let params = &params;
        retrying(RECORD_STEP.operation, move || async move {
            let params = params.clone();
            let operation = RECORD_STEP.operation;
            // The common case goes through the shared recorder: one statement (and commit) for
            // every step of every run that finished meanwhile.
            let params = match self.recorder.record(&self.namespace, params).await? {
                Ok(attempt) => return Ok(StepUpdate::Recorded(attempt)),
                Err(refused) => refused,
            };
            // The fence refused it: try once more on the single-row path (the run may have
            // been changed by its own heartbeat), then find out why.
            let elapsed = i64::try_from(params.elapsed.as_micros()).unwrap_or(i64::MAX);
            let sql = format!(
                "INSERT INTO tasks.step_attempts
                     (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                      args, started_at, finished_at, created_at, updated_at)
                 SELECT $1, $3, wr.id, $5, $6, $7, $8, $9, $10, $12,
                        clock_timestamp() - $11 * INTERVAL '1 microsecond',
                        clock_timestamp(), clock_timestamp(), clock_timestamp()
                   FROM tasks.workflow_runs wr
                  WHERE wr.namespace = $1 AND wr.id = $2 AND {fence}
                 {SKIP_STORED}
              RETURNING {STEP_COLUMNS}",
                fence = RECORD_STEP.fence("wr.", "$4", "$13"),
            );
            let inserted = sqlx::query_as::<_, StepRow>(&sql)
                .bind(&*self.namespace)
                .bind(params.run_id)
                .bind(params.id)
                .bind(&params.holder.worker_id)
                .bind(&params.step_name)
                .bind(params.kind.as_str())
                .bind(params.status.as_str())
                .bind(&params.config)
                .bind(&params.output)
                .bind(&params.error)
                .bind(elapsed)
                .bind(&params.args)
                .bind(params.holder.claim_epoch)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(operation))?;
            if let Some(row) = inserted {
                return Ok(StepUpdate::Recorded(row.into_step(operation)?));
            }
            let stored = self.get_step_attempt(params.id).await?;
            if let Some(step) = stored_again(params.run_id, stored, true)? {
                return Ok(StepUpdate::Recorded(step));
            }
            let params = &params;
            let trace = |mark: StepStatus| async move {
                let sql = format!(
                    "INSERT INTO tasks.step_attempts
                         (namespace, id, workflow_run_id, step_name, kind, status, config, args,
                          started_at, created_at, updated_at)
                     VALUES ($1, $3, $2, $4, $5, $6, $7, $9,
                             clock_timestamp() - $8 * INTERVAL '1 microsecond',
                             clock_timestamp(), clock_timestamp())
                     {SKIP_STORED}"
                );
                sqlx::query(&sql)
                    .bind(&*self.namespace)
                    .bind(params.run_id)
                    .bind(params.id)
                    .bind(&params.step_name)
                    .bind(params.kind.as_str())
                    .bind(mark.as_str())
                    .bind(&params.config)
                    .bind(elapsed)
                    .bind(&params.args)
                    .execute(&self.pool)
                    .await
                    .map_err(db(operation))?;
                Ok(true)
            };
            self.step_refused(&RECORD_STEP, params.run_id, None, &params.holder, trace)
                .await
        })
        .await
    }
}
