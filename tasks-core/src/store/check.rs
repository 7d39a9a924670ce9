//! What each operation of the contract checks before a store touches anything: one function
//! per method that takes values a caller chose, named after it.
//!
//! This is the one list of which limit applies to which operation. Every store calls the
//! function of an operation first, with the values it was handed, and does nothing else
//! with the [`limits`]: so Postgres, SQLite, the in-memory store and any third store refuse
//! exactly the same values with the same typed [`StoreError::Limit`] (or
//! [`StoreError::InvalidArgument`] for the few shapes a limit cannot express), and store
//! nothing when they do. The parameters' own `check` methods ([`CreateRun::check`], ...)
//! are what these functions call; a client may call them earlier to refuse a value before
//! it reaches a store.
//!
//! Methods that take only ids, a page size or nothing (`get_run`, `cancel_run`,
//! `list_queues`, ...) have no function here: there is nothing to check. A store's
//! namespace is checked once, when the store is made ([`Store::scoped`] and each store's
//! constructors call [`limits::check_namespace`]); the operations that write the namespace
//! into a row check it again, as their parameters always have.
//!
//! ```
//! use tasks_core::store::check;
//! use tasks_core::{CreateRun, StoreError};
//!
//! assert!(check::create_run("default", &CreateRun::new("checkout")).is_ok());
//! let nul = CreateRun::new("check\0out");
//! assert!(matches!(check::create_run("default", &nul), Err(StoreError::Limit(_))));
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::children::{StartChild, WaitForChildren};
use crate::error::StoreResult;
use crate::events::{SendEvent, SignalWithStart, WaitForEvent};
use crate::holder::Holder;
use crate::limits::{self, Field};
use crate::queue::{ClaimFilter, QueueOptions};
use crate::retention::PurgeRuns;
use crate::schedule::{FireSchedule, NewSchedule};
use crate::select::WaitForAny;
use crate::state::SetState;

use super::pages::{ListRuns, ListStepAttempts};
use super::runs::{CreateRun, FailRun};
use super::steps::{CreateStepAttempt, RecordStepAttempt};

#[cfg(doc)]
use crate::{StoreError, store::Store};

/// A store's namespace, when the store is made (each store's constructors and
/// [`Store::scoped`]): no store is made that would hand the database a namespace it cannot
/// take.
pub fn namespace(namespace: &str) -> Result<(), crate::limits::LimitError> {
    limits::check_namespace(namespace)
}

// Runs.

/// [`RunStore::create_run`](super::RunStore::create_run): [`CreateRun::check`] in the
/// store's namespace.
pub fn create_run(namespace: &str, params: &CreateRun) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

/// [`RunStore::list_runs`](super::RunStore::list_runs): [`ListRuns::check`].
pub fn list_runs(namespace: &str, params: &ListRuns) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

// Leases.

/// [`LeaseStore::claim_runs_filtered`](super::LeaseStore::claim_runs_filtered): the worker id,
/// the lease and the filter's names.
pub fn claim_runs(worker_id: &str, lease: Duration, filter: &ClaimFilter) -> StoreResult<()> {
    limits::check_lease(worker_id, lease)?;
    Ok(filter.check()?)
}

/// [`LeaseStore::extend_lease`](super::LeaseStore::extend_lease): the holder's worker id
/// and the lease.
pub fn extend_lease(holder: &Holder, lease: Duration) -> StoreResult<()> {
    Ok(limits::check_lease(&holder.worker_id, lease)?)
}

/// [`LeaseStore::sleep_run`](super::LeaseStore::sleep_run): the holder's worker id and the
/// wake-up instant.
pub fn sleep_run(holder: &Holder, until: DateTime<Utc>) -> StoreResult<()> {
    limits::check_worker_id(&holder.worker_id)?;
    Ok(limits::check_time(Field::Sleep, until)?)
}

/// [`LeaseStore::complete_run`](super::LeaseStore::complete_run): the holder's worker id and
/// the workflow's output.
pub fn complete_run(holder: &Holder, output: &Value) -> StoreResult<()> {
    limits::check_worker_id(&holder.worker_id)?;
    Ok(limits::check_json(Field::WorkflowOutput, output)?)
}

/// [`LeaseStore::complete_run_with_steps`](super::LeaseStore::complete_run_with_steps):
/// [`RecordStepAttempt::check_last_steps`] (the completion's values, and every attempt
/// finished, of this run and holder, within the limits).
pub fn complete_run_with_steps(
    run_id: Uuid,
    holder: &Holder,
    output: &Value,
    steps: &[RecordStepAttempt],
) -> StoreResult<()> {
    RecordStepAttempt::check_last_steps(steps, run_id, holder, output)
}

/// [`LeaseStore::fail_run`](super::LeaseStore::fail_run): [`FailRun::check`].
pub fn fail_run(params: &FailRun) -> StoreResult<()> {
    Ok(params.check()?)
}

/// [`LeaseStore::release_run`](super::LeaseStore::release_run): the holder's worker id, the
/// delay and the reason.
pub fn release_run(holder: &Holder, delay: Duration, reason: &Value) -> StoreResult<()> {
    limits::check_worker_id(&holder.worker_id)?;
    limits::check_duration(Field::Delay, delay)?;
    Ok(limits::check_json(Field::Error, reason)?)
}

/// [`LeaseStore::heartbeat`](super::LeaseStore::heartbeat) and
/// [`LeaseStore::remove_worker`](super::LeaseStore::remove_worker): the worker id. (A
/// staleness past the instants a store holds is refused where it is added to the clock.)
pub fn worker(worker_id: &str) -> StoreResult<()> {
    Ok(limits::check_worker_id(worker_id)?)
}

// Steps.

/// [`StepStore::create_step_attempt`](super::StepStore::create_step_attempt):
/// [`CreateStepAttempt::check`].
pub fn create_step_attempt(params: &CreateStepAttempt) -> StoreResult<()> {
    Ok(params.check()?)
}

/// [`StepStore::list_step_attempts`](super::StepStore::list_step_attempts):
/// [`ListStepAttempts::check`].
pub fn list_step_attempts(namespace: &str, params: &ListStepAttempts) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

/// [`StepStore::complete_step_attempt`](super::StepStore::complete_step_attempt): the
/// holder's worker id and the step's output.
pub fn complete_step_attempt(holder: &Holder, output: &Value) -> StoreResult<()> {
    limits::check_worker_id(&holder.worker_id)?;
    Ok(limits::check_json(Field::StepOutput, output)?)
}

/// [`StepStore::record_step_attempt`](super::StepStore::record_step_attempt):
/// [`RecordStepAttempt::check_finished`] (finished, and within the limits).
pub fn record_step_attempt(params: &RecordStepAttempt) -> StoreResult<()> {
    params.check_finished()
}

// Lifecycle.

/// [`LifecycleStore::fork_run`](super::LifecycleStore::fork_run): the step name it forks
/// from.
pub fn fork_run(from_step: &str) -> StoreResult<()> {
    Ok(limits::check_step_name(from_step)?)
}

// Events.

/// [`EventStore::send_event`](super::EventStore::send_event): [`SendEvent::check`].
pub fn send_event(namespace: &str, params: &SendEvent) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

/// [`EventStore::signal_with_start`](super::EventStore::signal_with_start):
/// [`SignalWithStart::check`].
pub fn signal_with_start(namespace: &str, params: &SignalWithStart) -> StoreResult<()> {
    params.check(namespace)
}

/// [`EventStore::wait_for_event`](super::EventStore::wait_for_event):
/// [`WaitForEvent::check`].
pub fn wait_for_event(params: &WaitForEvent) -> StoreResult<()> {
    Ok(params.check()?)
}

// Children.

/// [`ChildStore::start_child`](super::ChildStore::start_child): [`StartChild::check`] and
/// [`StartChild::check_child`] (no idempotency key on a child).
pub fn start_child(namespace: &str, params: &StartChild) -> StoreResult<()> {
    params.check(namespace)?;
    params.check_child()
}

/// [`ChildStore::wait_for_children`](super::ChildStore::wait_for_children):
/// [`WaitForChildren::check`].
pub fn wait_for_children(params: &WaitForChildren) -> StoreResult<()> {
    params.check()
}

// Continue-as-new.

/// [`ContinueStore::continue_run`](super::ContinueStore::continue_run):
/// [`ContinueRun::check`](crate::continuation::ContinueRun::check).
pub fn continue_run(params: &crate::continuation::ContinueRun) -> StoreResult<()> {
    Ok(params.check()?)
}

// Published state.

/// [`StateStore::set_state`](super::StateStore::set_state): [`SetState::check`].
pub fn set_state(params: &SetState) -> StoreResult<()> {
    Ok(params.check()?)
}

/// [`StateStore::get_state`](super::StateStore::get_state): the key.
pub fn get_state(key: &str) -> StoreResult<()> {
    Ok(limits::check_state_key(key)?)
}

// Schedules.

/// [`ScheduleStore::create_schedule`](super::ScheduleStore::create_schedule) and
/// [`ScheduleStore::put_schedule`](super::ScheduleStore::put_schedule): [`NewSchedule::check`].
pub fn put_schedule(namespace: &str, params: &NewSchedule) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

/// The operations on one schedule by name (get, pause, resume, delete): the name.
pub fn schedule_name(name: &str) -> StoreResult<()> {
    Ok(crate::schedule::check_name(name)?)
}

/// [`ScheduleStore::fire_schedule`](super::ScheduleStore::fire_schedule):
/// [`FireSchedule::check`].
pub fn fire_schedule(namespace: &str, params: &FireSchedule) -> StoreResult<()> {
    Ok(params.check(namespace)?)
}

// Queues.

/// [`QueueStore::put_queue`](super::QueueStore::put_queue): the namespace and
/// [`QueueOptions::check`].
pub fn put_queue(namespace: &str, options: &QueueOptions) -> StoreResult<()> {
    limits::check_namespace(namespace)?;
    Ok(options.check()?)
}

/// The operations on one queue by name (get, delete): the name.
pub fn queue_name(name: &str) -> StoreResult<()> {
    Ok(limits::check_queue_name(name)?)
}

// The overview.

/// [`OverviewStore::queue_backlogs`](super::OverviewStore::queue_backlogs) and
/// [`OverviewStore::list_workers`](super::OverviewStore::list_workers): the row limit, 1 to
/// [`MAX_OVERVIEW_ROWS`](super::overview::MAX_OVERVIEW_ROWS).
pub fn overview_rows(limit: u32) -> StoreResult<()> {
    let max = super::overview::MAX_OVERVIEW_ROWS;
    if limit == 0 || limit > max {
        return Err(crate::StoreError::InvalidArgument(format!(
            "an overview reads 1 to {max} rows, not {limit}"
        )));
    }
    Ok(())
}

/// [`OverviewStore::finished_runs`](super::OverviewStore::finished_runs):
/// [`FinishedWindow::check`](super::overview::FinishedWindow::check).
pub fn finished_runs(window: &super::overview::FinishedWindow) -> StoreResult<()> {
    window.check()
}

// Retention.

/// [`RetentionStore::purge_runs`](super::RetentionStore::purge_runs): [`PurgeRuns::check`].
pub fn purge_runs(namespace: &str, params: &PurgeRuns) -> StoreResult<()> {
    params.check(namespace)
}

/// [`RetentionStore::take_retention_turn`](super::RetentionStore::take_retention_turn): the
/// namespace, the worker id and the interval.
pub fn take_retention_turn(namespace: &str, worker_id: &str, every: Duration) -> StoreResult<()> {
    limits::check_namespace(namespace)?;
    limits::check_worker_id(worker_id)?;
    Ok(limits::check_duration(Field::RetentionInterval, every)?)
}

// Selects.

/// [`SelectStore::wait_for_any`](super::SelectStore::wait_for_any): [`WaitForAny::check`].
pub fn wait_for_any(params: &WaitForAny) -> StoreResult<()> {
    params.check()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;
    use crate::model::{StepKind, StepStatus};

    const NS: &str = "default";

    fn field(result: StoreResult<()>) -> Field {
        match result {
            Err(StoreError::Limit(error)) => error.field(),
            other => panic!("expected a limit error, got {other:?}"),
        }
    }

    fn long(bytes: usize) -> String {
        "x".repeat(bytes + 1)
    }

    fn nul() -> String {
        "a\0b".into()
    }

    fn deep() -> Value {
        let mut value = Value::Null;
        for _ in 0..=limits::MAX_JSON_DEPTH {
            value = Value::Array(vec![value]);
        }
        value
    }

    fn h(worker_id: &str) -> Holder {
        Holder::new(worker_id, 1)
    }

    fn record(worker_id: &str) -> RecordStepAttempt {
        RecordStepAttempt {
            id: Uuid::nil(),
            run_id: Uuid::nil(),
            holder: h(worker_id),
            step_name: "step".into(),
            kind: StepKind::Function,
            config: Value::Null,
            status: StepStatus::Completed,
            output: Some(Value::Null),
            error: None,
            args: None,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn every_operation_accepts_values_within_the_limits() {
        let second = Duration::from_secs(1);
        let now = Utc::now();
        assert!(create_run(NS, &CreateRun::new("w")).is_ok());
        assert!(claim_runs("w", second, &ClaimFilter::default()).is_ok());
        assert!(extend_lease(&h("w"), second).is_ok());
        assert!(sleep_run(&h("w"), now).is_ok());
        assert!(complete_run(&h("w"), &Value::Null).is_ok());
        assert!(
            complete_run_with_steps(Uuid::nil(), &h("w"), &Value::Null, &[record("w")]).is_ok()
        );
        assert!(release_run(&h("w"), second, &Value::Null).is_ok());
        assert!(worker("w").is_ok());
        assert!(complete_step_attempt(&h("w"), &Value::Null).is_ok());
        assert!(record_step_attempt(&record("w")).is_ok());
        assert!(fork_run("step:1").is_ok());
        assert!(get_state("key").is_ok());
        assert!(schedule_name("nightly").is_ok());
        assert!(queue_name("emails").is_ok());
        assert!(take_retention_turn(NS, "w", second).is_ok());
    }

    #[test]
    fn each_operation_refuses_its_fields() {
        let worker_id = long(limits::MAX_WORKER_ID_BYTES);
        let second = Duration::from_secs(1);
        let forever = Duration::from_secs(u64::MAX);
        assert_eq!(
            field(claim_runs(&worker_id, second, &ClaimFilter::default())),
            Field::WorkerId
        );
        assert_eq!(
            field(claim_runs("w", forever, &ClaimFilter::default())),
            Field::Lease
        );
        assert_eq!(field(extend_lease(&h("w"), forever)), Field::Lease);
        assert_eq!(
            field(sleep_run(&h("w"), DateTime::<Utc>::MAX_UTC)),
            Field::Sleep
        );
        assert_eq!(
            field(complete_run(&h(&nul()), &Value::Null)),
            Field::WorkerId
        );
        assert_eq!(field(complete_run(&h("w"), &deep())), Field::WorkflowOutput);
        assert_eq!(
            field(release_run(&h("w"), forever, &Value::Null)),
            Field::Delay
        );
        assert_eq!(field(release_run(&h("w"), second, &deep())), Field::Error);
        assert_eq!(field(worker(&worker_id)), Field::WorkerId);
        assert_eq!(
            field(complete_step_attempt(&h("w"), &deep())),
            Field::StepOutput
        );
        assert_eq!(
            field(record_step_attempt(&record(&worker_id))),
            Field::WorkerId
        );
        assert_eq!(
            field(fork_run(&long(limits::MAX_STEP_NAME_BYTES))),
            Field::StepName
        );
        assert_eq!(field(get_state(&nul())), Field::StateKey);
        assert_eq!(field(schedule_name(&nul())), Field::ScheduleName);
        assert_eq!(field(queue_name("a queue")), Field::Queue);
        assert_eq!(
            field(take_retention_turn(&nul(), "w", second)),
            Field::Namespace
        );
        assert_eq!(
            field(take_retention_turn(NS, "w", forever)),
            Field::RetentionInterval
        );
        assert_eq!(
            field(create_run(&nul(), &CreateRun::new("w"))),
            Field::Namespace
        );
        assert_eq!(
            field(create_run(NS, &CreateRun::new(nul()))),
            Field::WorkflowName
        );
    }

    #[test]
    fn shapes_a_limit_cannot_express_are_invalid_arguments() {
        let mut running = record("w");
        running.status = StepStatus::Running;
        assert!(matches!(
            record_step_attempt(&running),
            Err(StoreError::InvalidArgument(_))
        ));
        assert!(matches!(
            complete_run_with_steps(Uuid::nil(), &h("other"), &Value::Null, &[record("w")]),
            Err(StoreError::InvalidArgument(_))
        ));
    }
}
