//! Claims, leases and the end of a run on SQLite: the SQL of
//! [`LeaseStore`].

use crate::rows::{ClaimRow, RUN_COLUMNS};
use crate::steps::RunState;
use crate::{SqliteStore, fetch_run, rows};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::WorkflowRun;
use tasks_core::queue::ClaimFilter;
use tasks_core::store::{
    ClaimedRun, FailRun, LeaseStore, Notification, RecordStepAttempt, check, complete_separately,
};
use tasks_core::transition::{
    BACKED_OFF, CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, CLAIMED, COMPLETE, Column,
    EXPIRE, EXPIRED, EXTEND_LEASE, FAIL, FAILED_FOR_GOOD, PENDING_ORDER, RELEASE, RELEASED,
    RELEASED_ATTEMPTS_SQL, SLEEP, SLEEPING, TAKES_QUEUE_SLOT, TAKES_SLOT, admitted,
    claimed_attempts_sql, claimed_epoch_sql, claimed_started_at_sql, deadline_error,
    either_set_sql, first_execution_sql, forgettable_workers, gives_up_sql, is_start, key_limit,
    keyed_candidates, pending_order, rate_starts_left_sql, retry_after, slots_held, stale_workers,
    status_in,
};
use uuid::Uuid;

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        check::claim_runs(worker_id, lease, filter)?;
        const OPERATION: Operation = Operation::ClaimRuns;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let lease_end = write.now_plus(lease)?;
        // Runs past their deadline fail ([`EXPIRE`]); a finishing transition like any
        // other: their parents are woken in this transaction, their finish announced.
        let expire = format!(
            "UPDATE tasks_workflow_runs
                SET {expired}, updated_at = ?2
              WHERE namespace = ?1 AND {from}
                AND deadline_at IS NOT NULL AND deadline_at <= ?2
          RETURNING id, parent_run_id",
            expired = EXPIRED.set_sql("?2", &[(Column::Error, "?3")]),
            from = status_in("", EXPIRE.from)
        );
        let expired: Vec<(String, Option<String>)> = sqlx::query_as(&expire)
            .bind(&*self.namespace)
            .bind(&now)
            .bind(rows::json(&deadline_error()))
            .fetch_all(write.conn())
            .await
            .map_err(db(OPERATION))?;
        let mut ended = Vec::with_capacity(expired.len());
        for (id, parent) in expired {
            let run_id = rows::parse_id(&id, OPERATION)?;
            ended.push(Notification::RunFinished {
                namespace: self.namespace.to_string(),
                run_id,
            });
            if let Some(parent) = parent.filter(|_| EXPIRE.wakes_parent()) {
                let parent = rows::parse_id(&parent, OPERATION)?;
                ended.push(self.wake_parent(&mut write, parent, OPERATION).await?);
            }
        }
        let claimable: Vec<_> = CLAIM_PENDING
            .from
            .iter()
            .chain(CLAIM_DUE.from)
            .chain(CLAIM_EXPIRED.from)
            .copied()
            .collect();
        // Runs of dead workers first (expired leases and stale heartbeats alike: a backlog
        // never delays recovery), then pending runs, then sleeping runs whose sleep is over.
        let claim_group = format!(
            "CASE WHEN {} THEN 0 WHEN {} THEN 1 ELSE 2 END",
            status_in("r.", CLAIM_EXPIRED.from),
            status_in("r.", CLAIM_PENDING.from)
        );
        let takes_slot = format!(
            "(r.concurrency_key IS NOT NULL AND {})",
            status_in("r.", TAKES_SLOT)
        );
        // The queues with a limit, read under the write lock: their counts are exact.
        let limited = self.limited_queues(&mut write, OPERATION).await?;
        let limited_json = serde_json::to_string(&limited)
            .map_err(|error| StoreError::InvalidArgument(error.to_string()))?;
        let names_json = |names: &Option<Vec<String>>| {
            names
                .as_ref()
                .map(|names| serde_json::Value::from(names.clone()).to_string())
        };
        // Candidates in claim order (running runs of dead workers, then pending runs by
        // priority, then runs whose sleep is over), past runs that would take a slot of
        // a key or queue without a free one; then no more runs of a key than it has free
        // slots, no more starts of a queue than its rate window has left, and no more runs
        // of a queue than it has free slots. The write lock makes every count exact.
        let sql = format!(
            "WITH lim AS (
                SELECT json_extract(value, '$.queue') AS queue,
                       json_extract(value, '$.concurrency') AS qlimit,
                       json_extract(value, '$.held') AS qheld,
                       json_extract(value, '$.starts_left') AS starts_left,
                       json_extract(value, '$.key_rate') AS key_rate,
                       json_extract(value, '$.key_since') AS key_since,
                       json_extract(value, '$.key_concurrency') AS key_concurrency
                  FROM json_each(?7)
             )
             UPDATE tasks_workflow_runs
                SET {claimed}, updated_at = ?2
              WHERE namespace = ?1 AND id IN (
                SELECT id FROM (
                  SELECT q.*, row_number() OVER (
                             PARTITION BY q.queue, q.qtakes
                             ORDER BY q.grp, {queue_order}) AS qn
                    FROM (
                      SELECT * FROM (
                        SELECT k.*, row_number() OVER (
                                   PARTITION BY k.queue, k.starting
                                   ORDER BY k.grp, {start_order}) AS sn
                          FROM (
                            SELECT * FROM (
                              SELECT c.*, row_number() OVER (
                                         PARTITION BY c.concurrency_key, c.takes
                                         ORDER BY c.grp, {window_order}) AS n
                                FROM (
                                 SELECT * FROM (
                                 SELECT d.*, row_number() OVER (
                                            PARTITION BY d.concurrency_key, d.starting
                                            ORDER BY d.grp, {key_start_order}) AS ksn
                                   FROM (
                                  SELECT r.id, r.concurrency_key, {key_limit} AS concurrency_limit,
                                         r.available_at, r.created_at, {grp} AS grp,
                                         CASE WHEN {pending} THEN r.priority ELSE 0 END AS priority,
                                         {takes} AS takes,
                                         CASE WHEN {takes} THEN ({held}) ELSE 0 END AS held,
                                         r.queue, {starting} AS starting,
                                         ({takes_queue} AND l.qlimit IS NOT NULL) AS qtakes,
                                         l.qlimit, l.qheld, l.starts_left,
                                         CASE WHEN r.concurrency_key IS NULL THEN NULL
                                              ELSE {key_starts_left} END AS kstarts_left
                                    FROM tasks_workflow_runs r LEFT JOIN lim l ON l.queue = r.queue
                                    LEFT JOIN tasks_key_windows w
                                           ON l.key_rate IS NOT NULL AND w.namespace = ?1
                                          AND w.concurrency_key = r.concurrency_key
                                   WHERE r.namespace = ?1
                                     AND (({claimable} AND r.available_at <= ?2)
                                          -- Running runs of other workers whose heartbeat went stale.
                                          OR ({orphaned} AND r.worker_id <> ?3
                                              AND r.worker_id IN ({stale})))
                                     AND (r.deadline_at IS NULL OR r.deadline_at > ?2)
                                     AND (?8 IS NULL OR r.queue IN (SELECT value FROM json_each(?8)))
                                     AND (?9 IS NULL
                                          OR r.workflow_name IN (SELECT value FROM json_each(?9)))
                                     AND NOT ({takes} AND ({held}) >= {key_limit})
                                     AND NOT ({takes_queue} AND l.qlimit IS NOT NULL
                                              AND l.qheld >= l.qlimit)
                                     AND NOT ({starting} AND l.starts_left IS NOT NULL
                                              AND l.starts_left <= 0)
                                     AND NOT ({starting} AND r.concurrency_key IS NOT NULL
                                              AND COALESCE({key_starts_left}, 1) <= 0)
                                   ORDER BY grp, {order}
                                   LIMIT ?6
                                   ) d
                                 ) krated
                                  WHERE NOT starting OR kstarts_left IS NULL OR ksn <= kstarts_left
                                ) c
                            ) ranked
                             WHERE NOT takes OR {admitted}
                          ) k
                      ) rated
                       WHERE NOT starting OR starts_left IS NULL OR sn <= starts_left
                    ) q
                ) a
                 WHERE NOT qtakes OR {queue_admitted}
                 ORDER BY grp, {order}
                 LIMIT ?5)
          RETURNING {RUN_COLUMNS}, {first_execution} AS first_execution",
            // A claim counts an attempt unless it wakes a sleep; the first claim sets
            // `started_at`.
            claimed = CLAIMED.set_sql(
                "?2",
                &[
                    (Column::WorkerId, "?3"),
                    (Column::ClaimEpoch, &claimed_epoch_sql("")),
                    (Column::AvailableAt, "?4"),
                    (Column::Attempts, &claimed_attempts_sql("")),
                    (Column::StartedAt, &claimed_started_at_sql("", "?2")),
                ],
            ),
            first_execution = first_execution_sql("", "?2"),
            claimable = status_in("r.", &claimable),
            grp = claim_group,
            pending = status_in("r.", CLAIM_PENDING.from),
            takes = takes_slot,
            takes_queue = status_in("r.", TAKES_QUEUE_SLOT),
            starting = format!("({} AND {})", status_in("r.", CLAIM_PENDING.from), is_start("r.")),
            orphaned = status_in("r.", CLAIM_ORPHANED.from),
            stale = stale_workers("tasks_workers", "?1", "?2"),
            held = slots_held("tasks_workflow_runs", "?1", "r.concurrency_key"),
            admitted = admitted("held", "n", "concurrency_limit"),
            key_limit = key_limit("r.concurrency_limit", "l.key_concurrency"),
            queue_admitted = admitted("qheld", "qn", "qlimit"),
            // Pending runs by priority; the others' `priority` is 0 here.
            order = PENDING_ORDER,
            window_order = pending_order("c."),
            key_start_order = pending_order("d."),
            key_starts_left =
                rate_starts_left_sql("l.key_rate", "w.window_starts", "w.window_start > l.key_since"),
            start_order = pending_order("k."),
            queue_order = pending_order("q."),
        );
        let claimed = sqlx::query_as::<_, ClaimRow>(&sql)
            .bind(&*self.namespace)
            .bind(&now)
            .bind(worker_id)
            .bind(lease_end)
            .bind(i64::from(limit))
            .bind(keyed_candidates(limit) + i64::from(limit))
            .bind(limited_json)
            .bind(names_json(&filter.queues))
            .bind(names_json(&filter.workflows))
            .fetch_all(write.conn())
            .await
            .map_err(db(OPERATION))?;
        let mut runs = Vec::with_capacity(claimed.len());
        let mut quarantined = Vec::new();
        for row in claimed {
            let columns: Vec<(&'static str, String)> = row
                .run_row()
                .undecodable_json()
                .into_iter()
                .map(|(column, text)| (column, text.to_owned()))
                .collect();
            let epoch = row.claim_epoch();
            match row.into_claimed(OPERATION) {
                Ok(claimed) => runs.push(claimed),
                // A poison row must not strand the batch: fail it, in this transaction, and
                // go on with the others.
                Err(StoreError::CorruptRun { id, reason, .. }) => {
                    let holder = Holder::new(worker_id, epoch);
                    if let Some(parent) = self
                        .quarantine(&mut write, id, &holder, &reason, &columns)
                        .await?
                    {
                        ended.push(self.wake_parent(&mut write, parent, OPERATION).await?);
                    }
                    quarantined.push(id);
                }
                Err(error) => return Err(error),
            }
        }
        // Every start counts in its queue's rate window, and in its key's.
        let claimed_ids: Vec<Uuid> = runs.iter().map(|claimed| claimed.run.id).collect();
        self.count_key_starts(&mut write, &limited, &claimed_ids, OPERATION)
            .await?;
        let now_instant = write.instant();
        for queue in limited.iter().filter(|queue| queue.rate.is_some()) {
            let started = runs
                .iter()
                .filter(|claimed| {
                    claimed.run.queue == queue.queue && claimed.run.started_at == Some(now_instant)
                })
                .count();
            self.count_starts(
                &mut write,
                queue,
                u32::try_from(started).unwrap_or(u32::MAX),
                OPERATION,
            )
            .await?;
        }
        write.commit().await?;
        for run_id in quarantined {
            self.notify(Notification::RunFinished {
                namespace: self.namespace.to_string(),
                run_id,
            });
        }
        for notification in ended {
            self.notify(notification);
        }
        for claimed in &runs {
            for notification in CLAIM_PENDING.announcements(&claimed.run) {
                self.notify(notification);
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
        self.transition(
            &EXTEND_LEASE,
            "available_at = ?6",
            run_id,
            Some(holder),
            |q, w| Ok(q.bind(w.now_plus(lease)?)),
        )
        .await
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        check::sleep_run(holder, until)?;
        let until = rows::ts(until)?;
        let set = SLEEPING.set_sql("?4", &[(Column::AvailableAt, "?6")]);
        self.transition(&SLEEP, &set, run_id, Some(holder), |q, _| Ok(q.bind(until)))
            .await
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run(holder, &output)?;
        let write = self.begin_write(COMPLETE.operation).await?;
        self.complete_in(write, run_id, holder, &output).await
    }

    /// The run's last attempts and its completion in one write transaction when the run is
    /// still this claim's; otherwise the separate writes, which keep and report exactly
    /// what `record_step_attempt` and `complete_run` would.
    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        holder: &Holder,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run_with_steps(run_id, holder, &output, &steps)?;
        if steps.is_empty() {
            let write = self.begin_write(COMPLETE.operation).await?;
            return self.complete_in(write, run_id, holder, &output).await;
        }
        let mut write = self.begin_write(COMPLETE.operation).await?;
        let state = self
            .run_state(&mut write, &COMPLETE, run_id, holder)
            .await?;
        if !matches!(state, RunState::Owned(_)) {
            // Nothing written yet: give the lock back and let the single writes classify.
            drop(write);
            return complete_separately(self, run_id, holder, output, steps).await;
        }
        for (nth, params) in steps.iter().enumerate() {
            if self
                .insert_finished_nth(&mut write, params, None, nth)
                .await?
                .is_none()
            {
                // Stored by an earlier try: it must be this run's finished attempt.
                self.stored_record(&mut write, params).await?;
            }
        }
        self.complete_in(write, run_id, holder, &output).await
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        check::fail_run(&params)?;
        let (run_id, holder) = (params.run_id, &params.holder);
        let mut write = self.begin_write(FAIL.operation).await?;
        let current = fetch_run(write.conn(), &self.namespace, run_id, FAIL.operation).await?;
        let run = match current {
            Some(run) if FAIL.admits(&run, Some(holder)) => run,
            current => return Err(FAIL.miss(run_id, Some(holder), current.as_ref())),
        };
        // Decided under the write lock, on the attempt just read; the statement gives up
        // when the retry would start at or after the deadline.
        let retry_at = retry_after(&run, params.force)
            .map(|wait| write.now_plus(wait))
            .transpose()?;
        let set = either_set_sql(
            &gives_up_sql("?6", "deadline_at"),
            (&FAILED_FOR_GOOD, &[(Column::Error, "?7")]),
            (
                &BACKED_OFF,
                &[(Column::Error, "?7"), (Column::AvailableAt, "?6")],
            ),
            "?4",
        );
        let error = rows::json(&params.error);
        self.transition_in(write, &FAIL, &set, run_id, Some(holder), |q, _| {
            Ok(q.bind(retry_at).bind(error))
        })
        .await
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
            "?4",
            &[
                (Column::AvailableAt, "?6"),
                (Column::Error, "?7"),
                (Column::Attempts, RELEASED_ATTEMPTS_SQL),
            ],
        );
        let reason = rows::json(&reason);
        self.transition(&RELEASE, &set, run_id, Some(holder), |q, w| {
            Ok(q.bind(w.now_plus(delay)?).bind(reason))
        })
        .await
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        check::worker(worker_id)?;
        const OPERATION: Operation = Operation::Heartbeat;
        let mut write = self.begin_write(OPERATION).await?;
        let stale_at = write.now_plus(stale_after)?;
        // Forget the namespace's dead workers whose runs were all claimed.
        let forget = format!(
            "DELETE FROM tasks_workers AS w
              WHERE w.namespace = ?1 AND w.worker_id <> ?2 AND {}",
            forgettable_workers("tasks_workflow_runs", "?3"),
        );
        sqlx::query(&forget)
            .bind(&*self.namespace)
            .bind(worker_id)
            .bind(write.now())
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?;
        sqlx::query(
            "INSERT INTO tasks_workers (namespace, worker_id, beat_at, stale_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (namespace, worker_id)
             DO UPDATE SET beat_at = excluded.beat_at, stale_at = excluded.stale_at",
        )
        .bind(&*self.namespace)
        .bind(worker_id)
        .bind(write.now())
        .bind(stale_at)
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        check::worker(worker_id)?;
        const OPERATION: Operation = Operation::RemoveWorker;
        let mut write = self.begin_write(OPERATION).await?;
        sqlx::query("DELETE FROM tasks_workers WHERE namespace = ?1 AND worker_id = ?2")
            .bind(&*self.namespace)
            .bind(worker_id)
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?;
        write.commit().await
    }
}
