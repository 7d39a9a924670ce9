//! Child workflows on Postgres: the SQL of [`ChildStore::start_child`] and
//! [`ChildStore::wait_for_children`], and the parent wake-up and cancel cascade that the
//! finishing transitions of `mod.rs` embed. The policy is `transition.rs`'s
//! [`START_CHILD`], [`WAIT_CHILDREN`] and [`WAKE_PARENT`].
//!
//! Both operations lock the parent row first (`SELECT .. FOR UPDATE`). A child's finishing
//! statement updates the child, then writes its parent's row (whatever the parent's state),
//! so it waits for a parent that is parking at that moment and then counts down on the
//! parked row; and a parent that parks after the child's statement committed reads the
//! child as finished. Either way the last child wakes the parent.
//!
//! [`ChildStore::start_child`]: tasks_core::ChildStore::start_child
//! [`ChildStore::wait_for_children`]: tasks_core::ChildStore::wait_for_children
//! [`WAKE_PARENT`]: tasks_core::transition::WAKE_PARENT

use crate::PgStore;
use crate::db::Conn;
use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, RunRow, STEP_COLUMNS, StepRow, decode_run};
use async_trait::async_trait;
use sqlx::FromRow as _;
use sqlx::Row as _;
use tasks_core::children::{
    ChildOutcome, ChildWait, StartChild, StartedChild, WaitForChildren, missing_child,
};
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::limits;
use tasks_core::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use tasks_core::store::{ChildStore, Notification, check, status_of};
use tasks_core::transition::{
    CANCELED, CASCADE_FROM, CREATED, Column, EXPIRE, EXPIRED, FINISHED, PARKED_ON_CHILDREN,
    START_CHILD, WAIT_CHILDREN, status_in, wake_parent_set,
};
use uuid::Uuid;

/// The CTE `woken` of a finishing statement whose finished run is the CTE `done`: the
/// parent wake-up of [`WAKE_PARENT`](tasks_core::transition::WAKE_PARENT).
/// The CTE that locks the parent of run `$2` (of namespace `$1`), if it has one, before a
/// statement that may finish the run writes anything, and the condition that makes the
/// statement's first write wait for it ([`PARENT_FIRST`]). Every finishing statement locks
/// the parent before the child, like a cancel, which locks the run it cancels before the
/// descendants it cascades to: a child finishing while its parent is canceled waits for the
/// cancel instead of deadlocking with it.
pub(super) const PARENT_LOCK: &str = "parent_first AS (
             SELECT p.id FROM tasks.workflow_runs p
              WHERE p.namespace = $1
                AND p.id = (SELECT c.parent_run_id FROM tasks.workflow_runs c
                             WHERE c.namespace = $1 AND c.id = $2)
                FOR UPDATE OF p
         )";

/// The condition a finishing statement's first write carries so that it runs after
/// [`PARENT_LOCK`] (an init plan, evaluated before the write takes its row).
pub(super) const PARENT_FIRST: &str = "(SELECT count(*) FROM parent_first) >= 0";

pub(super) fn wake_parent_cte() -> String {
    format!(
        "woken AS (
             UPDATE tasks.workflow_runs p SET {set}, updated_at = now()
               FROM done f
              WHERE p.namespace = f.namespace AND p.id = f.parent_run_id AND {finished}
          RETURNING p.id)",
        set = wake_parent_set("p.", "now()", "1"),
        finished = status_in("f.", FINISHED),
    )
}

/// The CTEs of the claim statement's deadline sweep ([`EXPIRE`]), ending with `expired`
/// (the failed runs, [`RUN_COLUMNS`]) and `woken` (the parents it counted down, `id`), with
/// `$1` the namespace and `$5` the deadline error.
///
/// The sweep waits for no lock: runs past their deadline that another transaction holds
/// are skipped, and so are children whose parent another transaction holds (a parent
/// parking in [`ChildStore::wait_for_children`] at that moment, a cancel): a later claim fails
/// them once the parent is free, so the countdown is never lost. A parent is counted down
/// by the number of its children that expired here ([`wake_parent_set`]); a parent that
/// expires itself in the same sweep is not written twice, and a child whose parent no
/// longer exists (purged) is expired alone.
///
/// [`EXPIRE`]: tasks_core::transition::EXPIRE
/// [`ChildStore::wait_for_children`]: tasks_core::ChildStore::wait_for_children
pub(super) fn expire_ctes() -> String {
    format!(
        "expiring AS (
             SELECT ctid, id, parent_run_id FROM tasks.workflow_runs
              WHERE namespace = $1 AND {expire}
                AND deadline_at IS NOT NULL AND deadline_at <= now()
              FOR UPDATE SKIP LOCKED
         ), expiring_parents AS (
             SELECT id FROM tasks.workflow_runs
              WHERE namespace = $1
                AND id = ANY(ARRAY(SELECT parent_run_id FROM expiring
                                    WHERE parent_run_id IS NOT NULL))
              FOR UPDATE SKIP LOCKED
         ), expired AS (
             UPDATE tasks.workflow_runs
                SET {expired}, updated_at = now()
              WHERE ctid = ANY(ARRAY(
                        SELECT e.ctid FROM expiring e
                         WHERE e.parent_run_id IS NULL
                            OR e.parent_run_id IN (SELECT id FROM expiring_parents)
                            OR NOT EXISTS (SELECT 1 FROM tasks.workflow_runs p
                                            WHERE p.namespace = $1 AND p.id = e.parent_run_id)))
                AND {expire}
          RETURNING {RUN_COLUMNS}
         ), woken AS (
             UPDATE tasks.workflow_runs p SET {set}, updated_at = now()
               FROM (SELECT parent_run_id, count(*)::int AS ended FROM expired
                      WHERE parent_run_id IS NOT NULL GROUP BY parent_run_id) e
              WHERE p.namespace = $1 AND p.id = e.parent_run_id
                AND p.id <> ALL(ARRAY(SELECT id FROM expired))
          RETURNING p.id
         )",
        expire = status_in("", EXPIRE.from),
        expired = EXPIRED.set_sql("now()", &[(Column::Error, "$5")]),
        set = wake_parent_set("p.", "now()", "e.ended"),
    )
}

/// The CTEs `tree` and `cascaded` of a cancel whose canceled run is the CTE `done`: every
/// live descendant reached through children started with the cascade policy is canceled.
pub(super) fn cascade_ctes() -> String {
    format!(
        "tree (namespace, id) AS (
             SELECT c.namespace, c.id FROM tasks.workflow_runs c
               JOIN done f ON c.namespace = f.namespace AND c.parent_run_id = f.id
              WHERE c.cancel_with_parent
             UNION
             SELECT c.namespace, c.id FROM tasks.workflow_runs c
               JOIN tree t ON c.namespace = t.namespace AND c.parent_run_id = t.id
              WHERE c.cancel_with_parent
         ), cascaded AS (
             UPDATE tasks.workflow_runs r
                SET {canceled}, updated_at = now()
               FROM tree t
              WHERE r.namespace = t.namespace AND r.id = t.id AND {live}
          RETURNING r.id)",
        live = status_in("r.", CASCADE_FROM),
        canceled = CANCELED.set_sql("now()", &[]),
    )
}

impl PgStore {
    /// Sends what a finishing transition of `run` implies beyond its own announcement: the
    /// parent may be available (a child finished), and the descendants canceled with it
    /// finished.
    pub(super) async fn announce_family(&self, run: &WorkflowRun, cascaded: &[Uuid]) {
        let mut notifications = Vec::with_capacity(cascaded.len() + 1);
        if run.status.is_terminal() && run.parent_run_id.is_some() {
            notifications.push(Notification::RunAvailable {
                namespace: run.namespace.clone(),
            });
        }
        notifications.extend(cascaded.iter().map(|id| Notification::RunFinished {
            namespace: run.namespace.clone(),
            run_id: *id,
        }));
        self.notify_now(&notifications).await;
    }

    /// Locks run `run_id` in `conn`'s transaction and reads it.
    async fn lock_parent(
        &self,
        conn: &mut Conn,
        run_id: Uuid,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
              WHERE namespace = $1 AND id = $2 FOR UPDATE"
        );
        sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .fetch_optional(conn)
            .await
            .map_err(db(operation))?
            .map(|row| decode_run(&row, operation))
            .transpose()
    }

    /// Completes the child step `step` with the child's `outcome`.
    async fn finish_child_step(
        &self,
        conn: &mut Conn,
        step: &StepAttempt,
        outcome: &ChildOutcome,
    ) -> StoreResult<StepAttempt> {
        const OPERATION: Operation = Operation::WaitForChildren;
        let sql = format!(
            "UPDATE tasks.step_attempts
                SET status = 'completed', output = $3, finished_at = clock_timestamp(),
                    updated_at = clock_timestamp()
              WHERE namespace = $1 AND id = $2
          RETURNING {STEP_COLUMNS}"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(step.id)
            .bind(outcome.to_output())
            .fetch_one(conn)
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)
    }
}

#[async_trait]
impl ChildStore for PgStore {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        const OPERATION: Operation = Operation::StartChild;
        check::start_child(&self.namespace, &params)?;
        let config = params.child.stored_config()?;
        let worker = Some(&params.holder);
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        match self.lock_parent(&mut tx, params.run_id, OPERATION).await? {
            Some(run) if START_CHILD.admits(&run, worker) => {}
            current => return Err(START_CHILD.miss(params.run_id, worker, current.as_ref())),
        }
        let existing = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2 AND step_name = $3 AND kind = $4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let existing = sqlx::query_as::<_, StepRow>(&existing)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::Child.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_step(OPERATION))
            .transpose()?;
        if let Some(step) = existing {
            let child_id = step
                .child_workflow_run_id
                .ok_or_else(|| StoreError::Corrupt {
                    operation: OPERATION,
                    reason: format!("child step {} names no child run", step.id),
                })?;
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2"
            );
            let child = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(child_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db(OPERATION))?
                .map(|row| decode_run(&row, OPERATION))
                .transpose()?
                .ok_or(StoreError::RunNotFound { id: child_id })?;
            tx.commit().await.map_err(db(OPERATION))?;
            return Ok(StartedChild {
                step,
                child,
                created: false,
            });
        }
        let (step_id, child_id) = (Uuid::now_v7(), Uuid::now_v7());
        let insert_step = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config,
                  child_workflow_run_namespace, child_workflow_run_id,
                  started_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'running', $6, $1, $7, clock_timestamp(),
                     clock_timestamp(), clock_timestamp())
          RETURNING {STEP_COLUMNS}"
        );
        let step = sqlx::query_as::<_, StepRow>(&insert_step)
            .bind(&*self.namespace)
            .bind(step_id)
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::Child.as_str())
            .bind(params.step_config())
            .bind(child_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        let child = &params.child;
        if let Some(concurrency) = &child.concurrency {
            sqlx::query(
                "INSERT INTO tasks.concurrency_keys (namespace, concurrency_key)
                 VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(&*self.namespace)
            .bind(concurrency.key())
            .execute(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        }
        let insert_run = format!(
            "INSERT INTO tasks.workflow_runs
                 (namespace, id, workflow_name, version, status, config, context, input,
                  attempts, available_at, deadline_at, created_at, updated_at,
                  priority, concurrency_key, concurrency_limit,
                  parent_step_attempt_namespace, parent_step_attempt_id, parent_run_id,
                  cancel_with_parent, traceparent, tracestate, queue)
             VALUES ($1, $2, $3, $4, '{created}', $5, $6, $7, 0,
                     COALESCE($8, now() + $10 * INTERVAL '1 millisecond', now()), $9, now(),
                     now(), $11, $12, $13, $1, $14, $15, $16, $17, $18, $19)
          RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let child = sqlx::query_as::<_, RunRow>(&insert_run)
            .bind(&*self.namespace)
            .bind(child_id)
            .bind(&child.workflow_name)
            .bind(&child.version)
            .bind(&config)
            .bind(&child.context)
            .bind(&child.input)
            .bind(child.available_at)
            .bind(child.deadline_at)
            .bind(child.delay.map(super::millis))
            .bind(child.priority)
            .bind(child.concurrency.as_ref().map(|c| c.key().to_owned()))
            .bind(child.concurrency.as_ref().map(|c| c.stored_limit()))
            .bind(step_id)
            .bind(params.run_id)
            .bind(params.on_parent_cancel.cascades())
            .bind(child.trace_context.as_ref().map(|t| t.traceparent()))
            .bind(child.trace_context.as_ref().and_then(|t| t.tracestate()))
            .bind(child.stored_queue())
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)?;
        tx.commit().await.map_err(db(OPERATION))?;
        self.announce_now(&START_CHILD, &child).await;
        Ok(StartedChild {
            step,
            child,
            created: true,
        })
    }

    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait> {
        const OPERATION: Operation = Operation::WaitForChildren;
        check::wait_for_children(&params)?;
        let worker = Some(&params.holder);
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        match self.lock_parent(&mut tx, params.run_id, OPERATION).await? {
            Some(run) if WAIT_CHILDREN.admits(&run, worker) => {}
            current => return Err(WAIT_CHILDREN.miss(params.run_id, worker, current.as_ref())),
        }
        let sql = format!(
            "SELECT DISTINCT ON (s.step_name) {steps},
                    c.status AS child_status, c.output AS child_output, c.error AS child_error
               FROM tasks.step_attempts s
               LEFT JOIN tasks.workflow_runs c
                 ON c.namespace = s.child_workflow_run_namespace AND c.id = s.child_workflow_run_id
              WHERE s.namespace = $1 AND s.workflow_run_id = $2 AND s.kind = $3
                AND s.step_name = ANY($4)
              ORDER BY s.step_name, s.created_at DESC, s.id DESC",
            steps = super::prefixed("s", STEP_COLUMNS),
        );
        let rows = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(StepKind::Child.as_str())
            .bind(&params.step_names)
            .fetch_all(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let step = StepRow::from_row(row)
                .map_err(db(OPERATION))?
                .into_step(OPERATION)?;
            let status: Option<String> = row.try_get("child_status").map_err(db(OPERATION))?;
            let outcome = match status {
                Some(status) => ChildOutcome::from_columns(
                    status_of(&status, OPERATION)?,
                    row.try_get("child_output").map_err(db(OPERATION))?,
                    row.try_get("child_error").map_err(db(OPERATION))?,
                ),
                None => Some(missing_child()),
            };
            found.push((step, outcome));
        }
        let mut done = Vec::with_capacity(params.step_names.len());
        let mut live = 0_i32;
        for name in &params.step_names {
            let Some((step, outcome)) = found.iter().find(|(step, _)| &step.step_name == name)
            else {
                return Err(StoreError::UnknownStep {
                    run_id: params.run_id,
                    step_name: name.clone(),
                });
            };
            match outcome {
                _ if step.status == StepStatus::Completed => done.push(step.clone()),
                Some(outcome) => done.push(self.finish_child_step(&mut tx, step, outcome).await?),
                None => live += 1,
            }
        }
        if live > 0 {
            let sql = format!(
                "UPDATE tasks.workflow_runs
                    SET {parked}, updated_at = now()
                  WHERE namespace = $1 AND id = $2
              RETURNING {RUN_COLUMNS}",
                parked = PARKED_ON_CHILDREN.set_sql(
                    "now()",
                    &[
                        (Column::AvailableAt, "$3"),
                        (Column::AwaitingChildren, "$4")
                    ]
                ),
            );
            let row = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(params.run_id)
                .bind(limits::LATEST)
                .bind(live)
                .fetch_one(&mut *tx)
                .await
                .map_err(db(OPERATION))?;
            let run = decode_run(&row, OPERATION)?;
            tx.commit().await.map_err(db(OPERATION))?;
            self.announce_now(&WAIT_CHILDREN, &run).await;
            return Ok(ChildWait::Parked(run));
        }
        sqlx::query(
            "UPDATE tasks.workflow_runs SET awaiting_children = 0
              WHERE namespace = $1 AND id = $2 AND awaiting_children <> 0",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .execute(&mut *tx)
        .await
        .map_err(db(OPERATION))?;
        tx.commit().await.map_err(db(OPERATION))?;
        Ok(ChildWait::Done(done))
    }
}
