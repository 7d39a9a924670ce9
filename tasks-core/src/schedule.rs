//! Schedules: a workflow started on a cron expression, in a timezone, with
//! each slot fired exactly once however many workers run.
//!
//! A [`Schedule`] is a row of the store, named per namespace. Its `next_slot` is the next
//! instant it fires. Every worker's scheduler ticks (see
//! `WorkerBuilder::schedule_tick`): it reads
//! the schedules that are due by the store's clock ([`ScheduleStore::due_schedules`]), decides in
//! Rust which slots to start runs for ([`plan`], the catch-up policy) and hands that to
//! [`ScheduleStore::fire_schedule`], which in one transaction moves `next_slot` forward *only if it
//! is still the value the tick read* (compare-and-set) and creates the runs. Of two workers
//! that read the same slot, one moves it and starts the runs; the other's compare-and-set
//! misses and it starts nothing. Each run's idempotency key is derived from the schedule
//! and the slot ([`slot_key`]), a second guard against a slot starting twice.
//!
//! The slot a run was started for is in its context ([`slot_context`]) and reads back with
//! `WorkflowContext::scheduled_at`.
//!
//! The data types and the store contract are always compiled; parsing cron expressions and
//! timezones ([`Cadence`]) and the worker's scheduler need the `schedules` feature.
//!
//! [`ScheduleStore::due_schedules`]: crate::ScheduleStore::due_schedules
//! [`ScheduleStore::fire_schedule`]: crate::ScheduleStore::fire_schedule
// Without the `schedules` feature `plan` and `Cadence` do not exist: their names then
// point at this module, so that the docs build with any set of features.
#![cfg_attr(
    not(feature = "schedules"),
    doc = "\n[`plan`]: self\n[`Cadence`]: self"
)]

#[cfg(doc)]
use crate::{Notification, StoreError};
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::StoreResult;
use crate::limits::{self, Field, LimitError};
use crate::model::WorkflowRun;
use crate::store::runs::CreateRun;

/// What a schedule does with the slots it missed (the workers were down, or the schedule
/// was paused): slots whose time passed before a scheduler tick saw them.
///
/// Whatever the policy, the slot that is due when a tick looks is fired if it is on time
/// (less than [`ON_TIME`] late), and `next_slot` moves to the first slot after the store's
/// clock. The default is [`CatchUp::Latest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CatchUp {
    /// Missed slots are dropped: only a slot less than [`ON_TIME`] late starts a run.
    Skip,
    /// Of the missed slots, the latest one starts a run (however late); the older ones are
    /// dropped. The default: a job that runs "every 5 minutes" runs once after an outage.
    #[default]
    Latest,
    /// Every missed slot starts a run, oldest first, up to the latest `max` slots (at most
    /// [`limits::MAX_CATCH_UP`]); older ones are dropped.
    All {
        /// The most slots one catch-up starts runs for.
        max: u32,
    },
}

/// How late a slot may be and still count as on time for [`CatchUp::Skip`]: a tick that ran
/// a little late (a busy worker, a slow database) still fires the current slot.
pub const ON_TIME: std::time::Duration = std::time::Duration::from_secs(30);

impl CatchUp {
    /// The stored name of the policy: `skip`, `latest` or `all`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::Latest => "latest",
            CatchUp::All { .. } => "all",
        }
    }

    /// The bound of [`CatchUp::All`], as stored.
    pub fn stored_max(&self) -> Option<i64> {
        match self {
            CatchUp::All { max } => Some(i64::from(*max)),
            _ => None,
        }
    }

    /// The policy from its stored name and bound; `None` for an unknown name.
    pub fn from_stored(name: &str, max: Option<i64>) -> Option<CatchUp> {
        match name {
            "skip" => Some(CatchUp::Skip),
            "latest" => Some(CatchUp::Latest),
            "all" => Some(CatchUp::All {
                max: u32::try_from(max?).ok()?,
            }),
            _ => None,
        }
    }

    /// Checks the bound of [`CatchUp::All`]: 1..=[`limits::MAX_CATCH_UP`].
    pub fn check(&self) -> Result<(), LimitError> {
        match self {
            CatchUp::All { max } if *max == 0 || *max > limits::MAX_CATCH_UP => {
                Err(LimitError::OutOfRange {
                    field: Field::CatchUp,
                    value: i64::from(*max),
                    min: 1,
                    max: i64::from(limits::MAX_CATCH_UP),
                })
            }
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for CatchUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatchUp::All { max } => write!(f, "all (up to {max})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The namespace it fires in.
    pub namespace: String,
    /// Its name, unique in the namespace. A declarative schedule is named after its
    /// workflow.
    pub name: String,
    /// The workflow it starts.
    pub workflow_name: String,
    /// The workflow version it starts, if versioned.
    pub version: Option<String>,
    /// The cron expression (5 fields, or 6 with seconds first).
    pub cron: String,
    /// The IANA timezone the cron expression is read in (`UTC`, `Europe/Paris`).
    pub timezone: String,
    /// The input of every run it starts.
    pub input: Value,
    /// What it does with missed slots.
    pub catch_up: CatchUp,
    /// A paused schedule fires nothing; the slots that pass meanwhile are missed slots when
    /// it is resumed.
    pub paused: bool,
    /// The next slot it fires; `None` when the cron expression has no slot left.
    pub next_slot: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last changed (created, put, paused, resumed or fired).
    pub updated_at: DateTime<Utc>,
}

/// Parameters of [`ScheduleStore::create_schedule`] and
/// [`ScheduleStore::put_schedule`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewSchedule {
    /// The schedule's name.
    pub name: String,
    /// The workflow it starts.
    pub workflow_name: String,
    /// The workflow version it starts, if versioned.
    pub version: Option<String>,
    /// The cron expression.
    pub cron: String,
    /// The IANA timezone.
    pub timezone: String,
    /// The input of every run.
    pub input: Value,
    /// What it does with missed slots.
    pub catch_up: CatchUp,
}

impl NewSchedule {
    /// Checks every value against the [`limits`]. A store reaches it through its operation's
    /// function in [`store::check`](crate::store::check). (Whether the cron expression and the
    /// timezone mean anything is decided before the store is called, by `Cadence`, which
    /// the `schedules` feature brings.)
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_namespace(namespace)?;
        check_name(&self.name)?;
        limits::check_text(
            Field::WorkflowName,
            &self.workflow_name,
            limits::MAX_WORKFLOW_NAME_BYTES,
        )?;
        if let Some(version) = &self.version {
            limits::check_text(Field::Version, version, limits::MAX_VERSION_BYTES)?;
        }
        limits::check_text(Field::Cron, &self.cron, limits::MAX_CRON_BYTES)?;
        limits::check_text(Field::Timezone, &self.timezone, limits::MAX_TIMEZONE_BYTES)?;
        limits::check_json(Field::Input, &self.input)?;
        self.catch_up.check()
    }
}

/// Checks a schedule name against the [`limits`].
pub fn check_name(name: &str) -> Result<(), LimitError> {
    limits::check_text(Field::ScheduleName, name, limits::MAX_SCHEDULE_NAME_BYTES)
}

/// The first slot of a schedule after an instant: what a store calls, with its own clock,
/// to set `next_slot` of a new schedule (or of one whose cron expression or timezone
/// changed). `None`: the expression has no slot left.
pub type NextSlot<'a> = &'a (dyn Fn(DateTime<Utc>) -> Option<DateTime<Utc>> + Send + Sync);

/// What [`ScheduleStore::due_schedules`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct DueSchedules {
    /// The store's clock when it looked.
    pub now: DateTime<Utc>,
    /// The schedules that are not paused and whose `next_slot` is at or before `now`.
    pub schedules: Vec<Schedule>,
}

/// Parameters of [`ScheduleStore::fire_schedule`].
#[derive(Debug, Clone)]
pub struct FireSchedule {
    /// The schedule.
    pub name: String,
    /// The `next_slot` the firer read: the fire applies only while it is still that.
    pub slot: DateTime<Utc>,
    /// The `next_slot` to set (`None`: the expression has no slot left).
    pub next_slot: Option<DateTime<Utc>>,
    /// The runs to create (each with its slot's idempotency key).
    pub runs: Vec<CreateRun>,
}

impl FireSchedule {
    /// Checks the name, the instants and every run against the [`limits`].
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        check_name(&self.name)?;
        limits::check_time(Field::AvailableAt, self.slot)?;
        if let Some(next) = self.next_slot {
            limits::check_time(Field::AvailableAt, next)?;
        }
        for run in &self.runs {
            run.check(namespace)?;
        }
        Ok(())
    }
}

/// The idempotency key of the run of schedule `name` for `slot`:
/// `schedule/{name}/{slot in RFC 3339}`.
pub fn slot_key(name: &str, slot: DateTime<Utc>) -> String {
    format!(
        "schedule/{name}/{}",
        slot.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

/// The context of the run of schedule `name` for `slot`:
/// `{"schedule": name, "scheduledAt": slot}`.
pub fn slot_context(name: &str, slot: DateTime<Utc>) -> Value {
    serde_json::json!({
        "schedule": name,
        "scheduledAt": slot.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    })
}

/// The slot a run's context ([`slot_context`]) names, if a schedule started the run.
pub fn scheduled_at(context: Option<&Value>) -> Option<DateTime<Utc>> {
    let context = context?;
    context.get("schedule")?.as_str()?;
    let at = context.get("scheduledAt")?.as_str()?;
    DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// The runs of `schedule` for `slots`, each with [`slot_key`] and [`slot_context`].
/// `retry_policy` is the workflow's, when the firer knows the workflow.
pub fn slot_runs(
    schedule: &Schedule,
    slots: &[DateTime<Utc>],
    retry_policy: Option<crate::retry::RetryPolicy>,
) -> Vec<CreateRun> {
    slots
        .iter()
        .map(|slot| CreateRun {
            version: schedule.version.clone(),
            input: Some(schedule.input.clone()),
            context: Some(slot_context(&schedule.name, *slot)),
            idempotency_key: Some(slot_key(&schedule.name, *slot)),
            retry_policy,
            ..CreateRun::new(schedule.workflow_name.clone())
        })
        .collect()
}

#[cfg(feature = "schedules")]
mod cadence;

#[cfg(feature = "schedules")]
pub use cadence::{Cadence, FirePlan, ScheduleError, plan};

/// Cron schedules (see the module docs). A capability: reached through
/// [`Store::schedules`](crate::Store::schedules).
#[async_trait::async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Creates a schedule, not paused, whose `next_slot` is `first_slot` of the store's
    /// clock.
    ///
    /// Errors: [`StoreError::ScheduleExists`] when the name is taken in this namespace
    /// (nothing is changed).
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule>;

    /// Creates or replaces a schedule (the worker's path for declarative schedules), in one
    /// transaction. A new schedule is created as by [`ScheduleStore::create_schedule`]. An existing
    /// one takes the new workflow, version, input and catch-up policy and keeps whether it
    /// is paused; its `next_slot` is kept while the cron expression and the timezone are
    /// unchanged (a restart of the workers neither skips nor repeats a slot), and is
    /// `first_slot` of the store's clock when either changed.
    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule>;

    /// The schedule with this name, or `None`.
    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>>;

    /// Every schedule of this namespace, by name.
    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>>;

    /// Pauses a schedule: it fires nothing until it is resumed. Pausing a paused schedule
    /// returns it as it is.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule>;

    /// Resumes a paused schedule. Its `next_slot` is kept: the slots that passed while it
    /// was paused are missed slots, and its catch-up policy decides what the next tick does
    /// with them. Resuming a schedule that is not paused returns it as it is.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule>;

    /// Deletes a schedule. The runs it started are kept.
    ///
    /// Errors: [`StoreError::ScheduleNotFound`].
    async fn delete_schedule(&self, name: &str) -> StoreResult<()>;

    /// Up to `limit` schedules that are not paused and whose `next_slot` is at or before the
    /// store's clock (earliest first), with that clock.
    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules>;

    /// Fires a slot of a schedule, in one transaction: moves the schedule's `next_slot` from
    /// `params.slot` to `params.next_slot`, only if it is still `params.slot` and the
    /// schedule is not paused (compare-and-set), and then creates `params.runs` (a run
    /// whose idempotency key exists already is not created again) and announces them with
    /// [`Notification::RunAvailable`]. Returns the runs created, or `None` when the
    /// compare-and-set missed (another firer moved the slot first, the schedule was paused,
    /// changed or deleted): then nothing was written. Of concurrent fires of one slot, at
    /// most one returns `Some`.
    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>>;
}

/// Whether a put of `new` over a stored schedule of cron expression `cron` and timezone
/// `timezone` keeps its `next_slot`: while both are unchanged, so that a restart of the
/// workers (which puts every schedule again) neither skips nor repeats a slot. Otherwise the
/// slot is computed again from the store's clock. Either way the other fields are replaced
/// and `paused` is kept.
pub fn keeps_slot(cron: &str, timezone: &str, new: &NewSchedule) -> bool {
    cron == new.cron && timezone == new.timezone
}

/// Whether a firing of `slot` passes the schedule's fence
/// ([`transition::schedule_fence`](crate::transition::schedule_fence) in SQL): it is not
/// paused and its `next_slot` is still `slot`.
pub fn fires(schedule: &Schedule, slot: DateTime<Utc>) -> bool {
    !schedule.paused && schedule.next_slot == Some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_up_round_trips_through_its_stored_form() {
        for policy in [CatchUp::Skip, CatchUp::Latest, CatchUp::All { max: 7 }] {
            assert_eq!(
                CatchUp::from_stored(policy.as_str(), policy.stored_max()),
                Some(policy)
            );
        }
        assert_eq!(CatchUp::from_stored("sometimes", None), None);
        assert_eq!(CatchUp::from_stored("all", None), None);
        assert!(CatchUp::All { max: 0 }.check().is_err());
        assert!(
            CatchUp::All {
                max: limits::MAX_CATCH_UP + 1
            }
            .check()
            .is_err()
        );
        assert_eq!(CatchUp::default(), CatchUp::Latest);
    }

    #[test]
    fn the_slot_reads_back_from_the_context() {
        let slot = DateTime::parse_from_rfc3339("2026-03-29T01:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            scheduled_at(Some(&slot_context("nightly", slot))),
            Some(slot)
        );
        assert_eq!(scheduled_at(Some(&serde_json::json!({"a": 1}))), None);
        assert_eq!(scheduled_at(None), None);
        assert_eq!(
            slot_key("nightly", slot),
            "schedule/nightly/2026-03-29T01:30:00.000000Z"
        );
    }

    fn nightly() -> Schedule {
        let now = Utc::now();
        Schedule {
            namespace: "n".into(),
            name: "nightly".into(),
            workflow_name: "report".into(),
            version: None,
            cron: "0 0 * * *".into(),
            timezone: "UTC".into(),
            input: serde_json::json!({}),
            catch_up: CatchUp::Latest,
            paused: false,
            next_slot: Some(now),
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn a_put_keeps_the_slot_of_the_same_cadence() {
        let existing = nightly();
        let mut new = NewSchedule {
            name: existing.name.clone(),
            workflow_name: "other".into(),
            version: Some("2".into()),
            cron: existing.cron.clone(),
            timezone: existing.timezone.clone(),
            input: serde_json::json!({ "changed": true }),
            catch_up: CatchUp::Skip,
        };
        let keeps = |new: &NewSchedule| keeps_slot(&existing.cron, &existing.timezone, new);
        assert!(keeps(&new));
        new.timezone = "Europe/Paris".into();
        assert!(!keeps(&new));
        new.timezone = existing.timezone.clone();
        new.cron = "0 1 * * *".into();
        assert!(!keeps(&new));
    }

    #[test]
    fn only_the_slot_read_fires_and_never_while_paused() {
        let mut schedule = nightly();
        let slot = schedule.next_slot.unwrap();
        assert!(fires(&schedule, slot));
        assert!(!fires(&schedule, slot + chrono::TimeDelta::seconds(1)));
        schedule.paused = true;
        assert!(!fires(&schedule, slot));
    }
}

/// A schedule declared on a workflow (`#[workflow(schedule = "...")]`), registered at link
/// time. Every worker that knows the workflow puts it at start
/// ([`ScheduleStore::put_schedule`]), named after the workflow: its
/// `next_slot` is kept across restarts while the cron expression and the timezone are
/// unchanged.
#[derive(Debug)]
pub struct ScheduleDeclaration {
    /// The workflow, and the schedule's name.
    pub workflow: &'static str,
    /// The workflow version, if versioned.
    pub version: Option<&'static str>,
    /// The cron expression (checked at compile time by `#[workflow]`).
    pub cron: &'static str,
    /// The IANA timezone (checked at compile time by `#[workflow]`).
    pub timezone: &'static str,
    /// What the schedule does with missed slots.
    pub catch_up: CatchUp,
    /// The input of every run: the workflow input type's `Default`, as JSON.
    pub input: fn() -> Value,
}

impl ScheduleDeclaration {
    /// The schedule it declares.
    pub fn to_new_schedule(&self) -> NewSchedule {
        NewSchedule {
            name: self.workflow.to_owned(),
            workflow_name: self.workflow.to_owned(),
            version: self.version.map(str::to_owned),
            cron: self.cron.to_owned(),
            timezone: self.timezone.to_owned(),
            input: (self.input)(),
            catch_up: self.catch_up,
        }
    }
}

/// Link-time registration of a declared schedule, collected by `inventory`.
#[derive(Debug)]
pub struct ScheduleRegistration(pub &'static ScheduleDeclaration);

inventory::collect!(ScheduleRegistration);

/// Every schedule declared in this binary.
pub fn declared() -> impl Iterator<Item = &'static ScheduleDeclaration> {
    inventory::iter::<ScheduleRegistration>().map(|registration| registration.0)
}
