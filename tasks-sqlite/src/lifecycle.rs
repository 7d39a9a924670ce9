//! Lifecycle transitions of the SQLite store: cancel, pause, resume, retry from the failure,
//! fork.
//!
//! The policies are [`CANCEL`], [`PAUSE`], [`RESUME`], [`RETRY`] and [`FORK`]; this module
//! only writes them in SQLite's dialect.

use crate::rows::{RUN_COLUMNS, RunRow};
use crate::{SqliteStore, fetch_run, rows};
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult, db};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{LifecycleStore, check};
use tasks_core::transition::{
    CANCEL, CANCELED, CREATED, Column, FORK, PAUSE, PAUSED, RESUME, RESUMED, RETRIED, RETRY,
    fork_boundary,
};
use uuid::Uuid;

#[async_trait]
impl LifecycleStore for SqliteStore {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = CANCELED.set_sql("?4", &[]);
        self.transition(&CANCEL, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = PAUSED.set_sql("?4", &[]);
        self.transition(&PAUSE, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = RESUMED.set_sql("?4", &[]);
        self.transition(&RESUME, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    /// [`LifecycleStore::retry_run`], fenced by [`RETRY`], under the write
    /// lock.
    ///
    /// `started_at` is kept (a run that failed between attempts has none: it becomes the
    /// run's creation time): the claim then sees that the run executed before and loads its
    /// history, which a first execution skips.
    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = RETRIED.set_sql(
            "?4",
            &[(Column::StartedAt, "COALESCE(started_at, created_at)")],
        );
        let write = self.begin_write(RETRY.operation).await?;
        self.transition_in(write, &RETRY, &set, run_id, None, |q, _| Ok(q))
            .await
    }

    /// [`LifecycleStore::fork_run`] in one write transaction: the source
    /// run is checked against [`FORK`] under the write lock, then the new run and the copies
    /// of the attempts before the first attempt of `from_step` are inserted; on any miss
    /// nothing is written.
    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        let operation = FORK.operation;
        check::fork_run(from_step)?;
        let mut write = self.begin_write(operation).await?;
        let source = fetch_run(write.conn(), &self.namespace, run_id, operation).await?;
        match &source {
            Some(run) if FORK.admits(run, None) => {}
            current => return Err(FORK.miss(run_id, None, current.as_ref())),
        }
        // The attempts of the source, oldest first, up to the first one of `from_step`.
        let attempts: Vec<(String, String)> = sqlx::query_as(
            "SELECT id, step_name FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2
              ORDER BY created_at, id",
        )
        .bind(&*self.namespace)
        .bind(rows::id(run_id))
        .fetch_all(write.conn())
        .await
        .map_err(db(operation))?;
        let names = attempts.iter().map(|(_, name)| name.as_str());
        let Some(boundary) = fork_boundary(names, from_step) else {
            return Err(StoreError::UnknownStep {
                run_id,
                step_name: from_step.to_owned(),
            });
        };
        let forked_id = Uuid::now_v7();
        let sql = format!(
            "INSERT INTO tasks_workflow_runs
                 (namespace, id, workflow_name, version, status, config, context, input,
                  attempts, available_at, forked_from_run_id, forked_from_step,
                  created_at, updated_at, traceparent, tracestate, queue)
             SELECT namespace, ?3, workflow_name, version, '{created}', config, context, input,
                    0, ?5, id, ?4, ?5, ?5, traceparent, tracestate, queue
               FROM tasks_workflow_runs WHERE namespace = ?1 AND id = ?2
          RETURNING {RUN_COLUMNS}",
            created = CREATED.as_str(),
        );
        let row = sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(rows::id(forked_id))
            .bind(from_step)
            .bind(write.now())
            .fetch_one(write.conn())
            .await
            .map_err(db(operation))?;
        let forked = row.into_run(operation)?;
        for (attempt_id, _) in &attempts[..boundary] {
            sqlx::query(
                "INSERT INTO tasks_step_attempts
                     (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                      output, error, child_workflow_run_namespace, child_workflow_run_id,
                      started_at, finished_at, created_at, updated_at, args)
                 SELECT namespace, ?3, ?4, step_name, kind, status, config, context, output,
                        error, child_workflow_run_namespace, child_workflow_run_id, started_at,
                        finished_at, created_at, updated_at, args
                   FROM tasks_step_attempts WHERE namespace = ?1 AND id = ?2",
            )
            .bind(&*self.namespace)
            .bind(attempt_id)
            .bind(rows::id(Uuid::now_v7()))
            .bind(rows::id(forked_id))
            .execute(write.conn())
            .await
            .map_err(db(operation))?;
        }
        write.commit().await?;
        for notification in FORK.announcements(&forked) {
            self.notify(notification);
        }
        Ok(forked)
    }
}
