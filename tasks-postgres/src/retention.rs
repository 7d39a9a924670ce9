//! Retention of the Postgres store: purging finished runs in batches, and the
//! lease row that gives one worker of a fleet each periodic purge.
//!
//! The policy (which statuses may be deleted) is [`PURGE`]; this module writes it in
//! Postgres' dialect.

use crate::reconnect::db;
use crate::{PgStore, millis};
use async_trait::async_trait;
use sqlx::Row as _;
use std::time::Duration;
use tasks_core::error::{Operation, StoreResult};
use tasks_core::retention::{FinishedBefore, PurgeRuns};
use tasks_core::store::{RetentionStore, check};
use tasks_core::transition::{PURGE, purgeable_family, status_in};
use uuid::Uuid;

#[async_trait]
impl RetentionStore for PgStore {
    /// [`RetentionStore::purge_runs`]: one transaction of two statements.
    ///
    /// The first locks up to a batch of candidates (`FOR UPDATE SKIP LOCKED`: rows a retry,
    /// a fork or another purge holds are left for a later batch, nobody waits) and deletes
    /// them, fenced by [`PURGE`]; their step attempts and events go by the cascading
    /// foreign keys, and the parent step of child runs is set to NULL by theirs. The second
    /// clears the links that are not foreign keys (`forked_from_run_id`, a step's child
    /// run). It is a statement of its own so that it reads a snapshot taken after the
    /// locks: a fork of a deleted run that committed while the first statement waited is
    /// seen and unlinked, and a fork that starts later waits on the lock of its source
    /// (`FOR KEY SHARE`) and then finds it gone.
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        const OPERATION: Operation = Operation::PurgeRuns;
        check::purge_runs(&self.namespace, params)?;
        let (instant, age) = match params.finished_before {
            FinishedBefore::Instant(at) => (Some(at), 0),
            FinishedBefore::Age(age) => (None, millis(age)),
        };
        let delete = format!(
            "WITH doomed AS (
                 SELECT r.id FROM tasks.workflow_runs r
                  WHERE r.namespace = $1 AND {selected}
                    AND r.finished_at < COALESCE($2, now() - $3 * INTERVAL '1 millisecond')
                    AND {family}
                  LIMIT $4
                    FOR UPDATE SKIP LOCKED
             )
             DELETE FROM tasks.workflow_runs r USING doomed d
              WHERE r.namespace = $1 AND r.id = d.id AND {fence}
          RETURNING r.id",
            selected = status_in("r.", params.selected_statuses()),
            family = purgeable_family("r.", "tasks.workflow_runs"),
            fence = PURGE.fence("r.", "NULL", "NULL"),
        );
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let purged: Vec<Uuid> = sqlx::query(&delete)
            .bind(&*self.namespace)
            .bind(instant)
            .bind(age)
            .bind(i64::from(params.batch_size))
            .fetch_all(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(db(OPERATION))?;
        if !purged.is_empty() {
            sqlx::query(
                "WITH forks AS (
                     UPDATE tasks.workflow_runs SET forked_from_run_id = NULL
                      WHERE namespace = $1 AND forked_from_run_id IS NOT NULL
                        AND forked_from_run_id = ANY($2)
                 )
                 UPDATE tasks.step_attempts
                    SET child_workflow_run_namespace = NULL, child_workflow_run_id = NULL
                  WHERE child_workflow_run_namespace = $1 AND child_workflow_run_id IS NOT NULL
                    AND child_workflow_run_id = ANY($2)",
            )
            .bind(&*self.namespace)
            .bind(&purged)
            .execute(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        }
        tx.commit().await.map_err(db(OPERATION))?;
        if !purged.is_empty() {
            tracing::debug!(purged = purged.len(), namespace = %self.namespace, "purged finished runs");
        }
        Ok(purged.len() as u64)
    }

    /// [`RetentionStore::take_retention_turn`] in one statement:
    /// an upsert of the namespace's lease row that only changes it when its turn is due.
    /// Concurrent callers serialize on the row; the later ones see the moved `next_at` and
    /// change nothing.
    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        const OPERATION: Operation = Operation::RetentionTurn;
        check::take_retention_turn(&self.namespace, worker_id, every)?;
        let turn: Option<i64> = sqlx::query_scalar(
            "INSERT INTO tasks.retention_leases (namespace, worker_id, taken_at, next_at, turns)
             VALUES ($1, $2, now(), now() + $3 * INTERVAL '1 millisecond', 1)
             ON CONFLICT (namespace) DO UPDATE
                SET worker_id = EXCLUDED.worker_id, taken_at = EXCLUDED.taken_at,
                    next_at = EXCLUDED.next_at, turns = retention_leases.turns + 1
              WHERE retention_leases.next_at <= now()
          RETURNING turns",
        )
        .bind(&*self.namespace)
        .bind(worker_id)
        .bind(millis(every))
        .fetch_optional(&self.pool)
        .await
        .map_err(db(OPERATION))?;
        Ok(turn.map(|turn| turn as u64))
    }
}
