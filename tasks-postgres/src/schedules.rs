//! Schedules on Postgres: the SQL of the schedule methods of [`Store`](tasks_core::Store). The
//! firing's fence is `transition.rs`'s [`schedule_fence`]; which slots fire is decided by the
//! caller (`schedule::plan`).
//!
//! A create or put and a fire of the same schedule serialize on its row: the put locks it
//! (`FOR UPDATE`) before deciding whether `next_slot` is kept, and the fire's compare-and-set
//! is an `UPDATE` of that row, which under Read Committed re-checks its condition on the
//! latest committed version of the row.

use crate::PgStore;
use crate::reconnect::{db, retrying};
use crate::runs::insert_run;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row as _;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::schedule::{
    CatchUp, DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule, keeps_slot,
};
use tasks_core::store::{Notification, ScheduleStore, check};
use tasks_core::transition::schedule_fence;

/// Columns of `schedules`, in the order of [`ScheduleRow`].
const SCHEDULE_COLUMNS: &str = "namespace, name, workflow_name, version, cron, timezone, input, \
    catch_up, catch_up_max, paused, next_slot, created_at, updated_at";

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
struct ScheduleRow {
    namespace: String,
    name: String,
    workflow_name: String,
    version: Option<String>,
    cron: String,
    timezone: String,
    input: Value,
    catch_up: String,
    catch_up_max: Option<i32>,
    paused: bool,
    next_slot: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}
);

impl ScheduleRow {
    fn into_schedule(self, operation: Operation) -> StoreResult<Schedule> {
        let catch_up = CatchUp::from_stored(&self.catch_up, self.catch_up_max.map(i64::from))
            .ok_or_else(|| StoreError::Corrupt {
                operation,
                reason: format!(
                    "schedule {:?} has an unknown catch-up policy {:?}",
                    self.name, self.catch_up
                ),
            })?;
        Ok(Schedule {
            namespace: self.namespace,
            name: self.name,
            workflow_name: self.workflow_name,
            version: self.version,
            cron: self.cron,
            timezone: self.timezone,
            input: self.input,
            catch_up,
            paused: self.paused,
            next_slot: self.next_slot,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The bound of a catch-up policy as the `INTEGER` column holds it (checked to fit).
fn stored_max(catch_up: &CatchUp) -> Option<i32> {
    catch_up
        .stored_max()
        .and_then(|max| i32::try_from(max).ok())
}

impl PgStore {
    /// Creates the schedule, or with `replace` creates or replaces it: the body of
    /// [`ScheduleStore::create_schedule`] and [`ScheduleStore::put_schedule`].
    pub(super) async fn write_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
        replace: bool,
    ) -> StoreResult<Schedule> {
        const OPERATION: Operation = Operation::CreateSchedule;
        check::put_schedule(&self.namespace, &params)?;
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        // The insert first: it waits for a concurrent insert of the same name, so of the
        // workers that put one declarative schedule at once, one inserts and the others
        // find its row.
        let sql = format!(
            "INSERT INTO tasks.schedules
                 (namespace, name, workflow_name, version, cron, timezone, input,
                  catch_up, catch_up_max, paused, next_slot, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, FALSE, $10, now(), now())
             ON CONFLICT (namespace, name) DO NOTHING
          RETURNING {SCHEDULE_COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .bind(&params.name)
            .bind(&params.workflow_name)
            .bind(&params.version)
            .bind(&params.cron)
            .bind(&params.timezone)
            .bind(&params.input)
            .bind(params.catch_up.as_str())
            .bind(stored_max(&params.catch_up))
            .bind(first_slot(now))
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        let row = match inserted {
            Some(row) => row,
            None if !replace => return Err(StoreError::ScheduleExists { name: params.name }),
            None => {
                let existing = sqlx::query(
                    "SELECT cron, timezone, next_slot FROM tasks.schedules
                      WHERE namespace = $1 AND name = $2 FOR UPDATE",
                )
                .bind(&*self.namespace)
                .bind(&params.name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db(OPERATION))?
                .ok_or_else(|| StoreError::ScheduleNotFound {
                    name: params.name.clone(),
                })?;
                let cron: String = existing.try_get("cron").map_err(db(OPERATION))?;
                let timezone: String = existing.try_get("timezone").map_err(db(OPERATION))?;
                let kept: Option<DateTime<Utc>> =
                    existing.try_get("next_slot").map_err(db(OPERATION))?;
                let next_slot = if keeps_slot(&cron, &timezone, &params) {
                    kept
                } else {
                    first_slot(now)
                };
                let sql = format!(
                    "UPDATE tasks.schedules
                        SET workflow_name = $3, version = $4, cron = $5, timezone = $6,
                            input = $7, catch_up = $8, catch_up_max = $9, next_slot = $10,
                            updated_at = now()
                      WHERE namespace = $1 AND name = $2
                  RETURNING {SCHEDULE_COLUMNS}"
                );
                sqlx::query_as::<_, ScheduleRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.name)
                    .bind(&params.workflow_name)
                    .bind(&params.version)
                    .bind(&params.cron)
                    .bind(&params.timezone)
                    .bind(&params.input)
                    .bind(params.catch_up.as_str())
                    .bind(stored_max(&params.catch_up))
                    .bind(next_slot)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db(OPERATION))?
            }
        };
        tx.commit().await.map_err(db(OPERATION))?;
        row.into_schedule(OPERATION)
    }

    pub(super) async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> StoreResult<Schedule> {
        const OPERATION: Operation = Operation::PauseSchedule;
        check::schedule_name(name)?;
        // A repeat changes nothing, not even `updated_at`.
        let sql = format!(
            "UPDATE tasks.schedules
                SET paused = $3,
                    updated_at = CASE WHEN paused = $3 THEN updated_at ELSE now() END
              WHERE namespace = $1 AND name = $2
          RETURNING {SCHEDULE_COLUMNS}"
        );
        sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .bind(name)
            .bind(paused)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .ok_or_else(|| StoreError::ScheduleNotFound {
                name: name.to_owned(),
            })?
            .into_schedule(OPERATION)
    }
}

#[async_trait]
impl ScheduleStore for PgStore {
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.write_schedule(params, first_slot, false).await
    }

    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.write_schedule(params, first_slot, true).await
    }

    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        check::schedule_name(name)?;
        retrying(Operation::GetSchedule, move || async move {
            const OPERATION: Operation = Operation::GetSchedule;
            let sql = format!(
                "SELECT {SCHEDULE_COLUMNS} FROM tasks.schedules WHERE namespace = $1 AND name = $2"
            );
            sqlx::query_as::<_, ScheduleRow>(&sql)
                .bind(&*self.namespace)
                .bind(name)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(OPERATION))?
                .map(|row| row.into_schedule(OPERATION))
                .transpose()
        })
        .await
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        retrying(Operation::GetSchedule, move || async move {
            const OPERATION: Operation = Operation::GetSchedule;
            let sql = format!(
                "SELECT {SCHEDULE_COLUMNS} FROM tasks.schedules WHERE namespace = $1 ORDER BY name"
            );
            sqlx::query_as::<_, ScheduleRow>(&sql)
                .bind(&*self.namespace)
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?
                .into_iter()
                .map(|row| row.into_schedule(OPERATION))
                .collect()
        })
        .await
    }

    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule> {
        // A repeat changes nothing: tried again on a broken connection, like a read.
        retrying(Operation::PauseSchedule, || {
            self.set_schedule_paused(name, true)
        })
        .await
    }

    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule> {
        retrying(Operation::PauseSchedule, || {
            self.set_schedule_paused(name, false)
        })
        .await
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<()> {
        const OPERATION: Operation = Operation::DeleteSchedule;
        check::schedule_name(name)?;
        let deleted = sqlx::query("DELETE FROM tasks.schedules WHERE namespace = $1 AND name = $2")
            .bind(&*self.namespace)
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        if deleted.rows_affected() == 0 {
            return Err(StoreError::ScheduleNotFound {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        retrying(Operation::FireSchedule, move || async move {
            const OPERATION: Operation = Operation::FireSchedule;
            let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
            let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
                .fetch_one(&mut *tx)
                .await
                .map_err(db(OPERATION))?;
            let sql = format!(
                "SELECT {SCHEDULE_COLUMNS} FROM tasks.schedules
              WHERE namespace = $1 AND NOT paused AND next_slot IS NOT NULL AND next_slot <= $2
              ORDER BY next_slot LIMIT $3"
            );
            let rows = sqlx::query_as::<_, ScheduleRow>(&sql)
                .bind(&*self.namespace)
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await
                .map_err(db(OPERATION))?;
            tx.commit().await.map_err(db(OPERATION))?;
            let schedules = rows
                .into_iter()
                .map(|row| row.into_schedule(OPERATION))
                .collect::<StoreResult<_>>()?;
            Ok(DueSchedules { now, schedules })
        })
        .await
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        const OPERATION: Operation = Operation::FireSchedule;
        check::fire_schedule(&self.namespace, &params)?;
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let sql = format!(
            "UPDATE tasks.schedules SET next_slot = $4, updated_at = now()
              WHERE namespace = $1 AND name = $2 AND {fence}",
            fence = schedule_fence("$3"),
        );
        let moved = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(&params.name)
            .bind(params.slot)
            .bind(params.next_slot)
            .execute(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        if moved.rows_affected() == 0 {
            tracing::debug!(schedule = %params.name, slot = %params.slot, "schedule slot fired elsewhere");
            return Ok(None);
        }
        let mut runs = Vec::with_capacity(params.runs.len());
        for run in &params.runs {
            if let Some(row) = insert_run(&mut *tx, &self.namespace, run).await? {
                runs.push(row.into_run(OPERATION)?);
            }
        }
        tx.commit().await.map_err(db(OPERATION))?;
        if !runs.is_empty() {
            let wake_up = Notification::RunAvailable {
                namespace: self.namespace.to_string(),
            };
            self.notify_now(&[wake_up]).await;
        }
        Ok(Some(runs))
    }
}
