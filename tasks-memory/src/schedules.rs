//! Schedules: their rows, a put that keeps the slot of an unchanged schedule, and the
//! compare-and-set firing (`transition::schedule_fence`). Which slots fire is the caller's
//! decision (`schedule::plan`); the first slot is the caller's function of the store's
//! clock.

use crate::MemoryStore;
use crate::runs::{Inserted, NewRun};
use crate::tables::{storable, stored};
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::WorkflowRun;
use tasks_core::schedule::{
    DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule, fires, keeps_slot,
};
use tasks_core::store::{Notification, ScheduleStore, check};

impl MemoryStore {
    /// Creates the schedule, or with `replace` creates or replaces it: the body of
    /// [`ScheduleStore::create_schedule`] and [`ScheduleStore::put_schedule`].
    pub(crate) fn write_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
        replace: bool,
    ) -> StoreResult<Schedule> {
        self.write(|tx| {
            let now = tx.now;
            let first = || first_slot(now).map(storable).transpose();
            let existing = tx.space.schedules.get(&params.name);
            let schedule = match existing {
                Some(_) if !replace => {
                    return Err(StoreError::ScheduleExists { name: params.name });
                }
                Some(existing) => Schedule {
                    next_slot: if keeps_slot(&existing.cron, &existing.timezone, &params) {
                        existing.next_slot
                    } else {
                        first()?
                    },
                    updated_at: now,
                    workflow_name: params.workflow_name,
                    version: params.version,
                    cron: params.cron,
                    timezone: params.timezone,
                    input: params.input,
                    catch_up: params.catch_up,
                    ..existing.clone()
                },
                None => Schedule {
                    namespace: tx.namespace.to_owned(),
                    name: params.name.clone(),
                    workflow_name: params.workflow_name,
                    version: params.version,
                    cron: params.cron,
                    timezone: params.timezone,
                    input: params.input,
                    catch_up: params.catch_up,
                    paused: false,
                    next_slot: first()?,
                    created_at: now,
                    updated_at: now,
                },
            };
            tx.space
                .schedules
                .insert(schedule.name.clone(), schedule.clone());
            Ok(schedule)
        })
    }

    /// Pauses or resumes a schedule; a repeat changes nothing, not even `updated_at`.
    pub(crate) fn set_schedule_paused(&self, name: &str, paused: bool) -> StoreResult<Schedule> {
        self.write(|tx| {
            let now = tx.now;
            let schedule =
                tx.space
                    .schedules
                    .get_mut(name)
                    .ok_or_else(|| StoreError::ScheduleNotFound {
                        name: name.to_owned(),
                    })?;
            if schedule.paused != paused {
                schedule.paused = paused;
                schedule.updated_at = now;
            }
            Ok(schedule.clone())
        })
    }
}

#[async_trait]
impl ScheduleStore for MemoryStore {
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        check::put_schedule(&self.namespace, &params)?;
        self.write_schedule(params, first_slot, false)
    }

    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        check::put_schedule(&self.namespace, &params)?;
        self.write_schedule(params, first_slot, true)
    }

    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        check::schedule_name(name)?;
        Ok(self.read(|space| space.schedules.get(name).cloned()))
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        Ok(self.read(|space| space.schedules.values().cloned().collect()))
    }

    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule> {
        check::schedule_name(name)?;
        self.set_schedule_paused(name, true)
    }

    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule> {
        check::schedule_name(name)?;
        self.set_schedule_paused(name, false)
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<()> {
        check::schedule_name(name)?;
        self.write(|tx| match tx.space.schedules.remove(name) {
            Some(_) => Ok(()),
            None => Err(StoreError::ScheduleNotFound {
                name: name.to_owned(),
            }),
        })
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        // The clock of a read, as a write would take it.
        let now = stored(self.clock.now());
        let mut schedules: Vec<Schedule> = self.read(|space| {
            space
                .schedules
                .values()
                .filter(|schedule| {
                    !schedule.paused && schedule.next_slot.is_some_and(|at| at <= now)
                })
                .cloned()
                .collect()
        });
        schedules.sort_by_key(|schedule| schedule.next_slot);
        schedules.truncate(limit as usize);
        Ok(DueSchedules { now, schedules })
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        check::fire_schedule(&self.namespace, &params)?;
        let slot = storable(params.slot)?;
        let next_slot = params.next_slot.map(storable).transpose()?;
        self.write(|tx| {
            let now = tx.now;
            if !tx
                .space
                .schedules
                .get(&params.name)
                .is_some_and(|schedule| fires(schedule, slot))
            {
                return Ok(None);
            }
            let new_runs = params
                .runs
                .iter()
                .map(|run| NewRun::prepare(tx, run, uuid::Uuid::now_v7()))
                .collect::<StoreResult<Vec<NewRun>>>()?;
            if let Some(schedule) = tx.space.schedules.get_mut(&params.name) {
                schedule.next_slot = next_slot;
                schedule.updated_at = now;
            }
            let mut runs = Vec::with_capacity(new_runs.len());
            for new in new_runs {
                // A run whose idempotency key exists already is not created again.
                if let Inserted::Created(run) = new.insert(tx) {
                    runs.push(run);
                }
            }
            if !runs.is_empty() {
                tx.notes.push(Notification::RunAvailable {
                    namespace: tx.namespace.to_owned(),
                });
            }
            Ok(Some(runs))
        })
    }
}
