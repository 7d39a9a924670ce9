//! Transactional start: a run created inside the caller's own transaction
//! (the engine's `StartBuilder::in_transaction` is built on it).

use crate::notify::{CHANNEL, payload};
use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, RunRow};
use crate::runs::insert_run;
use sqlx::PgConnection;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{CreateRun, Notification};

/// Creates the pending run `params` in `namespace` on `conn` (the caller's transaction) and
/// queues its wake-up there too: Postgres delivers a `NOTIFY` sent in a transaction when the
/// transaction commits, and drops it when it rolls back, so the run and its wake-up both
/// exist if and only if the caller commits. With an idempotency key already taken (by a
/// committed run, or earlier in the same transaction), it creates nothing and returns the
/// first run, like [`RunStore::create_run`](tasks_core::RunStore::create_run); a racing transaction
/// holding the same key uncommitted makes this one wait for it.
///
/// `params` must have been checked ([`CreateRun::check`]) by the caller.
pub async fn create_run_in(
    conn: &mut PgConnection,
    namespace: &str,
    params: &CreateRun,
) -> StoreResult<WorkflowRun> {
    const OPERATION: Operation = Operation::CreateRun;
    match insert_run(&mut *conn, namespace, params).await? {
        Some(row) => {
            let run = row.into_run(OPERATION)?;
            let wake_up = Notification::RunAvailable {
                namespace: namespace.to_owned(),
            };
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload(&wake_up))
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
