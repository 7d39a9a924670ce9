//! Step attempts on SQLite: creation, reads, listings, and finishing an attempt (with the
//! `Interrupted` outcome when its run was paused or canceled meanwhile).

use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite};
use uuid::Uuid;

use super::rows::{self, StepRow, STEP_COLUMNS};
use super::{fetch_run, miss, SqliteStore};
use crate::error::{db, StoreError, StoreResult};
use crate::model::{RunStatus, StepAttempt, StepStatus, WorkflowRun};
use crate::store::{
    complete_separately, CreateStepAttempt, Cursor, ListStepAttempts, Notification, Page,
    PageQuery, RecordStepAttempt, StepUpdate,
};

impl SqliteStore {
    pub(super) async fn create_step_attempt_impl(
        &self,
        params: CreateStepAttempt,
    ) -> StoreResult<StepAttempt> {
        const OPERATION: &str = "creating a step attempt";
        let mut write = self.begin_write(OPERATION).await?;
        // Every attempt gets the time of its own write transaction, taken under the write
        // lock, so attempts of a run have increasing `created_at`; `id` (UUIDv7) breaks any
        // remaining tie.
        let sql = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             SELECT ?1, ?3, wr.id, ?5, ?6, 'running', ?7, ?8, ?9, ?9, ?9
               FROM tasks_workflow_runs wr
              WHERE wr.namespace = ?1 AND wr.id = ?2 AND wr.status = 'running'
                AND wr.worker_id = ?4
          RETURNING {STEP_COLUMNS}"
        );
        let now = write.now();
        let inserted = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(rows::id(Uuid::now_v7()))
            .bind(&params.worker_id)
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(rows::json(&params.config))
            .bind(rows::json_opt(params.context.as_ref()))
            .bind(now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))?;
        let outcome = match inserted {
            Some(row) => row.into_step(OPERATION),
            None => {
                let current =
                    fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await?;
                Err(miss(
                    params.run_id,
                    current,
                    Some(&params.worker_id),
                    OPERATION,
                ))
            }
        };
        write.commit().await?;
        outcome
    }

    pub(super) async fn get_step_attempt_impl(
        &self,
        step_attempt_id: Uuid,
    ) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: &str = "getting a step attempt";
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        fetch_step(&mut conn, &self.namespace, step_attempt_id, OPERATION).await
    }

    pub(super) async fn list_step_attempts_impl(
        &self,
        params: ListStepAttempts,
    ) -> StoreResult<Page<StepAttempt>> {
        const OPERATION: &str = "listing step attempts";
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts WHERE namespace = "
        ));
        query.push_bind(self.namespace.to_string());
        query
            .push(" AND workflow_run_id = ")
            .push_bind(rows::id(params.workflow_run_id));
        if let Some(cursor) = page.cursor {
            query.push(format_args!(
                " AND (created_at, id) {} (",
                page.cursor_operator()
            ));
            query
                .push_bind(rows::ts_bound(cursor.created_at))
                .push(", ")
                .push_bind(rows::id(cursor.id))
                .push(")");
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build_query_as::<StepRow>()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let steps = rows::steps(rows, OPERATION)?;
        Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
    }

    pub(super) async fn step_history_impl(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        const OPERATION: &str = "loading step history";
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2
              ORDER BY created_at, id"
        );
        let rows = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        rows::steps(rows, OPERATION)
    }

    /// Completes (`Ok(output)`) or fails (`Err(error)`) a running attempt, fenced on its run
    /// running under `worker_id`, all in one write transaction.
    pub(super) async fn record_step_attempt_impl(
        &self,
        params: RecordStepAttempt,
    ) -> StoreResult<StepUpdate> {
        const OPERATION: &str = "recording a step attempt";
        params.check_finished()?;
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let started = write.now_minus(params.elapsed)?;
        let Some(run) = fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await?
        else {
            return Err(StoreError::RunNotFound { id: params.run_id });
        };
        let owned = run.status == RunStatus::Running
            && run.worker_id.as_deref() == Some(params.worker_id.as_str());
        let interrupted = matches!(run.status, RunStatus::Paused | RunStatus::Canceled);
        if !owned && !interrupted {
            return Err(miss(
                params.run_id,
                Some(run),
                Some(&params.worker_id),
                OPERATION,
            ));
        }
        // The run is read and the attempt written under one write lock, so the fence holds.
        // An interrupted attempt is kept, marked like its run, without its result.
        let (status, output, error) = if owned {
            (
                params.status,
                params.output.as_ref().map(rows::json),
                params.error.as_ref().map(rows::json),
            )
        } else {
            let status = if run.status == RunStatus::Paused {
                StepStatus::Paused
            } else {
                StepStatus::Canceled
            };
            (status, None, None)
        };
        let finished_at = if owned { Some(now.clone()) } else { None };
        let row = self
            .insert_finished(
                write.conn(),
                &params,
                (status, output, error),
                (&started, &now, finished_at.as_deref()),
                OPERATION,
            )
            .await?;
        write.commit().await?;
        if owned {
            Ok(StepUpdate::Recorded(row.into_step(OPERATION)?))
        } else {
            Ok(StepUpdate::Interrupted {
                run_status: run.status,
            })
        }
    }

    /// Inserts a finished attempt of `params.run_id` as `status` with `output` and `error`
    /// (JSON text), started, created and finished at the given times.
    async fn insert_finished(
        &self,
        conn: &mut sqlx::SqliteConnection,
        params: &RecordStepAttempt,
        (status, output, error): (StepStatus, Option<String>, Option<String>),
        (started, now, finished_at): (&str, &str, Option<&str>),
        operation: &'static str,
    ) -> StoreResult<StepRow> {
        let sql = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                  started_at, finished_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?11, ?11)
          RETURNING {STEP_COLUMNS}"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(Uuid::now_v7()))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(status.as_str())
            .bind(rows::json(&params.config))
            .bind(output)
            .bind(error)
            .bind(started)
            .bind(now)
            .bind(finished_at)
            .fetch_one(conn)
            .await
            .map_err(db(operation))
    }

    /// The run's last attempts and its completion in one write transaction when the run is
    /// still this worker's; otherwise the separate writes, which keep and report exactly
    /// what `record_step_attempt` and `complete_run` would.
    pub(super) async fn complete_run_with_steps_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "completing a workflow run";
        RecordStepAttempt::check_last_steps(&steps, run_id, worker_id)?;
        if steps.is_empty() {
            return self.complete_run_impl(run_id, worker_id, output).await;
        }
        let mut write = self.begin_write(OPERATION).await?;
        let current = fetch_run(write.conn(), &self.namespace, run_id, OPERATION).await?;
        let owned = current.is_some_and(|run| {
            run.status == RunStatus::Running && run.worker_id.as_deref() == Some(worker_id)
        });
        if !owned {
            // Nothing written yet: give the lock back and let the single writes classify.
            drop(write);
            return complete_separately(self, run_id, worker_id, output, steps).await;
        }
        let now = write.now();
        for params in &steps {
            let started = write.now_minus(params.elapsed)?;
            let result = (
                params.status,
                params.output.as_ref().map(rows::json),
                params.error.as_ref().map(rows::json),
            );
            self.insert_finished(
                write.conn(),
                params,
                result,
                (&started, &now, Some(&now)),
                OPERATION,
            )
            .await?;
        }
        // The fence holds: the run was read above under the same write lock.
        let sql = super::runs::complete_sql();
        let run = self
            .fenced(&sql, run_id, worker_id, now)
            .bind(rows::json(&output))
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)?;
        write.commit().await?;
        self.notify(Notification::RunFinished {
            namespace: String::new(),
            run_id,
        });
        Ok(run)
    }

    pub(super) async fn finish_step(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        result: Result<Value, Value>,
    ) -> StoreResult<StepUpdate> {
        let (operation, status, output, error) = match &result {
            Ok(output) => (
                "completing a step attempt",
                StepStatus::Completed,
                Some(rows::json(output)),
                None,
            ),
            Err(error) => (
                "failing a step attempt",
                StepStatus::Failed,
                None,
                Some(rows::json(error)),
            ),
        };
        let mut write = self.begin_write(operation).await?;
        let now = write.now();
        let sql = format!(
            "UPDATE tasks_step_attempts
                SET status = ?4, output = ?5, error = ?6, finished_at = ?8, updated_at = ?8
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND id = ?3 AND status = 'running'
                AND EXISTS (SELECT 1 FROM tasks_workflow_runs wr
                             WHERE wr.namespace = ?1 AND wr.id = ?2
                               AND wr.status = 'running' AND wr.worker_id = ?7)
          RETURNING {STEP_COLUMNS}"
        );
        let updated = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(rows::id(step_attempt_id))
            .bind(status.as_str())
            .bind(output)
            .bind(error)
            .bind(worker_id)
            .bind(&now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
        if let Some(row) = updated {
            write.commit().await?;
            return Ok(StepUpdate::Recorded(row.into_step(operation)?));
        }

        // The fence missed. Paused or canceled runs interrupt the step: mark it so and
        // report the interruption. Anything else is an error the caller must see.
        let Some(run) = fetch_run(write.conn(), &self.namespace, run_id, operation).await? else {
            return Err(StoreError::RunNotFound { id: run_id });
        };
        if matches!(run.status, RunStatus::Paused | RunStatus::Canceled) {
            let marked = sqlx::query(
                "UPDATE tasks_step_attempts SET status = ?4, updated_at = ?5
                  WHERE namespace = ?1 AND workflow_run_id = ?2 AND id = ?3
                    AND status IN ('running', 'paused')",
            )
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(rows::id(step_attempt_id))
            .bind(run.status.as_str())
            .bind(&now)
            .execute(write.conn())
            .await
            .map_err(db(operation))?;
            if marked.rows_affected() > 0 {
                write.commit().await?;
                return Ok(StepUpdate::Interrupted {
                    run_status: run.status,
                });
            }
        }
        let step = fetch_step(write.conn(), &self.namespace, step_attempt_id, operation).await?;
        write.commit().await?;
        Err(match step {
            Some(step) if step.workflow_run_id == run_id && step.status != StepStatus::Running => {
                StoreError::StepAlreadyFinished {
                    id: step_attempt_id,
                    status: step.status,
                }
            }
            Some(step) if step.workflow_run_id == run_id => {
                miss(run_id, Some(run), Some(worker_id), operation)
            }
            _ => StoreError::StepNotFound {
                id: step_attempt_id,
            },
        })
    }
}

/// Reads a step attempt on `conn` (a pooled connection or a write transaction).
async fn fetch_step(
    conn: &mut sqlx::SqliteConnection,
    namespace: &str,
    step_attempt_id: Uuid,
    operation: &'static str,
) -> StoreResult<Option<StepAttempt>> {
    let sql =
        format!("SELECT {STEP_COLUMNS} FROM tasks_step_attempts WHERE namespace = ?1 AND id = ?2");
    sqlx::query_as::<_, StepRow>(&sql)
        .bind(namespace)
        .bind(rows::id(step_attempt_id))
        .fetch_optional(conn)
        .await
        .map_err(db(operation))?
        .map(|row| row.into_step(operation))
        .transpose()
}
