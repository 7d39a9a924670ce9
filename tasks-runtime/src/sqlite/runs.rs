//! Runs on SQLite: creation, listing, claims and every fenced run transition.
//!
//! Each transition is one `UPDATE ... WHERE <expected status and lease holder> RETURNING`
//! inside a `BEGIN IMMEDIATE` transaction; when it matches no row, the run is read in the
//! same transaction to explain why.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite};
use uuid::Uuid;

use super::retry::decide;
use super::rows::{self, RunRow, RUN_COLUMNS};
use super::{fetch_run, miss, SqliteStore, Write};
use crate::error::{db, StoreError, StoreResult};
use crate::model::{RunStatus, WorkflowRun};
use crate::store::{CreateRun, Cursor, FailRun, ListRuns, Notification, Page, PageQuery};

/// A query returning runs, with its arguments.
type RunQuery<'q> = sqlx::query::QueryAs<'q, Sqlite, RunRow, sqlx::sqlite::SqliteArguments<'q>>;

/// The error a claim records on runs whose deadline passed (as the Postgres store does).
fn deadline_error() -> Value {
    serde_json::json!({
        "message": "Workflow run deadline exceeded",
        "kind": "deadline",
        "retryable": false,
    })
}

impl SqliteStore {
    /// Runs a fenced `UPDATE ... RETURNING` of one run, prepared by `query` on the write
    /// transaction; on a miss, the run as it is now.
    async fn transition<'q>(
        &self,
        mut write: Write<'_>,
        run_id: Uuid,
        query: RunQuery<'q>,
    ) -> StoreResult<Result<WorkflowRun, Option<WorkflowRun>>> {
        let operation = write.operation;
        let updated = query
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
        let outcome = match updated {
            Some(row) => Ok(row.into_run(operation)?),
            None => {
                tracing::debug!(%run_id, operation, "fenced update matched no run");
                Err(fetch_run(write.conn(), &self.namespace, run_id, operation).await?)
            }
        };
        write.commit().await?;
        Ok(outcome)
    }

    pub(super) async fn create_run_impl(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "creating a workflow run";
        let config = params.stored_config()?;
        let available_at = rows::ts_opt(params.available_at)?;
        let deadline_at = rows::ts_opt(params.deadline_at)?;

        let mut write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "INSERT INTO tasks_workflow_runs
                 (namespace, id, workflow_name, version, status, idempotency_key, config, context,
                  input, attempts, available_at, deadline_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?7, ?8, 0, COALESCE(?9, ?11), ?10, ?11, ?11)
             ON CONFLICT (namespace, workflow_name, idempotency_key)
                 WHERE idempotency_key IS NOT NULL
             DO NOTHING
             RETURNING {RUN_COLUMNS}"
        );
        let now = write.now();
        let available_at = match (available_at, params.delay) {
            (None, Some(delay)) => Some(write.now_plus(delay)?),
            (available_at, _) => available_at,
        };
        let inserted = sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(Uuid::now_v7()))
            .bind(&params.workflow_name)
            .bind(&params.version)
            .bind(&params.idempotency_key)
            .bind(rows::json(&config))
            .bind(rows::json_opt(params.context.as_ref()))
            .bind(rows::json_opt(params.input.as_ref()))
            .bind(available_at)
            .bind(deadline_at)
            .bind(now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))?;
        let (row, created) = match inserted {
            Some(row) => (row, true),
            None => {
                // A repeat of an idempotent create: hand back the first run.
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks_workflow_runs
                      WHERE namespace = ?1 AND workflow_name = ?2 AND idempotency_key = ?3"
                );
                let row = sqlx::query_as::<_, RunRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.workflow_name)
                    .bind(&params.idempotency_key)
                    .fetch_one(write.conn())
                    .await
                    .map_err(db(OPERATION))?;
                (row, false)
            }
        };
        write.commit().await?;
        let run = row.into_run(OPERATION)?;
        if created {
            self.notify(Notification::RunAvailable {
                namespace: String::new(),
            });
        }
        Ok(run)
    }

    pub(super) async fn list_runs_impl(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        const OPERATION: &str = "listing workflow runs";
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {RUN_COLUMNS} FROM tasks_workflow_runs WHERE namespace = "
        ));
        query.push_bind(self.namespace.to_string());
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
        if !params.statuses.is_empty() {
            query.push(" AND status IN (");
            let mut statuses = query.separated(", ");
            for status in &params.statuses {
                statuses.push_bind(status.as_str());
            }
            query.push(")");
        }
        if let Some(name) = params.workflow_name {
            query.push(" AND workflow_name = ").push_bind(name);
        }
        if let Some(after) = params.created_after {
            query
                .push(" AND created_at >= ")
                .push_bind(rows::ts_bound(after));
        }
        if let Some(before) = params.created_before {
            query
                .push(" AND created_at <= ")
                .push_bind(rows::ts_bound(before));
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build_query_as::<RunRow>()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let runs = rows::runs(rows, OPERATION)?;
        Ok(page.finish(runs, |run| Cursor::new(run.created_at, run.id)))
    }

    pub(super) async fn claim_runs_impl(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<WorkflowRun>> {
        const OPERATION: &str = "claiming workflow runs";
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let lease_end = write.now_plus(lease)?;
        sqlx::query(
            "UPDATE tasks_workflow_runs
                SET status = 'failed', error = ?3, worker_id = NULL, available_at = NULL,
                    finished_at = ?2, updated_at = ?2
              WHERE namespace = ?1 AND status IN ('pending', 'running', 'sleeping')
                AND deadline_at IS NOT NULL AND deadline_at <= ?2",
        )
        .bind(&*self.namespace)
        .bind(&now)
        .bind(rows::json(&deadline_error()))
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'running', worker_id = ?3,
                    -- Waking from a durable sleep continues the same attempt.
                    attempts = attempts + CASE WHEN status = 'sleeping' THEN 0 ELSE 1 END,
                    available_at = ?4, started_at = COALESCE(started_at, ?2), updated_at = ?2
              WHERE namespace = ?1 AND id IN (
                    SELECT id FROM tasks_workflow_runs
                     WHERE namespace = ?1 AND status IN ('pending', 'running', 'sleeping')
                       AND available_at <= ?2
                       AND (deadline_at IS NULL OR deadline_at > ?2)
                     ORDER BY CASE WHEN status = 'pending' THEN 0 ELSE 1 END, available_at,
                              created_at
                     LIMIT ?5)
          RETURNING {RUN_COLUMNS}"
        );
        let claimed = sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(&now)
            .bind(worker_id)
            .bind(lease_end)
            .bind(i64::from(limit))
            .fetch_all(write.conn())
            .await
            .map_err(db(OPERATION))?;
        write.commit().await?;
        let mut runs = rows::runs(claimed, OPERATION)?;
        // Oldest first, so callers start work in the order it was queued.
        runs.sort_by_key(|run| (run.created_at, run.id));
        Ok(runs)
    }

    pub(super) async fn extend_lease_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "extending a lease";
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs SET available_at = ?5, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND worker_id = ?3
          RETURNING {RUN_COLUMNS}"
        );
        let (now, lease_end) = (write.now(), write.now_plus(lease)?);
        let query = self.fenced(&sql, run_id, worker_id, now).bind(lease_end);
        self.transition(write, run_id, query)
            .await?
            .map_err(|current| miss(run_id, current, Some(worker_id), OPERATION))
    }

    pub(super) async fn sleep_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "sleeping a workflow run";
        let until = rows::ts(until)?;
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'sleeping', available_at = ?5, worker_id = NULL, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND worker_id = ?3
          RETURNING {RUN_COLUMNS}"
        );
        let query = self
            .fenced(&sql, run_id, worker_id, write.now())
            .bind(until);
        // No wake-up: the run is not available before `until`.
        self.transition(write, run_id, query)
            .await?
            .map_err(|current| miss(run_id, current, Some(worker_id), OPERATION))
    }

    pub(super) async fn complete_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "completing a workflow run";
        let write = self.begin_write(OPERATION).await?;
        let sql = complete_sql();
        let query = self
            .fenced(&sql, run_id, worker_id, write.now())
            .bind(rows::json(&output));
        let run = self
            .transition(write, run_id, query)
            .await?
            .map_err(|current| miss(run_id, current, Some(worker_id), OPERATION))?;
        self.notify(Notification::RunFinished {
            namespace: String::new(),
            run_id,
        });
        Ok(run)
    }

    pub(super) async fn fail_run_impl(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "failing a workflow run";
        let (run_id, worker_id) = (params.run_id, params.worker_id.as_str());
        let mut write = self.begin_write(OPERATION).await?;
        let current = fetch_run(write.conn(), &self.namespace, run_id, OPERATION).await?;
        let run = match current {
            Some(run)
                if run.status == RunStatus::Running
                    && run.worker_id.as_deref() == Some(worker_id) =>
            {
                run
            }
            other => {
                write.commit().await?;
                return Err(miss(run_id, other, Some(worker_id), OPERATION));
            }
        };
        let decision = decide(
            &run.config,
            run.attempts,
            run.deadline_at,
            write.now,
            params.force,
            params.custom_delay,
        )?;
        let retry_at = if decision.give_up {
            None
        } else {
            let at = write.now.checked_add_signed(decision.wait).ok_or_else(|| {
                StoreError::InvalidArgument("the retry delay is out of range".into())
            })?;
            Some(rows::ts(at)?)
        };
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = ?5, available_at = ?6, finished_at = ?7,
                    error = ?8, worker_id = NULL, started_at = NULL, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND worker_id = ?3
          RETURNING {RUN_COLUMNS}"
        );
        let now = write.now();
        let (status, finished_at) = if decision.give_up {
            (RunStatus::Failed, Some(now.clone()))
        } else {
            (RunStatus::Pending, None)
        };
        let query = self
            .fenced(&sql, run_id, worker_id, now)
            .bind(status.as_str())
            .bind(retry_at)
            .bind(finished_at)
            .bind(rows::json(&params.error));
        let run = self
            .transition(write, run_id, query)
            .await?
            .map_err(|current| miss(run_id, current, Some(worker_id), OPERATION))?;
        if run.status == RunStatus::Failed {
            self.notify(Notification::RunFinished {
                namespace: String::new(),
                run_id,
            });
        }
        Ok(run)
    }

    pub(super) async fn release_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "releasing a workflow run";
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'pending', attempts = MAX(attempts - 1, 0), worker_id = NULL,
                    available_at = ?5, error = ?6, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND worker_id = ?3
          RETURNING {RUN_COLUMNS}"
        );
        let (now, available_at) = (write.now(), write.now_plus(delay)?);
        let query = self
            .fenced(&sql, run_id, worker_id, now)
            .bind(available_at)
            .bind(rows::json(&reason));
        self.transition(write, run_id, query)
            .await?
            .map_err(|current| miss(run_id, current, Some(worker_id), OPERATION))
    }

    pub(super) async fn cancel_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "canceling a workflow run";
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'canceled', worker_id = NULL, available_at = NULL,
                    finished_at = ?3, updated_at = ?3
              WHERE namespace = ?1 AND id = ?2
                AND status IN ('pending', 'running', 'sleeping', 'paused')
          RETURNING {RUN_COLUMNS}"
        );
        let query = self.operator(&sql, run_id, write.now());
        match self.transition(write, run_id, query).await? {
            Ok(run) => {
                self.notify(Notification::RunFinished {
                    namespace: String::new(),
                    run_id,
                });
                Ok(run)
            }
            Err(Some(run)) if run.status == RunStatus::Canceled => Ok(run),
            Err(current) => Err(miss(run_id, current, None, OPERATION)),
        }
    }

    pub(super) async fn pause_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "pausing a workflow run";
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'paused', worker_id = NULL, available_at = NULL, updated_at = ?3
              WHERE namespace = ?1 AND id = ?2 AND status IN ('pending', 'running', 'sleeping')
          RETURNING {RUN_COLUMNS}"
        );
        let query = self.operator(&sql, run_id, write.now());
        match self.transition(write, run_id, query).await? {
            Ok(run) => Ok(run),
            Err(Some(run)) if run.status == RunStatus::Paused => Ok(run),
            Err(current) => Err(miss(run_id, current, None, OPERATION)),
        }
    }

    pub(super) async fn resume_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        const OPERATION: &str = "resuming a workflow run";
        let write = self.begin_write(OPERATION).await?;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET status = 'pending', available_at = ?3, updated_at = ?3
              WHERE namespace = ?1 AND id = ?2 AND status = 'paused'
          RETURNING {RUN_COLUMNS}"
        );
        let query = self.operator(&sql, run_id, write.now());
        match self.transition(write, run_id, query).await? {
            Ok(run) => {
                self.notify(Notification::RunAvailable {
                    namespace: String::new(),
                });
                Ok(run)
            }
            Err(Some(run)) if matches!(run.status, RunStatus::Pending | RunStatus::Running) => {
                Ok(run)
            }
            Err(current) => Err(miss(run_id, current, None, OPERATION)),
        }
    }

    /// A worker transition: `?1` namespace, `?2` run, `?3` worker, `?4` now; the caller binds
    /// the rest from `?5` on.
    pub(super) fn fenced<'q>(
        &self,
        sql: &'q str,
        run_id: Uuid,
        worker_id: &str,
        now: String,
    ) -> RunQuery<'q> {
        sqlx::query_as::<_, RunRow>(sql)
            .bind(self.namespace.to_string())
            .bind(rows::id(run_id))
            .bind(worker_id.to_owned())
            .bind(now)
    }

    /// An operator transition: `?1` namespace, `?2` run, `?3` now.
    fn operator<'q>(&self, sql: &'q str, run_id: Uuid, now: String) -> RunQuery<'q> {
        sqlx::query_as::<_, RunRow>(sql)
            .bind(self.namespace.to_string())
            .bind(rows::id(run_id))
            .bind(now)
    }
}

/// Completes a run fenced on it running under a worker: `?1` namespace, `?2` run, `?3`
/// worker, `?4` now, `?5` output.
pub(super) fn complete_sql() -> String {
    format!(
        "UPDATE tasks_workflow_runs
            SET status = 'completed', output = ?5, error = NULL, available_at = NULL,
                finished_at = ?4, updated_at = ?4
          WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND worker_id = ?3
      RETURNING {RUN_COLUMNS}"
    )
}
