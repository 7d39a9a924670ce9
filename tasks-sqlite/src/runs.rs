//! Runs on SQLite: creation, reads, listings and counts ([`RunStore`]), and the fenced
//! transition helper every run transition goes through.
//!
//! Each transition is one `UPDATE ... WHERE <fence> RETURNING` inside a `BEGIN IMMEDIATE`
//! transaction, with the fence of its [`Transition`]; when it matches no row, the run is read
//! in the same transaction and the transition settles the miss.

use crate::rows::{RUN_COLUMNS, RunRow};
use crate::{SqliteStore, Write, fetch_run, rows};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite};
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreResult, db};
use tasks_core::model::{RunStatus, WorkflowRun};
use tasks_core::store::{
    CreateRun, CreatedRun, Cursor, ListRuns, Notification, Page, PageQuery, RunStore, check,
};
use tasks_core::transition::{
    COMPLETE, COMPLETED, CREATED, Column, JSON_COLUMNS, QUARANTINE, QUARANTINED, Transition,
    quarantine_error,
};
use uuid::Uuid;

/// A query returning runs, with its arguments.
pub(super) type RunQuery<'q> =
    sqlx::query::QueryAs<'q, Sqlite, RunRow, sqlx::sqlite::SqliteArguments<'q>>;

impl SqliteStore {
    /// Applies `transition` in its own write transaction; see [`SqliteStore::transition_in`].
    pub(super) async fn transition(
        &self,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        holder: Option<&Holder>,
        bind: impl for<'q> FnOnce(RunQuery<'q>, &Write<'_>) -> StoreResult<RunQuery<'q>>,
    ) -> StoreResult<WorkflowRun> {
        let write = self.begin_write(transition.operation).await?;
        self.transition_in(write, transition, set, run_id, holder, bind)
            .await
    }

    /// Applies `transition` to a run in the write transaction `write`, and commits:
    /// `UPDATE .. SET {set}, updated_at = ?4 WHERE <run> AND <fence> RETURNING <run>`, with
    /// `?1` the namespace, `?2` the run, `?3` and `?5` the holder's worker id and claim epoch
    /// (referenced by the fence of a leased transition only) and `?4` the transaction's time;
    /// `bind` binds the `SET` list's values from `?6` on. A miss is settled by the transition on the run as read in the same
    /// transaction; a change is announced.
    pub(super) async fn transition_in(
        &self,
        mut write: Write<'_>,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        holder: Option<&Holder>,
        bind: impl for<'q> FnOnce(RunQuery<'q>, &Write<'_>) -> StoreResult<RunQuery<'q>>,
    ) -> StoreResult<WorkflowRun> {
        let operation = transition.operation;
        let sql = format!(
            "UPDATE tasks_workflow_runs SET {set}, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND {fence}
          RETURNING {RUN_COLUMNS}",
            fence = transition.fence("", "?3", "?5"),
        );
        let query = sqlx::query_as::<_, RunRow>(&sql)
            .bind(self.namespace.to_string())
            .bind(rows::id(run_id))
            .bind(holder.map(|holder| holder.worker_id.clone()))
            .bind(write.now())
            .bind(holder.map(|holder| holder.claim_epoch));
        let updated = bind(query, &write)?
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
        let mut family = Vec::new();
        let outcome = match updated {
            Some(row) => {
                let run = row.into_run(operation)?;
                // A finished child wakes its parent, a cancel cascades: in this transaction.
                if transition.wakes_parent() {
                    let cascade = operation == Operation::CancelRun;
                    family = self
                        .after_finish(&mut write, &run, cascade, operation)
                        .await?;
                }
                Ok(run)
            }
            None => {
                tracing::debug!(%run_id, holder = ?holder, %operation, "fenced update matched no run");
                Err(fetch_run(write.conn(), &self.namespace, run_id, operation).await?)
            }
        };
        write.commit().await?;
        match outcome {
            Ok(run) => {
                for notification in transition.announcements(&run) {
                    self.notify(notification);
                }
                for notification in family {
                    self.notify(notification);
                }
                Ok(run)
            }
            Err(current) => transition.settle(run_id, holder, current),
        }
    }

    /// Inserts a pending run in `write` (the statement of [`RunStore::create_run`]): `None` when
    /// a run with its idempotency key exists already. Announces nothing.
    ///
    /// [`RunStore::create_run`]: tasks_core::RunStore::create_run
    pub(super) async fn insert_run(
        &self,
        write: &mut Write<'_>,
        params: &CreateRun,
    ) -> StoreResult<Option<RunRow>> {
        const OPERATION: Operation = Operation::CreateRun;
        let config = params.stored_config()?;
        let available_at = rows::ts_opt(params.available_at)?;
        let deadline_at = rows::ts_opt(params.deadline_at)?;
        let now = write.now();
        if let Some(key) = &params.idempotency_key {
            let release =
                tasks_core::idempotency::release_sql("tasks_workflow_runs", "?1", "?2", "?3", "?4");
            sqlx::query(&release)
                .bind(&*self.namespace)
                .bind(&params.workflow_name)
                .bind(key)
                .bind(&now)
                .execute(write.conn())
                .await
                .map_err(db(OPERATION))?;
        }
        let (scope, ttl) = params.stored_scope();
        let expires_at = match ttl {
            Some(ms) => Some(write.now_plus(std::time::Duration::from_millis(
                u64::try_from(ms).unwrap_or(0),
            ))?),
            None => None,
        };
        let sql = format!(
            "INSERT INTO tasks_workflow_runs
                 (namespace, id, workflow_name, version, status, idempotency_key, config, context,
                  input, attempts, available_at, deadline_at, created_at, updated_at,
                  priority, concurrency_key, concurrency_limit,
                  idempotency_scope, idempotency_expires_at, traceparent, tracestate, queue)
             VALUES (?1, ?2, ?3, ?4, '{created}', ?5, ?6, ?7, ?8, 0, COALESCE(?9, ?11), ?10, ?11, ?11,
                     ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)
             ON CONFLICT (namespace, workflow_name, idempotency_key)
                 WHERE idempotency_key IS NOT NULL
             DO NOTHING
             RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let available_at = match (available_at, params.delay) {
            (None, Some(delay)) => Some(write.now_plus(delay)?),
            (available_at, _) => available_at,
        };
        sqlx::query_as::<_, RunRow>(&sql)
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
            .bind(params.priority)
            .bind(params.concurrency.as_ref().map(|c| c.key().to_owned()))
            .bind(params.concurrency.as_ref().map(|c| c.stored_limit()))
            .bind(scope)
            .bind(expires_at)
            .bind(params.trace_context.as_ref().map(|t| t.traceparent()))
            .bind(params.trace_context.as_ref().and_then(|t| t.tracestate()))
            .bind(params.stored_queue())
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))
    }

    /// Fails for good run `run_id`, just claimed by `worker_id` in `write`, whose row did
    /// not decode ([`QUARANTINE`]): its undecodable JSON `columns` (with their stored text)
    /// are moved into the error record and reset, so the row reads again. Returns the run's
    /// parent, which the caller wakes in the same transaction like after every finish
    /// ([`Transition::wakes_parent`]).
    pub(crate) async fn quarantine(
        &self,
        write: &mut Write<'_>,
        run_id: Uuid,
        holder: &Holder,
        reason: &str,
        columns: &[(&'static str, String)],
    ) -> StoreResult<Option<Uuid>> {
        tracing::error!(run.id = %run_id, reason, "a claimed run's stored row cannot be decoded; failing it");
        let mut error = quarantine_error(run_id, reason);
        let moved: serde_json::Map<String, Value> = columns
            .iter()
            .map(|(column, text)| ((*column).to_owned(), Value::String(text.clone())))
            .collect();
        error["quarantined"] = Value::Object(moved);
        let mut set = QUARANTINED.set_sql("?4", &[(Column::Error, "?5")]) + ", updated_at = ?4";
        for (column, empty) in JSON_COLUMNS {
            if *column != "error" && columns.iter().any(|(bad, _)| bad == column) {
                set.push_str(&format!(", {column} = {empty}"));
            }
        }
        let sql = format!(
            "UPDATE tasks_workflow_runs SET {set}
              WHERE namespace = ?1 AND id = ?2 AND {fence}
          RETURNING parent_run_id",
            fence = QUARANTINE.fence("", "?3", "?6"),
        );
        let parent: Option<Option<String>> = sqlx::query_scalar(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(&holder.worker_id)
            .bind(write.now())
            .bind(rows::json(&error))
            .bind(holder.claim_epoch)
            .fetch_optional(write.conn())
            .await
            .map_err(db(QUARANTINE.operation))?;
        match parent.flatten() {
            Some(parent) if QUARANTINE.wakes_parent() => {
                Ok(Some(rows::parse_id(&parent, QUARANTINE.operation)?))
            }
            _ => Ok(None),
        }
    }

    /// Completes the run in `write` (see [`SqliteStore::transition_in`]).
    pub(super) async fn complete_in(
        &self,
        write: Write<'_>,
        run_id: Uuid,
        holder: &Holder,
        output: &Value,
    ) -> StoreResult<WorkflowRun> {
        let set = COMPLETED.set_sql("?4", &[(Column::Output, "?6")]);
        let output = rows::json(output);
        self.transition_in(write, &COMPLETE, &set, run_id, Some(holder), |q, _| {
            Ok(q.bind(output))
        })
        .await
    }
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_or_get_run(&self, params: CreateRun) -> StoreResult<CreatedRun> {
        check::create_run(&self.namespace, &params)?;
        const OPERATION: Operation = Operation::CreateRun;
        let mut write = self.begin_write(OPERATION).await?;
        let (row, created) = match self.insert_run(&mut write, &params).await? {
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
                namespace: run.namespace.clone(),
            });
        }
        Ok(CreatedRun { run, created })
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        const OPERATION: Operation = Operation::GetRun;
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        fetch_run(&mut conn, &self.namespace, run_id, OPERATION).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        check::list_runs(&self.namespace, &params)?;
        const OPERATION: Operation = Operation::ListRuns;
        let search_id = params.search_id();
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
                .push_bind(rows::ts_bound(cursor.created_at()))
                .push(", ")
                .push_bind(rows::id(cursor.id()))
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
        if let Some(parent) = params.parent_run_id {
            query
                .push(" AND parent_run_id = ")
                .push_bind(rows::id(parent));
        }
        if let Some(version) = params.version {
            query.push(" AND version = ").push_bind(version);
        }
        if let Some(queue) = params.queue {
            query.push(" AND queue = ").push_bind(queue);
        }
        if let Some(key) = params.concurrency_key {
            query.push(" AND concurrency_key = ").push_bind(key);
        }
        if let Some(search) = params.search {
            query.push(" AND (idempotency_key = ").push_bind(search);
            if let Some(id) = search_id {
                query.push(" OR id = ").push_bind(rows::id(id));
            }
            query.push(")");
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

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT status, count(*) FROM tasks_workflow_runs
              WHERE namespace = ? AND {} GROUP BY status",
            tasks_core::transition::status_in("", statuses)
        );
        let rows: Vec<(String, i64)> = sqlx::query_as(&sql)
            .bind(&*self.namespace)
            .fetch_all(&self.pool)
            .await
            .map_err(db(Operation::CountRuns))?;
        Ok(tasks_core::store::counts_in_order(statuses, rows))
    }
}
