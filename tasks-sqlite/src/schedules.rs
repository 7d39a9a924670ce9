//! Schedules on SQLite: the SQL of the schedule methods of [`Store`](tasks_core::Store). The
//! firing's fence is `transition.rs`'s [`schedule_fence`]; which slots fire is decided by the
//! caller (`schedule::plan`). Every write holds SQLite's write lock (`BEGIN IMMEDIATE`), so a
//! put and a fire of one schedule, in this process or another, never interleave; the time is
//! the transaction's ([`Write::now`](super::Write)).

use crate::rows::{parse_json, parse_ts};
use crate::{SqliteStore, rows};
use async_trait::async_trait;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::WorkflowRun;
use tasks_core::schedule::{
    CatchUp, DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule, keeps_slot,
};
use tasks_core::store::{Notification, ScheduleStore, check};
use tasks_core::transition::schedule_fence;

/// Columns of `tasks_schedules`, in the order of [`ScheduleRow`].
const SCHEDULE_COLUMNS: &str = "namespace, name, workflow_name, version, cron, timezone, input, \
    catch_up, catch_up_max, paused, next_slot, created_at, updated_at";

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
struct ScheduleRow {
    namespace: String,
    name: String,
    workflow_name: String,
    version: Option<String>,
    cron: String,
    timezone: String,
    input: String,
    catch_up: String,
    catch_up_max: Option<i64>,
    paused: bool,
    next_slot: Option<String>,
    created_at: String,
    updated_at: String,
}
);

impl ScheduleRow {
    fn into_schedule(self, operation: Operation) -> StoreResult<Schedule> {
        let catch_up =
            CatchUp::from_stored(&self.catch_up, self.catch_up_max).ok_or_else(|| {
                StoreError::Corrupt {
                    operation,
                    reason: format!(
                        "schedule {:?} has an unknown catch-up policy {:?}",
                        self.name, self.catch_up
                    ),
                }
            })?;
        Ok(Schedule {
            input: parse_json(&self.input, operation)?,
            next_slot: self
                .next_slot
                .as_deref()
                .map(|at| parse_ts(at, operation))
                .transpose()?,
            created_at: parse_ts(&self.created_at, operation)?,
            updated_at: parse_ts(&self.updated_at, operation)?,
            namespace: self.namespace,
            name: self.name,
            workflow_name: self.workflow_name,
            version: self.version,
            cron: self.cron,
            timezone: self.timezone,
            catch_up,
            paused: self.paused,
        })
    }
}

impl SqliteStore {
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
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let existing: Option<(String, String, Option<String>)> = sqlx::query_as(
            "SELECT cron, timezone, next_slot FROM tasks_schedules
              WHERE namespace = ?1 AND name = ?2",
        )
        .bind(&*self.namespace)
        .bind(&params.name)
        .fetch_optional(write.conn())
        .await
        .map_err(db(OPERATION))?;
        let clock = write.now;
        let first = || rows::ts_opt(first_slot(clock));
        let row = match existing {
            Some(_) if !replace => {
                return Err(StoreError::ScheduleExists { name: params.name });
            }
            Some((cron, timezone, kept)) => {
                let next_slot = if keeps_slot(&cron, &timezone, &params) {
                    kept
                } else {
                    first()?
                };
                let sql = format!(
                    "UPDATE tasks_schedules
                        SET workflow_name = ?3, version = ?4, cron = ?5, timezone = ?6,
                            input = ?7, catch_up = ?8, catch_up_max = ?9, next_slot = ?10,
                            updated_at = ?11
                      WHERE namespace = ?1 AND name = ?2
                  RETURNING {SCHEDULE_COLUMNS}"
                );
                sqlx::query_as::<_, ScheduleRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.name)
                    .bind(&params.workflow_name)
                    .bind(&params.version)
                    .bind(&params.cron)
                    .bind(&params.timezone)
                    .bind(rows::json(&params.input))
                    .bind(params.catch_up.as_str())
                    .bind(params.catch_up.stored_max())
                    .bind(next_slot)
                    .bind(&now)
                    .fetch_one(write.conn())
                    .await
                    .map_err(db(OPERATION))?
            }
            None => {
                let next_slot = first()?;
                let sql = format!(
                    "INSERT INTO tasks_schedules
                         (namespace, name, workflow_name, version, cron, timezone, input,
                          catch_up, catch_up_max, paused, next_slot, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, ?11, ?11)
                  RETURNING {SCHEDULE_COLUMNS}"
                );
                sqlx::query_as::<_, ScheduleRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(&params.name)
                    .bind(&params.workflow_name)
                    .bind(&params.version)
                    .bind(&params.cron)
                    .bind(&params.timezone)
                    .bind(rows::json(&params.input))
                    .bind(params.catch_up.as_str())
                    .bind(params.catch_up.stored_max())
                    .bind(next_slot)
                    .bind(&now)
                    .fetch_one(write.conn())
                    .await
                    .map_err(db(OPERATION))?
            }
        };
        write.commit().await?;
        row.into_schedule(OPERATION)
    }

    pub(super) async fn set_schedule_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> StoreResult<Schedule> {
        const OPERATION: Operation = Operation::PauseSchedule;
        check::schedule_name(name)?;
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        // A repeat changes nothing, not even `updated_at`.
        let sql = format!(
            "UPDATE tasks_schedules
                SET paused = ?3,
                    updated_at = CASE WHEN paused = ?3 THEN updated_at ELSE ?4 END
              WHERE namespace = ?1 AND name = ?2
          RETURNING {SCHEDULE_COLUMNS}"
        );
        let row = sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .bind(name)
            .bind(paused)
            .bind(now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))?
            .ok_or_else(|| StoreError::ScheduleNotFound {
                name: name.to_owned(),
            })?;
        write.commit().await?;
        row.into_schedule(OPERATION)
    }
}

#[async_trait]
impl ScheduleStore for SqliteStore {
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
        const OPERATION: Operation = Operation::GetSchedule;
        check::schedule_name(name)?;
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} FROM tasks_schedules WHERE namespace = ?1 AND name = ?2"
        );
        sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_schedule(OPERATION))
            .transpose()
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        const OPERATION: Operation = Operation::GetSchedule;
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} FROM tasks_schedules WHERE namespace = ?1 ORDER BY name"
        );
        sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?
            .into_iter()
            .map(|row| row.into_schedule(OPERATION))
            .collect()
    }

    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.set_schedule_paused(name, true).await
    }

    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.set_schedule_paused(name, false).await
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<()> {
        const OPERATION: Operation = Operation::DeleteSchedule;
        check::schedule_name(name)?;
        let mut write = self.begin_write(OPERATION).await?;
        let deleted = sqlx::query("DELETE FROM tasks_schedules WHERE namespace = ?1 AND name = ?2")
            .bind(&*self.namespace)
            .bind(name)
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?;
        if deleted.rows_affected() == 0 {
            return Err(StoreError::ScheduleNotFound {
                name: name.to_owned(),
            });
        }
        write.commit().await
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        const OPERATION: Operation = Operation::FireSchedule;
        // The clock of a read, as a write would take it: the store's clock, to the
        // microsecond.
        let now = chrono::SubsecRound::trunc_subsecs(self.clock.now(), 6);
        let sql = format!(
            "SELECT {SCHEDULE_COLUMNS} FROM tasks_schedules
              WHERE namespace = ?1 AND paused = 0 AND next_slot IS NOT NULL AND next_slot <= ?2
              ORDER BY next_slot LIMIT ?3"
        );
        let rows = sqlx::query_as::<_, ScheduleRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::ts_bound(now))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let schedules = rows
            .into_iter()
            .map(|row| row.into_schedule(OPERATION))
            .collect::<StoreResult<_>>()?;
        Ok(DueSchedules { now, schedules })
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        const OPERATION: Operation = Operation::FireSchedule;
        check::fire_schedule(&self.namespace, &params)?;
        let slot = rows::ts(params.slot)?;
        let next_slot = rows::ts_opt(params.next_slot)?;
        let mut write = self.begin_write(OPERATION).await?;
        let now = write.now();
        let sql = format!(
            "UPDATE tasks_schedules SET next_slot = ?4, updated_at = ?5
              WHERE namespace = ?1 AND name = ?2 AND {fence}",
            fence = schedule_fence("?3"),
        );
        let moved = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(&params.name)
            .bind(slot)
            .bind(next_slot)
            .bind(now)
            .execute(write.conn())
            .await
            .map_err(db(OPERATION))?;
        if moved.rows_affected() == 0 {
            tracing::debug!(schedule = %params.name, slot = %params.slot, "schedule slot fired elsewhere");
            return Ok(None);
        }
        let mut runs = Vec::with_capacity(params.runs.len());
        for run in &params.runs {
            if let Some(row) = self.insert_run(&mut write, run).await? {
                runs.push(row.into_run(OPERATION)?);
            }
        }
        write.commit().await?;
        if !runs.is_empty() {
            self.notify(Notification::RunAvailable {
                namespace: self.namespace.to_string(),
            });
        }
        Ok(Some(runs))
    }
}
