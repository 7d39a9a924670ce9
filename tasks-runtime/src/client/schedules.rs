//! Cron schedules of workflows, from the client: see [`crate::schedule`].

use super::start::{check_type, unit_input};
use super::{Client, ClientError};
use crate::error::StoreError;

impl Client {
    /// Creates a schedule that starts `schedule.workflow_name` (at `schedule.version`, or the
    /// latest registered version when none is given, which is then stored) on its cron
    /// expression in its timezone, with its input. The input is checked like
    /// [`Client::start_by_name`] checks a start's; its first slot is the first after now by
    /// the store's clock.
    ///
    /// Errors: [`ClientError::InvalidSchedule`] for a cron expression or timezone that does
    /// not parse, [`ClientError::UnknownWorkflow`], [`ClientError::InvalidInput`],
    /// [`ClientError::Limit`], [`ClientError::ConcurrencyKey`] (the workflow derives a key
    /// from the input, and cannot from this one), and [`StoreError::ScheduleExists`] (as [`ClientError::Store`])
    /// when the name is taken. Nothing is stored on any of them.
    pub async fn create_schedule(
        &self,
        schedule: crate::schedule::NewSchedule,
    ) -> Result<crate::schedule::Schedule, ClientError> {
        let (schedule, cadence) = self.checked_schedule(schedule)?;
        let first_slot = move |now| cadence.next_after(now);
        Ok(self
            .store
            .contract()
            .schedules()?
            .create_schedule(schedule, &first_slot)
            .await?)
    }

    /// Like [`Client::create_schedule`], but replaces a schedule of the same name (keeping
    /// its next slot while its cron expression and timezone are unchanged, and whether it
    /// is paused); see [`ScheduleStore::put_schedule`](crate::ScheduleStore::put_schedule).
    pub async fn put_schedule(
        &self,
        schedule: crate::schedule::NewSchedule,
    ) -> Result<crate::schedule::Schedule, ClientError> {
        let (schedule, cadence) = self.checked_schedule(schedule)?;
        let first_slot = move |now| cadence.next_after(now);
        Ok(self
            .store
            .contract()
            .schedules()?
            .put_schedule(schedule, &first_slot)
            .await?)
    }

    fn checked_schedule(
        &self,
        mut schedule: crate::schedule::NewSchedule,
    ) -> Result<(crate::schedule::NewSchedule, crate::schedule::Cadence), ClientError> {
        schedule.check(self.store.namespace())?;
        let cadence = crate::schedule::Cadence::parse(&schedule.cron, &schedule.timezone)?;
        let definition = match schedule.version.as_deref() {
            Some(version) => self.registry.get(&schedule.workflow_name, Some(version)),
            None => self.registry.latest(&schedule.workflow_name),
        }
        .ok_or_else(|| ClientError::UnknownWorkflow {
            name: schedule.workflow_name.clone(),
            version: schedule.version.clone(),
        })?;
        schedule.version = definition.version.map(str::to_owned);
        schedule.input = unit_input(definition, schedule.input);
        self.registry
            .validate_input(definition.name, definition.version, &schedule.input)?;
        check_type(definition, &schedule.input)?;
        // Every slot's run derives its key from this input: a key function that fails on
        // it, or a key past the limits, is refused now rather than at every slot.
        if let Some(concurrency) = definition.derived_concurrency(&schedule.input)? {
            concurrency.check()?;
        }
        Ok((schedule, cadence))
    }

    /// The schedule with this name, or `None`.
    pub async fn get_schedule(
        &self,
        name: &str,
    ) -> Result<Option<crate::schedule::Schedule>, StoreError> {
        self.store.contract().schedules()?.get_schedule(name).await
    }

    /// Every schedule of the namespace, by name.
    pub async fn list_schedules(&self) -> Result<Vec<crate::schedule::Schedule>, StoreError> {
        self.store.contract().schedules()?.list_schedules().await
    }

    /// Pauses a schedule ([`StoreError::ScheduleNotFound`] when there is none).
    pub async fn pause_schedule(
        &self,
        name: &str,
    ) -> Result<crate::schedule::Schedule, StoreError> {
        self.store
            .contract()
            .schedules()?
            .pause_schedule(name)
            .await
    }

    /// Resumes a schedule; the slots missed while it was paused go to its catch-up policy
    /// ([`StoreError::ScheduleNotFound`] when there is none).
    pub async fn resume_schedule(
        &self,
        name: &str,
    ) -> Result<crate::schedule::Schedule, StoreError> {
        self.store
            .contract()
            .schedules()?
            .resume_schedule(name)
            .await
    }

    /// Deletes a schedule; the runs it started are kept ([`StoreError::ScheduleNotFound`]
    /// when there is none).
    pub async fn delete_schedule(&self, name: &str) -> Result<(), StoreError> {
        self.store
            .contract()
            .schedules()?
            .delete_schedule(name)
            .await
    }
}
