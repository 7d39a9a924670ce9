//! Retention of the SQLite store: purging finished runs in batches, and the
//! lease row that gives one worker of a fleet each periodic purge.
//!
//! The policy (which statuses may be deleted) is [`PURGE`]; this module writes it in
//! SQLite's dialect.

use crate::{SqliteStore, rows};
use async_trait::async_trait;
use std::time::Duration;
use tasks_core::error::{Operation, StoreResult, db};
use tasks_core::retention::{FinishedBefore, PurgeRuns};
use tasks_core::store::{RetentionStore, check};
use tasks_core::transition::{PURGE, purgeable_family, status_in};

/// The ids of the batch, bound as one JSON array: `IN (SELECT value FROM json_each(?2))`.
const BATCH: &str = "(SELECT value FROM json_each(?2))";

#[async_trait]
impl RetentionStore for SqliteStore {
    /// [`RetentionStore::purge_runs`] in one write transaction: selects a
    /// batch of candidates, clears the links other runs keep to them, deletes their events
    /// and step attempts, then the runs, fenced by [`PURGE`]. The dependent rows are
    /// deleted explicitly rather than left to the cascading foreign keys, which SQLite
    /// enforces only on connections that turned them on (a pool the application built
    /// may not have).
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        const OPERATION: Operation = Operation::PurgeRuns;
        check::purge_runs(&self.namespace, params)?;
        let mut write = self.begin_write(OPERATION).await?;
        let cutoff = match params.finished_before {
            FinishedBefore::Instant(at) => rows::ts_bound(at),
            FinishedBefore::Age(age) => write.now_minus(age)?,
        };
        let select = format!(
            "SELECT r.id FROM tasks_workflow_runs r
              WHERE r.namespace = ?1 AND {selected} AND r.finished_at < ?2 AND {family}
              LIMIT ?3",
            selected = status_in("r.", params.selected_statuses()),
            family = purgeable_family("r.", "tasks_workflow_runs"),
        );
        let doomed: Vec<String> = sqlx::query_scalar(&select)
            .bind(&*self.namespace)
            .bind(&cutoff)
            .bind(i64::from(params.batch_size))
            .fetch_all(write.conn())
            .await
            .map_err(db(OPERATION))?;
        if doomed.is_empty() {
            return Ok(0);
        }
        let batch = serde_json::Value::from(doomed).to_string();
        let statements = [
            // Runs forked from a purged run keep `forked_from_step`, not the dangling id.
            format!(
                "UPDATE tasks_workflow_runs SET forked_from_run_id = NULL
                  WHERE namespace = ?1 AND forked_from_run_id IN {BATCH}
                    AND id NOT IN {BATCH}"
            ),
            // A step that started a purged child run.
            format!(
                "UPDATE tasks_step_attempts
                    SET child_workflow_run_namespace = NULL, child_workflow_run_id = NULL
                  WHERE child_workflow_run_namespace = ?1 AND child_workflow_run_id IN {BATCH}"
            ),
            // Child runs started by a step of a purged run (the foreign key's SET NULL).
            format!(
                "UPDATE tasks_workflow_runs
                    SET parent_step_attempt_namespace = NULL, parent_step_attempt_id = NULL
                  WHERE parent_step_attempt_namespace = ?1 AND parent_step_attempt_id IN (
                        SELECT id FROM tasks_step_attempts
                         WHERE namespace = ?1 AND workflow_run_id IN {BATCH})"
            ),
            format!("DELETE FROM tasks_events WHERE namespace = ?1 AND workflow_run_id IN {BATCH}"),
            format!(
                "DELETE FROM tasks_step_attempts WHERE namespace = ?1 AND workflow_run_id IN {BATCH}"
            ),
        ];
        for sql in &statements {
            sqlx::query(sql)
                .bind(&*self.namespace)
                .bind(&batch)
                .execute(write.conn())
                .await
                .map_err(db(OPERATION))?;
        }
        let delete = format!(
            "DELETE FROM tasks_workflow_runs WHERE namespace = ?1 AND id IN {BATCH} AND {fence}",
            fence = PURGE.fence("", "NULL", "NULL"),
        );
        let purged = sqlx::query(&delete)
            .bind(&*self.namespace)
            .bind(&batch)
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?
            .rows_affected();
        write.commit().await?;
        Ok(purged)
    }

    /// [`RetentionStore::take_retention_turn`] in one write
    /// transaction: an upsert of the namespace's lease row that only changes it when its
    /// turn is due.
    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        const OPERATION: Operation = Operation::RetentionTurn;
        check::take_retention_turn(&self.namespace, worker_id, every)?;
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let next = write.now_plus(every)?;
        let turn: Option<i64> = sqlx::query_scalar(
            "INSERT INTO tasks_retention_leases (namespace, worker_id, taken_at, next_at, turns)
             VALUES (?1, ?2, ?3, ?4, 1)
             ON CONFLICT (namespace) DO UPDATE
                SET worker_id = excluded.worker_id, taken_at = excluded.taken_at,
                    next_at = excluded.next_at, turns = tasks_retention_leases.turns + 1
              WHERE tasks_retention_leases.next_at <= ?3
          RETURNING turns",
        )
        .bind(&*self.namespace)
        .bind(worker_id)
        .bind(&now)
        .bind(&next)
        .fetch_optional(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await?;
        Ok(turn.map(|turn| turn as u64))
    }
}
