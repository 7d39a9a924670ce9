//! Runs on SQLite: creation, listing, claims and every fenced run transition.
//!
//! Each transition is one `UPDATE ... WHERE <fence> RETURNING` inside a `BEGIN IMMEDIATE`
//! transaction, with the fence of its [`Transition`]; when it matches no row, the run is read
//! in the same transaction and the transition settles the miss.

use crate::rows::{RUN_COLUMNS, RunRow};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Sqlite;
use std::time::Duration;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::{RunStatus, WorkflowRun};
use tasks_core::queue::ClaimFilter;
use tasks_core::store::RunStore;
use tasks_core::store::check;
use tasks_core::store::{ClaimedRun, CreateRun, FailRun, ListRuns, Notification, Page};
use uuid::Uuid;

use sqlx::QueryBuilder;

use super::rows::{self, ClaimRow};
use super::{SqliteStore, Write, fetch_run};
use tasks_core::store::{Cursor, PageQuery};
use tasks_core::transition::{
    BACKED_OFF, CANCELED, CLAIMED, COMPLETED, CREATED, Column, EXPIRED, FAILED_FOR_GOOD, PAUSED,
    QUARANTINED, RELEASED, RELEASED_ATTEMPTS_SQL, RESUMED, SLEEPING, claimed_attempts_sql,
    claimed_started_at_sql, either_set_sql, first_execution_sql, gives_up_sql,
};
use tasks_core::transition::{
    CANCEL, CLAIM_DUE, CLAIM_EXPIRED, CLAIM_ORPHANED, CLAIM_PENDING, COMPLETE, EXPIRE,
    EXTEND_LEASE, FAIL, JSON_COLUMNS, PAUSE, PENDING_ORDER, QUARANTINE, RELEASE, RESUME, SLEEP,
    TAKES_QUEUE_SLOT, TAKES_SLOT, Transition, admitted, deadline_error, forgettable_workers,
    is_start, key_limit, keyed_candidates, pending_order, quarantine_error, rate_starts_left_sql,
    retry_after, slots_held, stale_workers, status_in,
};

/// A query returning runs, with its arguments.
pub(super) type RunQuery<'q> =
    sqlx::query::QueryAs<'q, Sqlite, RunRow, sqlx::sqlite::SqliteArguments<'q>>;

impl SqliteStore {
    /// Applies `transition` in its own write transaction; see [`SqliteStore::transition_in`].
    async fn transition(
        &self,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        worker_id: Option<&str>,
        bind: impl for<'q> FnOnce(RunQuery<'q>, &Write<'_>) -> StoreResult<RunQuery<'q>>,
    ) -> StoreResult<WorkflowRun> {
        let write = self.begin_write(transition.operation).await?;
        self.transition_in(write, transition, set, run_id, worker_id, bind)
            .await
    }

    /// Applies `transition` to a run in the write transaction `write`, and commits:
    /// `UPDATE .. SET {set}, updated_at = ?4 WHERE <run> AND <fence> RETURNING <run>`, with
    /// `?1` the namespace, `?2` the run, `?3` the worker (referenced by the fence of a leased
    /// transition only) and `?4` the transaction's time; `bind` binds the `SET` list's values
    /// from `?5` on. A miss is settled by the transition on the run as read in the same
    /// transaction; a change is announced.
    pub(super) async fn transition_in(
        &self,
        mut write: Write<'_>,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        worker_id: Option<&str>,
        bind: impl for<'q> FnOnce(RunQuery<'q>, &Write<'_>) -> StoreResult<RunQuery<'q>>,
    ) -> StoreResult<WorkflowRun> {
        let operation = transition.operation;
        let sql = format!(
            "UPDATE tasks_workflow_runs SET {set}, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2 AND {fence}
          RETURNING {RUN_COLUMNS}",
            fence = transition.fence("", "?3"),
        );
        let query = sqlx::query_as::<_, RunRow>(&sql)
            .bind(self.namespace.to_string())
            .bind(rows::id(run_id))
            .bind(worker_id.map(str::to_owned))
            .bind(write.now());
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
                tracing::debug!(%run_id, worker_id, %operation, "fenced update matched no run");
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
            Err(current) => transition.settle(run_id, worker_id, current),
        }
    }

    pub(super) async fn create_run_impl(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
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
        Ok(run)
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

    pub(super) async fn list_runs_impl(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        const OPERATION: Operation = Operation::ListRuns;
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
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
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
            match row.into_claimed(OPERATION) {
                Ok(claimed) => runs.push(claimed),
                // A poison row must not strand the batch: fail it, in this transaction, and
                // go on with the others.
                Err(StoreError::CorruptRun { id, reason, .. }) => {
                    if let Some(parent) = self
                        .quarantine(&mut write, id, worker_id, &reason, &columns)
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

    /// Fails for good run `run_id`, just claimed by `worker_id` in `write`, whose row did
    /// not decode ([`QUARANTINE`]): its undecodable JSON `columns` (with their stored text)
    /// are moved into the error record and reset, so the row reads again. Returns the run's
    /// parent, which the caller wakes in the same transaction like after every finish
    /// ([`Transition::wakes_parent`]).
    async fn quarantine(
        &self,
        write: &mut Write<'_>,
        run_id: Uuid,
        worker_id: &str,
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
            fence = QUARANTINE.fence("", "?3"),
        );
        let parent: Option<Option<String>> = sqlx::query_scalar(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(worker_id)
            .bind(write.now())
            .bind(rows::json(&error))
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

    pub(super) async fn heartbeat_impl(
        &self,
        worker_id: &str,
        stale_after: Duration,
    ) -> StoreResult<()> {
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

    pub(super) async fn remove_worker_impl(&self, worker_id: &str) -> StoreResult<()> {
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

    pub(super) async fn extend_lease_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        self.transition(
            &EXTEND_LEASE,
            "available_at = ?5",
            run_id,
            Some(worker_id),
            |q, w| Ok(q.bind(w.now_plus(lease)?)),
        )
        .await
    }

    pub(super) async fn sleep_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        let until = rows::ts(until)?;
        let set = SLEEPING.set_sql("?4", &[(Column::AvailableAt, "?5")]);
        self.transition(&SLEEP, &set, run_id, Some(worker_id), |q, _| {
            Ok(q.bind(until))
        })
        .await
    }

    pub(super) async fn complete_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        let write = self.begin_write(COMPLETE.operation).await?;
        self.complete_in(write, run_id, worker_id, &output).await
    }

    /// Completes the run in `write` (see [`SqliteStore::transition_in`]).
    pub(super) async fn complete_in(
        &self,
        write: Write<'_>,
        run_id: Uuid,
        worker_id: &str,
        output: &Value,
    ) -> StoreResult<WorkflowRun> {
        let set = COMPLETED.set_sql("?4", &[(Column::Output, "?5")]);
        let output = rows::json(output);
        self.transition_in(write, &COMPLETE, &set, run_id, Some(worker_id), |q, _| {
            Ok(q.bind(output))
        })
        .await
    }

    pub(super) async fn fail_run_impl(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        let (run_id, worker_id) = (params.run_id, params.worker_id.as_str());
        let mut write = self.begin_write(FAIL.operation).await?;
        let current = fetch_run(write.conn(), &self.namespace, run_id, FAIL.operation).await?;
        let run = match current {
            Some(run) if FAIL.admits(&run, Some(worker_id)) => run,
            current => return Err(FAIL.miss(run_id, Some(worker_id), current.as_ref())),
        };
        // Decided under the write lock, on the attempt just read; the statement gives up
        // when the retry would start at or after the deadline.
        let retry_at = retry_after(&run, params.force)
            .map(|wait| write.now_plus(wait))
            .transpose()?;
        let set = either_set_sql(
            &gives_up_sql("?5", "deadline_at"),
            (&FAILED_FOR_GOOD, &[(Column::Error, "?6")]),
            (
                &BACKED_OFF,
                &[(Column::Error, "?6"), (Column::AvailableAt, "?5")],
            ),
            "?4",
        );
        let error = rows::json(&params.error);
        self.transition_in(write, &FAIL, &set, run_id, Some(worker_id), |q, _| {
            Ok(q.bind(retry_at).bind(error))
        })
        .await
    }

    pub(super) async fn release_run_impl(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        let set = RELEASED.set_sql(
            "?4",
            &[
                (Column::AvailableAt, "?5"),
                (Column::Error, "?6"),
                (Column::Attempts, RELEASED_ATTEMPTS_SQL),
            ],
        );
        let reason = rows::json(&reason);
        self.transition(&RELEASE, &set, run_id, Some(worker_id), |q, w| {
            Ok(q.bind(w.now_plus(delay)?).bind(reason))
        })
        .await
    }

    pub(super) async fn cancel_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = CANCELED.set_sql("?4", &[]);
        self.transition(&CANCEL, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    pub(super) async fn pause_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = PAUSED.set_sql("?4", &[]);
        self.transition(&PAUSE, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    pub(super) async fn resume_run_impl(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = RESUMED.set_sql("?4", &[]);
        self.transition(&RESUME, &set, run_id, None, |q, _| Ok(q))
            .await
    }
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        check::create_run(&self.namespace, &params)?;
        self.create_run_impl(params).await
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        const OPERATION: Operation = Operation::GetRun;
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        fetch_run(&mut conn, &self.namespace, run_id, OPERATION).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        check::list_runs(&self.namespace, &params)?;
        self.list_runs_impl(params).await
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
