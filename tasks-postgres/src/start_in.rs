//! Transactional start: a run created inside the caller's own transaction
//! (the engine's `StartBuilder::in_transaction` is built on it).

use crate::db::UnnamedConn;
use crate::notify::{CHANNEL, payload};
use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, RunRow};
use crate::runs::insert_run;
use crate::{PgStore, Pooling};
use sqlx::{PgConnection, Postgres};
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{CreateRun, Notification};

/// Creates the pending run `params` in `namespace` on `conn` (the caller's transaction) and
/// queues its wake-up there too: Postgres delivers a `NOTIFY` sent in a transaction when the
/// transaction commits, and drops it when it rolls back, so the run and its wake-up both
/// exist if and only if the caller commits. It names no origin: only the server knows when
/// the caller commits, so this process's subscribers hear it through the listener like any
/// other. With an idempotency key already taken (by a
/// committed run, or earlier in the same transaction), it creates nothing and returns the
/// first run, like [`RunStore::create_run`](tasks_core::RunStore::create_run); a racing transaction
/// holding the same key uncommitted makes this one wait for it.
///
/// `params` must have been checked ([`CreateRun::check`]) by the caller.
///
/// The statements are prepared as on a connection of a store with
/// [`Pooling::Session`]; [`PgStore::create_run_in`] follows the store's pooling.
pub async fn create_run_in(
    conn: &mut PgConnection,
    namespace: &str,
    params: &CreateRun,
) -> StoreResult<WorkflowRun> {
    create_run_on(conn, namespace, params).await
}

impl PgStore {
    /// [`create_run_in`] in the store's namespace, with statements the store's
    /// [`Pooling`] allows: with [`Pooling::Transaction`] each is prepared as the unnamed
    /// statement, so that nothing prepared outlives the caller's transaction on the
    /// pooler's server connection. Begin that transaction with [`PgStore::begin`].
    pub async fn create_run_in(
        &self,
        conn: &mut PgConnection,
        params: &CreateRun,
    ) -> StoreResult<WorkflowRun> {
        match self.pooling() {
            Pooling::Session => create_run_on(conn, &self.namespace, params).await,
            Pooling::Transaction => {
                create_run_on(&mut UnnamedConn(conn), &self.namespace, params).await
            }
        }
    }
}

async fn create_run_on<C>(
    conn: &mut C,
    namespace: &str,
    params: &CreateRun,
) -> StoreResult<WorkflowRun>
where
    for<'c> &'c mut C: sqlx::Executor<'c, Database = Postgres>,
{
    const OPERATION: Operation = Operation::CreateRun;
    match insert_run(&mut *conn, namespace, params).await? {
        Some(row) => {
            let run = row.into_run(OPERATION)?;
            let wake_up = Notification::RunAvailable {
                namespace: namespace.to_owned(),
            };
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload(&wake_up, None))
                .execute(&mut *conn)
                .await
                .map_err(db(OPERATION))?;
            Ok(run)
        }
        None => {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                  WHERE namespace = $1 AND workflow_name = $2 AND idempotency_key = $3"
            );
            sqlx::query_as::<_, RunRow>(&sql)
                .bind(namespace)
                .bind(&params.workflow_name)
                .bind(&params.idempotency_key)
                .fetch_one(&mut *conn)
                .await
                .map_err(db(OPERATION))?
                .into_run(OPERATION)
        }
    }
}
