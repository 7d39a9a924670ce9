//! Child workflows on SQLite: the SQL of [`ChildStore::start_child`] and
//! [`ChildStore::wait_for_children`], and the parent wake-up and cancel cascade that
//! [`SqliteStore::transition_in`] runs in the transaction of every finishing transition.
//! The policy is `transition.rs`'s [`START_CHILD`], [`WAIT_CHILDREN`] and
//! [`WAKE_PARENT`](tasks_core::transition::WAKE_PARENT).
//!
//! Every write holds SQLite's write lock, so a child finishing and its parent parking
//! serialize: the last child always finds its parent parked, or the parent finds it
//! finished.
//!
//! [`ChildStore::start_child`]: tasks_core::ChildStore::start_child
//! [`ChildStore::wait_for_children`]: tasks_core::ChildStore::wait_for_children

use crate::rows::{RUN_COLUMNS, RunRow, STEP_COLUMNS, StepRow};
use crate::{SqliteStore, Write, fetch_run, rows};
use async_trait::async_trait;
use tasks_core::children::{
    ChildOutcome, ChildWait, StartChild, StartedChild, WaitForChildren, missing_child,
};
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::limits;
use tasks_core::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use tasks_core::store::{ChildStore, Notification, check};
use tasks_core::transition::{
    CANCELED, CASCADE_FROM, CREATED, Column, FINISHED, PARKED_ON_CHILDREN, START_CHILD,
    WAIT_CHILDREN, status_in, wake_parent_set,
};
use uuid::Uuid;

impl SqliteStore {
    /// In the transaction of a transition that just left `run` as it is: when `run` is a
    /// finished child, wakes its parent ([`WAKE_PARENT`](tasks_core::transition::WAKE_PARENT));
    /// when `cascade` (a cancel), cancels its cascading live descendants. Returns the
    /// notifications to send once committed.
    pub(super) async fn after_finish(
        &self,
        write: &mut Write<'_>,
        run: &WorkflowRun,
        cascade: bool,
        operation: Operation,
    ) -> StoreResult<Vec<Notification>> {
        let mut notes = Vec::new();
        if !FINISHED.contains(&run.status) {
            return Ok(notes);
        }
        let now = write.now();
        if let Some(parent) = run.parent_run_id {
            notes.push(self.wake_parent(write, parent, operation).await?);
        }
        if cascade {
            let sql = format!(
                "UPDATE tasks_workflow_runs
                    SET {canceled}, updated_at = ?3
                  WHERE namespace = ?1 AND {live} AND id IN (
                        WITH RECURSIVE tree (id) AS (
                            SELECT c.id FROM tasks_workflow_runs c
                             WHERE c.namespace = ?1 AND c.parent_run_id = ?2
                               AND c.cancel_with_parent
                            UNION
                            SELECT c.id FROM tasks_workflow_runs c
                              JOIN tree t ON c.parent_run_id = t.id
                             WHERE c.namespace = ?1 AND c.cancel_with_parent)
                        SELECT id FROM tree)
              RETURNING id",
                live = status_in("", CASCADE_FROM),
                canceled = CANCELED.set_sql("?3", &[]),
            );
            let ids: Vec<String> = sqlx::query_scalar(&sql)
                .bind(&*self.namespace)
                .bind(rows::id(run.id))
                .bind(&now)
                .fetch_all(write.conn())
                .await
                .map_err(db(operation))?;
            for id in ids {
                notes.push(Notification::RunFinished {
                    namespace: run.namespace.clone(),
                    run_id: rows::parse_id(&id, operation)?,
                });
            }
        }
        Ok(notes)
    }

    /// In the transaction `write`, counts down run `parent` by one child that just ended
    /// ([`WAKE_PARENT`](tasks_core::transition::WAKE_PARENT)), waking it when that was the last
    /// child it waits for. Returns the wake-up to announce once committed.
    pub(super) async fn wake_parent(
        &self,
        write: &mut Write<'_>,
        parent: Uuid,
        operation: Operation,
    ) -> StoreResult<Notification> {
        let sql = format!(
            "UPDATE tasks_workflow_runs SET {set}, updated_at = ?3
              WHERE namespace = ?1 AND id = ?2",
            set = wake_parent_set("", "?3", "1"),
        );
        let now = write.now();
        sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(parent))
            .bind(&now)
            .execute(write.conn())
            .await
            .map_err(db(operation))?;
        Ok(Notification::RunAvailable {
            namespace: self.namespace.to_string(),
        })
    }

    /// Completes the child step `step` with the child's `outcome`.
    async fn finish_child_step(
        &self,
        write: &mut Write<'_>,
        step: &StepAttempt,
        outcome: &ChildOutcome,
    ) -> StoreResult<StepAttempt> {
        const OPERATION: Operation = Operation::WaitForChildren;
        let sql = format!(
            "UPDATE tasks_step_attempts
                SET status = 'completed', output = ?3, finished_at = ?4, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2
          RETURNING {STEP_COLUMNS}"
        );
        let now = write.now();
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(step.id))
            .bind(rows::json(&outcome.to_output()))
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)
    }
}

#[async_trait]
impl ChildStore for SqliteStore {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        const OPERATION: Operation = Operation::StartChild;
        check::start_child(&self.namespace, &params)?;
        let config = params.child.stored_config()?;
        let available_at = rows::ts_opt(params.child.available_at)?;
        let deadline_at = rows::ts_opt(params.child.deadline_at)?;
        let worker = Some(&params.holder);
        let mut write = self.begin_write(OPERATION).await?;
        match fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await? {
            Some(run) if START_CHILD.admits(&run, worker) => {}
            current => return Err(START_CHILD.miss(params.run_id, worker, current.as_ref())),
        }
        let existing = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3 AND kind = ?4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let existing = sqlx::query_as::<_, StepRow>(&existing)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::Child.as_str())
            .fetch_optional(write.conn())
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
            let child = fetch_run(write.conn(), &self.namespace, child_id, OPERATION)
                .await?
                .ok_or(StoreError::RunNotFound { id: child_id })?;
            write.commit().await?;
            return Ok(StartedChild {
                step,
                child,
                created: false,
            });
        }
        let now = write.now();
        let (step_id, child_id) = (Uuid::now_v7(), Uuid::now_v7());
        let insert_step = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config,
                  child_workflow_run_namespace, child_workflow_run_id,
                  started_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?1, ?7, ?8, ?8, ?8)
          RETURNING {STEP_COLUMNS}"
        );
        let step = sqlx::query_as::<_, StepRow>(&insert_step)
            .bind(&*self.namespace)
            .bind(rows::id(step_id))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::Child.as_str())
            .bind(rows::json(&params.step_config()))
            .bind(rows::id(child_id))
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        let child = &params.child;
        let available_at = match (available_at, child.delay) {
            (None, Some(delay)) => Some(write.now_plus(delay)?),
            (available_at, _) => available_at,
        };
        let insert_run = format!(
            "INSERT INTO tasks_workflow_runs
                 (namespace, id, workflow_name, version, status, config, context, input,
                  attempts, available_at, deadline_at, created_at, updated_at,
                  priority, concurrency_key, concurrency_limit,
                  parent_step_attempt_namespace, parent_step_attempt_id, parent_run_id,
                  cancel_with_parent, traceparent, tracestate, queue)
             VALUES (?1, ?2, ?3, ?4, '{created}', ?5, ?6, ?7, 0, COALESCE(?8, ?10), ?9, ?10, ?10,
                     ?11, ?12, ?13, ?1, ?14, ?15, ?16, ?17, ?18, ?19)
          RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let child = sqlx::query_as::<_, RunRow>(&insert_run)
            .bind(&*self.namespace)
            .bind(rows::id(child_id))
            .bind(&child.workflow_name)
            .bind(&child.version)
            .bind(rows::json(&config))
            .bind(rows::json_opt(child.context.as_ref()))
            .bind(rows::json_opt(child.input.as_ref()))
            .bind(available_at)
            .bind(deadline_at)
            .bind(&now)
            .bind(child.priority)
            .bind(child.concurrency.as_ref().map(|c| c.key().to_owned()))
            .bind(child.concurrency.as_ref().map(|c| c.stored_limit()))
            .bind(rows::id(step_id))
            .bind(rows::id(params.run_id))
            .bind(params.on_parent_cancel.cascades())
            .bind(child.trace_context.as_ref().map(|t| t.traceparent()))
            .bind(child.trace_context.as_ref().and_then(|t| t.tracestate()))
            .bind(child.stored_queue())
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)?;
        write.commit().await?;
        for notification in START_CHILD.announcements(&child) {
            self.notify(notification);
        }
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
        let mut write = self.begin_write(OPERATION).await?;
        match fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await? {
            Some(run) if WAIT_CHILDREN.admits(&run, worker) => {}
            current => return Err(WAIT_CHILDREN.miss(params.run_id, worker, current.as_ref())),
        }
        let step_sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3 AND kind = ?4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let mut done = Vec::with_capacity(params.step_names.len());
        let mut live = 0_i64;
        for name in &params.step_names {
            let step = sqlx::query_as::<_, StepRow>(&step_sql)
                .bind(&*self.namespace)
                .bind(rows::id(params.run_id))
                .bind(name)
                .bind(StepKind::Child.as_str())
                .fetch_optional(write.conn())
                .await
                .map_err(db(OPERATION))?
                .map(|row| row.into_step(OPERATION))
                .transpose()?
                .ok_or_else(|| StoreError::UnknownStep {
                    run_id: params.run_id,
                    step_name: name.clone(),
                })?;
            if step.status == StepStatus::Completed {
                done.push(step);
                continue;
            }
            let child = match step.child_workflow_run_id {
                Some(id) => fetch_run(write.conn(), &self.namespace, id, OPERATION).await?,
                None => None,
            };
            let outcome = match &child {
                Some(child) => ChildOutcome::of(child),
                None => Some(missing_child()),
            };
            match outcome {
                Some(outcome) => {
                    done.push(self.finish_child_step(&mut write, &step, &outcome).await?)
                }
                None => live += 1,
            }
        }
        let now = write.now();
        if live > 0 {
            let sql = format!(
                "UPDATE tasks_workflow_runs
                    SET {parked}, updated_at = ?5
                  WHERE namespace = ?1 AND id = ?2
              RETURNING {RUN_COLUMNS}",
                parked = PARKED_ON_CHILDREN.set_sql(
                    "?5",
                    &[
                        (Column::AvailableAt, "?3"),
                        (Column::AwaitingChildren, "?4")
                    ]
                ),
            );
            let run = sqlx::query_as::<_, RunRow>(&sql)
                .bind(&*self.namespace)
                .bind(rows::id(params.run_id))
                .bind(rows::ts(limits::LATEST)?)
                .bind(live)
                .bind(&now)
                .fetch_one(write.conn())
                .await
                .map_err(db(OPERATION))?
                .into_run(OPERATION)?;
            write.commit().await?;
            for notification in WAIT_CHILDREN.announcements(&run) {
                self.notify(notification);
            }
            return Ok(ChildWait::Parked(run));
        }
        sqlx::query(
            "UPDATE tasks_workflow_runs SET awaiting_children = 0
              WHERE namespace = ?1 AND id = ?2 AND awaiting_children <> 0",
        )
        .bind(&*self.namespace)
        .bind(rows::id(params.run_id))
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await?;
        Ok(ChildWait::Done(done))
    }
}
