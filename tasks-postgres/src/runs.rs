//! Runs as records on Postgres: the SQL of [`RunStore`].

use crate::reconnect::{db, retrying};
use crate::rows::{RUN_COLUMNS, RunRow};
use crate::{PgStore, millis, rows};
use async_trait::async_trait;
use sqlx::{Postgres, QueryBuilder};
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::{RunStatus, WorkflowRun};
use tasks_core::store::{
    CreateRun, CreatedRun, Cursor, ListRuns, Notification, Page, PageQuery, RunStore, check,
};
use tasks_core::transition::{CREATED, status_in};
use uuid::Uuid;

#[async_trait]
impl RunStore for PgStore {
    async fn create_or_get_run(&self, params: CreateRun) -> StoreResult<CreatedRun> {
        check::create_run(&self.namespace, &params)?;
        if params.idempotency_key.is_some() {
            // A second try finds the first's run by its key, if the first committed.
            retrying(Operation::CreateRun, || self.create_run_once(&params)).await
        } else {
            // A second try would create a second run when the first committed before its
            // answer was lost.
            self.create_run_once(&params).await
        }
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        self.fetch_run(run_id, Operation::GetRun).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        check::list_runs(&self.namespace, &params)?;
        let params = &params;
        retrying(Operation::ListRuns, move || async move {
            const OPERATION: Operation = Operation::ListRuns;
            let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
            let mut query = QueryBuilder::<Postgres>::new(format!(
                "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs WHERE namespace = "
            ));
            query.push_bind(&*self.namespace);
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
            if !params.statuses.is_empty() {
                let statuses: Vec<&str> = params.statuses.iter().map(|s| s.as_str()).collect();
                query
                    .push(" AND status = ANY(")
                    .push_bind(statuses)
                    .push(")");
            }
            if let Some(name) = &params.workflow_name {
                query.push(" AND workflow_name = ").push_bind(name);
            }
            if let Some(parent) = params.parent_run_id {
                query.push(" AND parent_run_id = ").push_bind(parent);
            }
            if let Some(version) = &params.version {
                query.push(" AND version = ").push_bind(version);
            }
            if let Some(queue) = &params.queue {
                query.push(" AND queue = ").push_bind(queue);
            }
            if let Some(key) = &params.concurrency_key {
                query.push(" AND concurrency_key = ").push_bind(key);
            }
            if let Some(search) = &params.search {
                query.push(" AND (idempotency_key = ").push_bind(search);
                if let Some(id) = params.search_id() {
                    query.push(" OR id = ").push_bind(id);
                }
                query.push(")");
            }
            if let Some(after) = params.created_after {
                query.push(" AND created_at >= ").push_bind(after);
            }
            if let Some(before) = params.created_before {
                query.push(" AND created_at <= ").push_bind(before);
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
            let runs = rows::runs(&rows, OPERATION)?;
            Ok(page.finish(runs, |run| Cursor::new(run.created_at, run.id)))
        })
        .await
    }

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        retrying(Operation::CountRuns, move || async move {
            let sql = format!(
                "SELECT status, count(*) FROM tasks.workflow_runs
                  WHERE namespace = $1 AND {} GROUP BY status",
                status_in("", statuses)
            );
            let rows: Vec<(String, i64)> = sqlx::query_as(&sql)
                .bind(&*self.namespace)
                .fetch_all(&self.pool)
                .await
                .map_err(db(Operation::CountRuns))?;
            Ok(tasks_core::store::counts_in_order(statuses, rows))
        })
        .await
    }
}

impl PgStore {
    /// One try of [`RunStore::create_run`] (of checked `params`).
    async fn create_run_once(&self, params: &CreateRun) -> StoreResult<CreatedRun> {
        const OPERATION: Operation = Operation::CreateRun;
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        // The holder found by a refused insert can lose the key before it is read (its scope
        // lapsed and another start released it): then the insert is tried again.
        let mut tries = 0;
        loop {
            tries += 1;
            let inserted = insert_run(&mut *conn, &self.namespace, params).await?;
            let Some(row) = inserted else {
                // Lost the idempotency race (or a plain repeat): hand back the first run.
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                      WHERE namespace = $1 AND workflow_name = $2 AND idempotency_key = $3"
                );
                let holder = sqlx::query_as::<_, RunRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.workflow_name)
                    .bind(&params.idempotency_key)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(db(OPERATION))?;
                match holder {
                    Some(holder) => {
                        conn.commit().await.map_err(db(OPERATION))?;
                        return Ok(CreatedRun {
                            run: holder.into_run(OPERATION)?,
                            created: false,
                        });
                    }
                    None if tries < 3 => continue,
                    // Three lapses in a row during one start: give up as a database error.
                    None => return Err(db(OPERATION)(sqlx::Error::RowNotFound)),
                }
            };
            {
                let run = row.into_run(OPERATION)?;
                // The connection goes back to the pool first: the wake-up takes one of its
                // own, and a small pool must not wait on itself.
                conn.commit().await.map_err(db(OPERATION))?;
                // After the insert committed: a NOTIFY in the insert's own transaction would
                // serialize every start on Postgres's notify queue lock at its commit.
                let wake_up = Notification::RunAvailable {
                    namespace: run.namespace.clone(),
                };
                self.notify_now(&[wake_up]).await;
                return Ok(CreatedRun { run, created: true });
            }
        }
    }
}

/// Inserts a pending run (the statement of [`RunStore::create_run`]) on `conn`: `None` when
/// a run holds its idempotency key already. A key whose holder's scope has lapsed is
/// released first (see [`tasks_core::idempotency`]). Announces nothing.
pub(crate) async fn insert_run<C>(
    conn: &mut C,
    namespace: &str,
    params: &CreateRun,
) -> StoreResult<Option<RunRow>>
where
    for<'c> &'c mut C: sqlx::Executor<'c, Database = Postgres>,
{
    const OPERATION: Operation = Operation::CreateRun;
    let config = params.stored_config()?;
    if let Some(key) = &params.idempotency_key {
        let release =
            tasks_core::idempotency::release_sql("tasks.workflow_runs", "$1", "$2", "$3", "now()");
        sqlx::query(&release)
            .bind(namespace)
            .bind(&params.workflow_name)
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(db(OPERATION))?;
    }
    let (scope, ttl) = params.stored_scope();
    // A run with a concurrency key brings its key's row (see the claim) in the same
    // statement, so a claim that sees the run sees the row.
    let key_row = match params.concurrency {
        Some(_) => {
            "WITH key_row AS (
                INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
                VALUES ($1, $13) ON CONFLICT DO NOTHING
             ) "
        }
        None => "",
    };
    let sql = format!(
        "{key_row}INSERT INTO tasks.workflow_runs
             (namespace, id, workflow_name, version, status, idempotency_key, config, context,
              input, attempts, available_at, deadline_at, created_at, updated_at,
              priority, concurrency_key, concurrency_limit,
              idempotency_scope, idempotency_expires_at, traceparent, tracestate, queue)
         VALUES ($1, $2, $3, $4, '{created}', $5, $6, $7, $8, 0,
                 COALESCE($9, now() + $11 * INTERVAL '1 millisecond', now()), $10, now(), now(),
                 $12, $13, $14, $15, now() + $16 * INTERVAL '1 millisecond', $17, $18, $19)
         ON CONFLICT (namespace, workflow_name, idempotency_key) WHERE idempotency_key IS NOT NULL
         DO NOTHING
         RETURNING {RUN_COLUMNS}",
        created = CREATED.as_str(),
    );
    sqlx::query_as::<_, RunRow>(&sql)
        .bind(namespace)
        .bind(Uuid::now_v7())
        .bind(&params.workflow_name)
        .bind(&params.version)
        .bind(&params.idempotency_key)
        .bind(&config)
        .bind(&params.context)
        .bind(&params.input)
        .bind(params.available_at)
        .bind(params.deadline_at)
        .bind(params.delay.map(millis))
        .bind(params.priority)
        .bind(params.concurrency.as_ref().map(|c| c.key().to_owned()))
        .bind(params.concurrency.as_ref().map(|c| c.stored_limit()))
        .bind(scope)
        .bind(ttl)
        .bind(params.trace_context.as_ref().map(|t| t.traceparent()))
        .bind(params.trace_context.as_ref().and_then(|t| t.tracestate()))
        .bind(params.stored_queue())
        .fetch_optional(&mut *conn)
        .await
        .map_err(db(OPERATION))
}
