//! Selects on Postgres: the SQL of [`SelectStore::wait_for_any`]. The policy (the fence, the
//! landing, when to park) is `tasks-core`'s [`WAIT_ANY`] and [`parks`].
//!
//! The run row is locked first (`SELECT .. FOR UPDATE`), as a send and a child's end lock
//! it: either one commits before the look (and is found), or it waits for the park (and
//! wakes the run). No wake-up is lost.
//!
//! [`SelectStore::wait_for_any`]: tasks_core::SelectStore::wait_for_any

use crate::PgStore;
use crate::db::Conn;
use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, decode_run};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row as _;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::events::EventTarget;
use tasks_core::model::StepKind;
use tasks_core::select::{AnyWait, Readiness, WaitForAny, parks};
use tasks_core::store::{SelectStore, check, status_of};
use tasks_core::transition::{Column, FINISHED, PARKED_IN_SELECT, WAIT_ANY};

const OPERATION: Operation = Operation::WaitForAny;

impl PgStore {
    /// The topics of `params` holding an unconsumed event, in their order.
    async fn topics_ready(&self, conn: &mut Conn, params: &WaitForAny) -> StoreResult<Vec<String>> {
        if params.topics.is_empty() {
            return Ok(Vec::new());
        }
        let waiting: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT topic FROM tasks.events
              WHERE namespace = $1 AND workflow_run_id = $2 AND consumed_at IS NULL
                AND topic = ANY($3)",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .bind(&params.topics)
        .fetch_all(conn)
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
        conn: &mut Conn,
        params: &WaitForAny,
    ) -> StoreResult<Vec<String>> {
        if params.child_steps.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT DISTINCT ON (s.step_name) s.step_name, s.status, c.status AS child_status
               FROM tasks.step_attempts s
               LEFT JOIN tasks.workflow_runs c
                 ON c.namespace = s.child_workflow_run_namespace AND c.id = s.child_workflow_run_id
              WHERE s.namespace = $1 AND s.workflow_run_id = $2 AND s.kind = $3
                AND s.step_name = ANY($4)
              ORDER BY s.step_name, s.created_at DESC, s.id DESC",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .bind(StepKind::Child.as_str())
        .bind(&params.child_steps)
        .fetch_all(conn)
        .await
        .map_err(db(OPERATION))?;
        let mut ready = Vec::new();
        for name in &params.child_steps {
            let Some(row) = rows
                .iter()
                .find(|row| row.try_get::<String, _>("step_name").ok().as_ref() == Some(name))
            else {
                return Err(StoreError::UnknownStep {
                    run_id: params.run_id,
                    step_name: name.clone(),
                });
            };
            let step_status: String = row.try_get("status").map_err(db(OPERATION))?;
            let child_status: Option<String> =
                row.try_get("child_status").map_err(db(OPERATION))?;
            let ended = step_status == "completed"
                || match child_status {
                    Some(status) => FINISHED.contains(&status_of(&status, OPERATION)?),
                    None => true,
                };
            if ended {
                ready.push(name.clone());
            }
        }
        Ok(ready)
    }
}

#[async_trait]
impl SelectStore for PgStore {
    async fn wait_for_any(&self, params: WaitForAny) -> StoreResult<AnyWait> {
        check::wait_for_any(&params)?;
        let worker = Some(&params.holder);
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let target = EventTarget::Run(params.run_id);
        match self.lock_run(&mut tx, &target, OPERATION).await? {
            Some(run) if WAIT_ANY.admits(&run, worker) => {}
            current => return Err(WAIT_ANY.miss(params.run_id, worker, current.as_ref())),
        }
        let topics = self.topics_ready(&mut tx, &params).await?;
        let children = self.children_ready(&mut tx, &params).await?;
        let now: DateTime<Utc> = sqlx::query("SELECT clock_timestamp()")
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .try_get(0)
            .map_err(db(OPERATION))?;
        let readiness = Readiness {
            topics,
            children,
            now,
        };
        if parks(&readiness, params.until, params.park) {
            let sql = format!(
                "UPDATE tasks.workflow_runs
                    SET {parked}, updated_at = now()
                  WHERE namespace = $1 AND id = $2
              RETURNING {RUN_COLUMNS}",
                parked = PARKED_IN_SELECT.set_sql(
                    "now()",
                    &[
                        (Column::AvailableAt, "$3"),
                        (Column::WaitTopic, "$4"),
                        (Column::AwaitingChildren, "$5"),
                    ]
                ),
            );
            let row = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(params.run_id)
                .bind(params.until)
                .bind(params.park_topic())
                .bind(i32::try_from(params.awaiting_children()).unwrap_or(1))
                .fetch_one(&mut *tx)
                .await
                .map_err(db(OPERATION))?;
            let run = decode_run(&row, OPERATION)?;
            tx.commit().await.map_err(db(OPERATION))?;
            self.announce_now(&WAIT_ANY, &run).await;
            return Ok(AnyWait::Parked(Box::new(run)));
        }
        sqlx::query(
            "UPDATE tasks.workflow_runs SET wait_topic = NULL, awaiting_children = 0
              WHERE namespace = $1 AND id = $2
                AND (wait_topic IS NOT NULL OR awaiting_children <> 0)",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .execute(&mut *tx)
        .await
        .map_err(db(OPERATION))?;
        tx.commit().await.map_err(db(OPERATION))?;
        Ok(AnyWait::Ready(readiness))
    }
}
