//! Claims, leases and the end of a run on Postgres: the SQL of
//! [`LeaseStore`].

use crate::reconnect::{db, retrying};
use crate::rows::{RUN_COLUMNS, decode_claimed, decode_run};
use crate::{PgStore, children, claim, millis, prefixed, rows};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::queue::ClaimFilter;
use tasks_core::store::{
    ClaimedRun, FailRun, LeaseStore, Notification, RecordStepAttempt, check, complete_separately,
};
use tasks_core::transition::{
    BACKED_OFF, CLAIM_PENDING, COMPLETE, COMPLETED, Column, EXTEND_LEASE, FAIL, FAILED_FOR_GOOD,
    RELEASE, RELEASED, RELEASED_ATTEMPTS_SQL, SLEEP, SLEEPING, deadline_error, either_set_sql,
    forgettable_workers, gives_up_sql, keyed_candidates, retry_after,
};
use uuid::Uuid;

#[async_trait]
impl LeaseStore for PgStore {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        const OPERATION: Operation = Operation::ClaimRuns;
        check::claim_runs(worker_id, lease, filter)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The statement of the namespace's last known configuration (see [`claim`]). A
        // claim that took no run re-reads the configuration: when it changed, the other
        // statement claims at once (the plain one claims nothing once a queue has a limit).
        let limited = self.queues_limited.load(Ordering::Relaxed);
        let mut rows = self
            .claim_with(limited, worker_id, lease, limit, filter)
            .await?;
        if !rows.iter().any(|row| !is_expired_row(row)) {
            let now_limited: bool = sqlx::query_scalar(claim::limited_queue_exists())
                .bind(&*self.namespace)
                .fetch_one(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            self.queues_limited.store(now_limited, Ordering::Relaxed);
            if now_limited && !limited {
                rows.extend(
                    self.claim_with(true, worker_id, lease, limit, filter)
                        .await?,
                );
            }
        }
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let expired: bool = sqlx::Row::try_get(row, "expired").map_err(db(OPERATION))?;
            if expired {
                self.announce_expired(row).await;
                continue;
            }
            match decode_claimed(row, OPERATION) {
                Ok(claimed) => runs.push(claimed),
                // A poison row must not strand the batch: fail it and go on with the others.
                Err(StoreError::CorruptRun { id, reason, .. }) => {
                    // The claim epoch is a plain integer: it reads when JSON does not.
                    let epoch: i64 =
                        sqlx::Row::try_get(row, "claim_epoch").map_err(db(OPERATION))?;
                    let holder = Holder::new(worker_id, epoch);
                    self.quarantine(id, &holder, &reason, &rows::undecodable_json(row))
                        .await;
                }
                Err(error) => return Err(error),
            }
        }
        // For waiters on a status: batched with the claimer's other announcements (the
        // worker's wake-up sender), never a statement per claim.
        for claimed in &runs {
            let notifications: Vec<Notification> =
                CLAIM_PENDING.announcements(&claimed.run).collect();
            for payload in self.outgoing(&notifications) {
                self.batcher.send(payload);
            }
        }
        // Oldest first, so callers start work in the order it was queued.
        runs.sort_by_key(|claimed| (claimed.run.created_at, claimed.run.id));
        Ok(runs)
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        holder: &Holder,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        check::extend_lease(holder, lease)?;
        let set = "available_at = now() + $5 * INTERVAL '1 millisecond'";
        // A second try sets the lease again (from a later now): tried again on a broken
        // connection.
        retrying(EXTEND_LEASE.operation, || {
            self.transition(&EXTEND_LEASE, set, run_id, Some(holder), |q| {
                q.bind(millis(lease))
            })
        })
        .await
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        check::sleep_run(holder, until)?;
        let set = SLEEPING.set_sql("now()", &[(Column::AvailableAt, "$5")]);
        self.transition(&SLEEP, &set, run_id, Some(holder), |q| q.bind(until))
            .await
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run(holder, &output)?;
        // Completions of many runs share one statement and one commit (see `Completer`).
        let batched = self
            .completer
            .complete(&self.namespace, run_id, holder, &output, Vec::new())
            .await?;
        if let Ok(run) = batched {
            return Ok(self.announce(&COMPLETE, run));
        }
        // The batch refuses a run that changed while it ran (a heartbeat extending the
        // lease, say); this statement re-checks the fence on the run's newest version.
        let set = COMPLETED.set_sql("now()", &[(Column::Output, "$5")]);
        self.transition(&COMPLETE, &set, run_id, Some(holder), |q| q.bind(output))
            .await
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run_with_steps(run_id, holder, &output, &steps)?;
        if steps.is_empty() {
            return self.complete_run(run_id, holder, output).await;
        }
        // The steps and the completion in the completion's statement: one commit.
        match self
            .completer
            .complete(&self.namespace, run_id, holder, &output, steps)
            .await?
        {
            Ok(run) => Ok(self.announce(&COMPLETE, run)),
            // Refused: nothing was written. The separate writes say why (or succeed, if the
            // run was only being changed at that moment and is still ours).
            Err(steps) => complete_separately(self, run_id, holder, output, steps).await,
        }
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        check::fail_run(&params)?;
        let (run_id, holder) = (params.run_id, &params.holder);
        let current = self.fetch_run(run_id, FAIL.operation).await?;
        let run = match current {
            Some(run) if FAIL.admits(&run, Some(holder)) => run,
            current => return Err(FAIL.miss(run_id, Some(holder), current.as_ref())),
        };
        // The decision was made on the attempt just read: the write applies only to it.
        let retry = retry_after(&run, params.force).map(millis);
        let retry_at = "(now() + $6::bigint * INTERVAL '1 millisecond')";
        let set = either_set_sql(
            "d.give_up",
            (&FAILED_FOR_GOOD, &[(Column::Error, "$5")]),
            (
                &BACKED_OFF,
                &[(Column::Error, "$5"), (Column::AvailableAt, retry_at)],
            ),
            "now()",
        );
        let sql = format!(
            "WITH {parent_lock}, d AS (
                SELECT {give_up} AS give_up
                  FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2
             ), done AS (
             UPDATE tasks.workflow_runs wr SET {set}, updated_at = now()
               FROM d
              WHERE wr.namespace = $1 AND wr.id = $2 AND wr.attempts = $7 AND {fence}
                AND {parent_first}
          RETURNING {returning}
             ), {woken}
             SELECT * FROM done",
            parent_lock = children::PARENT_LOCK,
            parent_first = children::PARENT_FIRST,
            give_up = gives_up_sql(retry_at, "deadline_at"),
            fence = FAIL.fence("wr.", "$3", "$4"),
            returning = prefixed("wr", RUN_COLUMNS),
            woken = children::wake_parent_cte(),
        );
        let updated = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(&holder.worker_id)
            .bind(holder.claim_epoch)
            .bind(&params.error)
            .bind(retry)
            .bind(run.attempts)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(FAIL.operation))?;
        match updated {
            Some(row) => {
                let run = decode_run(&row, FAIL.operation)?;
                self.announce_now(&FAIL, &run).await;
                self.announce_family(&run, &[]).await;
                Ok(run)
            }
            None => {
                let current = self.fetch_run(run_id, FAIL.operation).await?;
                Err(FAIL.miss(run_id, Some(holder), current.as_ref()))
            }
        }
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        check::release_run(holder, delay, &reason)?;
        let set = RELEASED.set_sql(
            "now()",
            &[
                (Column::AvailableAt, "now() + $5 * INTERVAL '1 millisecond'"),
                (Column::Error, "$6"),
                (Column::Attempts, RELEASED_ATTEMPTS_SQL),
            ],
        );
        self.transition(&RELEASE, &set, run_id, Some(holder), |q| {
            q.bind(millis(delay)).bind(reason)
        })
        .await
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        check::worker(worker_id)?;
        // An upsert of the worker's row: tried again on a broken connection.

        retrying(Operation::Heartbeat, move || async move {
            const OPERATION: Operation = Operation::Heartbeat;
            static SQL: LazyLock<String> = LazyLock::new(|| {
                format!(
                    // One statement: forget the namespace's dead workers whose runs were all
                    // claimed, then write this one's row.
                    "WITH forgotten AS (
                    DELETE FROM tasks.workers w
                     WHERE w.namespace = $1 AND w.worker_id <> $2 AND {forgettable}
                 )
                 INSERT INTO tasks.workers (namespace, worker_id, beat_at, stale_at)
                 VALUES ($1, $2, now(), now() + $3 * INTERVAL '1 millisecond')
                 ON CONFLICT (namespace, worker_id)
                 DO UPDATE SET beat_at = EXCLUDED.beat_at, stale_at = EXCLUDED.stale_at",
                    forgettable = forgettable_workers("tasks.workflow_runs", "now()"),
                )
            });
            sqlx::query(&SQL)
                .bind(&*self.namespace)
                .bind(worker_id)
                .bind(millis(stale_after))
                .execute(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(())
        })
        .await
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        check::worker(worker_id)?;
        // Deleting a row twice leaves it deleted: tried again on a broken connection.

        retrying(Operation::RemoveWorker, move || async move {
            sqlx::query("DELETE FROM tasks.workers WHERE namespace = $1 AND worker_id = $2")
                .bind(&*self.namespace)
                .bind(worker_id)
                .execute(&self.pool)
                .await
                .map_err(db(Operation::RemoveWorker))?;
            Ok(())
        })
        .await
    }
}

impl PgStore {
    /// One claim statement ([`claim::claim_runs_sql`]): the full claim when `limited`, else
    /// the plain one.
    async fn claim_with(
        &self,
        limited: bool,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<sqlx::postgres::PgRow>> {
        const OPERATION: Operation = Operation::ClaimRuns;
        // In a transaction of its own whose first round trip also sets its plan mode (see
        // [`claim::GENERIC_PLAN`]): the claim runs on the generic plan its connection
        // prepared once, and is never planned again.
        let mut tx = self
            .pool
            .begin_with(claim::GENERIC_PLAN)
            .await
            .map_err(db(OPERATION))?;
        let rows = sqlx::query(claim::claim_runs_sql(filter.queues.is_some(), limited))
            .bind(&*self.namespace)
            .bind(worker_id)
            .bind(millis(lease))
            .bind(i64::from(limit))
            .bind(deadline_error())
            .bind(keyed_candidates(limit))
            .bind(filter.queues.as_deref())
            .bind(filter.workflows.as_deref())
            .fetch_all(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        tx.commit().await.map_err(db(OPERATION))?;
        Ok(rows)
    }
}

/// Whether a row of a claim statement is a run it failed by its deadline, not a claimed one
/// (a row that does not say counts as claimed: its decoding reports it).
fn is_expired_row(row: &sqlx::postgres::PgRow) -> bool {
    sqlx::Row::try_get::<bool, _>(row, "expired").unwrap_or(false)
}
