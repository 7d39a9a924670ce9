//! Lifecycle transitions of the Postgres store: retry from the failure, fork.
//!
//! The policies are [`RETRY`] and [`FORK`]; this module only writes them in Postgres'
//! dialect.

use crate::PgStore;
use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, decode_run};
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::store::{LifecycleStore, check};
use tasks_core::transition::{
    CANCEL, CANCELED, CREATED, Column, FORK, PAUSE, PAUSED, RESUME, RESUMED, RETRIED, RETRY,
};
use uuid::Uuid;

#[async_trait]
impl LifecycleStore for PgStore {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = CANCELED.set_sql("now()", &[]);
        self.transition(&CANCEL, &set, run_id, None, |q| q).await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = PAUSED.set_sql("now()", &[]);
        self.transition(&PAUSE, &set, run_id, None, |q| q).await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = RESUMED.set_sql("now()", &[]);
        self.transition(&RESUME, &set, run_id, None, |q| q).await
    }

    /// [`LifecycleStore::retry_run`], fenced by [`RETRY`].
    ///
    /// `started_at` is kept (a run that failed between attempts has none: it becomes the
    /// run's creation time): the claim then sees that the run executed before and loads its
    /// history, which a first execution skips.
    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        let set = RETRIED.set_sql(
            "now()",
            &[(Column::StartedAt, "COALESCE(started_at, created_at)")],
        );
        self.transition(&RETRY, &set, run_id, None, |q| q).await
    }

    /// [`LifecycleStore::fork_run`] in one statement: the source run is
    /// fenced by [`FORK`], the new run and the copies of the attempts before the first
    /// attempt of `from_step` are inserted together, or nothing is. The source is locked
    /// (`FOR KEY SHARE`) so that a concurrent purge cannot delete it under the fork: the
    /// purge skips it, or the fork waits for the purge and finds the run gone.
    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        let operation = FORK.operation;
        check::fork_run(from_step)?;
        let sql = format!(
            "WITH src AS (
                 SELECT * FROM tasks.workflow_runs
                  WHERE namespace = $1 AND id = $2 AND {fence}
                    FOR KEY SHARE
             ), boundary AS (
                 SELECT s.created_at, s.id FROM tasks.step_attempts s JOIN src ON s.workflow_run_id = src.id
                  WHERE s.namespace = $1 AND s.step_name = $4
                  ORDER BY s.created_at, s.id LIMIT 1
             ), forked AS (
                 INSERT INTO tasks.workflow_runs
                     (namespace, id, workflow_name, version, status, config, context, input,
                      attempts, available_at, forked_from_run_id, forked_from_step,
                      created_at, updated_at, traceparent, tracestate, queue)
                 SELECT $1, $3, src.workflow_name, src.version, '{created}', src.config,
                        src.context, src.input, 0, now(), src.id, $4, now(), now(),
                        src.traceparent, src.tracestate, src.queue
                   FROM src, boundary
              RETURNING {RUN_COLUMNS}
             ), copied AS (
                 INSERT INTO tasks.step_attempts
                     (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                      output, error, child_workflow_run_namespace, child_workflow_run_id,
                      started_at, finished_at, created_at, updated_at, args)
                 SELECT s.namespace, gen_random_uuid(), f.id, s.step_name, s.kind, s.status,
                        s.config, s.context, s.output, s.error, s.child_workflow_run_namespace,
                        s.child_workflow_run_id, s.started_at, s.finished_at, s.created_at,
                        s.updated_at, s.args
                   FROM tasks.step_attempts s, forked f, boundary b
                  WHERE s.namespace = $1 AND s.workflow_run_id = $2
                    AND (s.created_at, s.id) < (b.created_at, b.id)
             )
             SELECT {RUN_COLUMNS} FROM forked",
            fence = FORK.fence("", "NULL", "NULL"),
            created = CREATED.as_str(),
        );
        let row = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(Uuid::now_v7())
            .bind(from_step)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(operation))?;
        if let Some(row) = row {
            let run = decode_run(&row, operation)?;
            self.announce_now(&FORK, &run).await;
            return Ok(run);
        }
        let current = self.fetch_run(run_id, operation).await?;
        match current {
            Some(run) if FORK.admits(&run, None) => Err(StoreError::UnknownStep {
                run_id,
                step_name: from_step.to_owned(),
            }),
            current => Err(FORK.miss(run_id, None, current.as_ref())),
        }
    }
}
