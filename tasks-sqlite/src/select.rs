//! Selects on SQLite: the SQL of [`SelectStore::wait_for_any`]. The policy (the fence, the
//! landing, when to park) is `tasks-core`'s [`WAIT_ANY`] and [`parks`].
//!
//! The write lock is held from the look to the park, so a send or a child's end either
//! comes before it (and is found) or after the park (and wakes the run).
//!
//! [`SelectStore::wait_for_any`]: tasks_core::SelectStore::wait_for_any

use crate::rows::{RUN_COLUMNS, RunRow, STEP_COLUMNS, StepRow};
use crate::{SqliteStore, Write, fetch_run, rows};
use async_trait::async_trait;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::{StepKind, StepStatus};
use tasks_core::select::{AnyWait, Readiness, WaitForAny, parks};
use tasks_core::store::{SelectStore, check};
use tasks_core::transition::{Column, FINISHED, PARKED_IN_SELECT, WAIT_ANY};

const OPERATION: Operation = Operation::WaitForAny;

impl SqliteStore {
    /// The topics of `params` holding an unconsumed event, in their order.
    async fn topics_ready(
        &self,
        write: &mut Write<'_>,
        params: &WaitForAny,
    ) -> StoreResult<Vec<String>> {
        if params.topics.is_empty() {
            return Ok(Vec::new());
        }
        let waiting: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT topic FROM tasks_events
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND consumed_at IS NULL",
        )
        .bind(&*self.namespace)
        .bind(rows::id(params.run_id))
        .fetch_all(write.conn())
        .await
        .map_err(db(OPERATION))?;
        Ok(params
            .topics
            .iter()
            .filter(|topic| waiting.contains(topic))
            .cloned()
            .collect())
    }

    /// The child steps of `params` whose child has ended (or whose step is completed, or
    /// whose child is gone), in their order.
    async fn children_ready(
        &self,
        write: &mut Write<'_>,
        params: &WaitForAny,
    ) -> StoreResult<Vec<String>> {
        let step_sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3 AND kind = ?4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let mut ready = Vec::new();
        for name in &params.child_steps {
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
            let ended = if step.status == StepStatus::Completed {
                true
            } else {
                match step.child_workflow_run_id {
                    Some(id) => fetch_run(write.conn(), &self.namespace, id, OPERATION)
                        .await?
                        .is_none_or(|child| FINISHED.contains(&child.status)),
                    None => true,
                }
            };
            if ended {
                ready.push(name.clone());
            }
        }
        Ok(ready)
    }
}

#[async_trait]
impl SelectStore for SqliteStore {
    async fn wait_for_any(&self, params: WaitForAny) -> StoreResult<AnyWait> {
        check::wait_for_any(&params)?;
        let worker = Some(&params.holder);
        let mut write = self.begin_write(OPERATION).await?;
        match fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await? {
            Some(run) if WAIT_ANY.admits(&run, worker) => {}
            current => return Err(WAIT_ANY.miss(params.run_id, worker, current.as_ref())),
        }
        let readiness = Readiness {
            topics: self.topics_ready(&mut write, &params).await?,
            children: self.children_ready(&mut write, &params).await?,
            now: write.instant(),
        };
        let now = write.now();
        if parks(&readiness, params.until, params.park) {
            let sql = format!(
                "UPDATE tasks_workflow_runs
                    SET {parked}, updated_at = ?6
                  WHERE namespace = ?1 AND id = ?2
              RETURNING {RUN_COLUMNS}",
                parked = PARKED_IN_SELECT.set_sql(
                    "?6",
                    &[
                        (Column::AvailableAt, "?3"),
                        (Column::WaitTopic, "?4"),
                        (Column::AwaitingChildren, "?5"),
                    ]
                ),
            );
            let run = sqlx::query_as::<_, RunRow>(&sql)
                .bind(&*self.namespace)
                .bind(rows::id(params.run_id))
                .bind(rows::ts(params.until)?)
                .bind(params.park_topic())
                .bind(i64::from(params.awaiting_children()))
                .bind(&now)
                .fetch_one(write.conn())
                .await
                .map_err(db(OPERATION))?
                .into_run(OPERATION)?;
            write.commit().await?;
            for notification in WAIT_ANY.announcements(&run) {
                self.notify(notification);
            }
            return Ok(AnyWait::Parked(Box::new(run)));
        }
        sqlx::query(
            "UPDATE tasks_workflow_runs SET wait_topic = NULL, awaiting_children = 0
              WHERE namespace = ?1 AND id = ?2
                AND (wait_topic IS NOT NULL OR awaiting_children <> 0)",
        )
        .bind(&*self.namespace)
        .bind(rows::id(params.run_id))
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await?;
        Ok(AnyWait::Ready(readiness))
    }
}
