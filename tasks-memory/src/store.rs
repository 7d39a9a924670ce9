//! The [`Store`] contract and its capabilities: every value checked against the limits with the same `check`
//! calls as the SQL stores, then the operation in its module.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use tasks_core::children::{ChildWait, StartChild, StartedChild, WaitForChildren};
use tasks_core::error::StoreResult;
use tasks_core::events::{EventWait, RunEvent, SendEvent, SentEvent, WaitForEvent};
use tasks_core::limits::LimitError;
use tasks_core::model::{RunStatus, StepAttempt, WorkflowRun};
use tasks_core::queue::{ClaimFilter, Queue, QueueOptions};
use tasks_core::retention::PurgeRuns;
use tasks_core::schedule::{DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule};
use tasks_core::state::{PublishedState, SetState, StateSet};
use tasks_core::store::check;
use tasks_core::store::{
    ChildStore, ClaimedRun, CreateRun, CreateStepAttempt, EventStore, FailRun, LeaseStore,
    LifecycleStore, ListRuns, ListStepAttempts, NotificationStream, Page, QueueStore,
    RecordStepAttempt, RetentionStore, RunStore, ScheduleStore, SharedStore, StateStore, StepStore,
    StepUpdate, Store,
};

use crate::MemoryStore;

#[async_trait]
impl Store for MemoryStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError> {
        Ok(SharedStore::new(self.with_namespace(namespace)?))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        Ok(self.notifications())
    }

    tasks_core::every_capability!();
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        check::create_run(&self.namespace, &params)?;
        self.create_run_impl(params)
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        Ok(self.read(|space| space.run(run_id)))
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        check::list_runs(&self.namespace, &params)?;
        self.list_runs_impl(params)
    }

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        Ok(self.count_runs_impl(statuses))
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        check::claim_runs(worker_id, lease, filter)?;
        self.claim_runs_impl(worker_id, lease, limit, filter)
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        check::extend_lease(worker_id, lease)?;
        self.extend_lease_impl(run_id, worker_id, lease)
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        check::sleep_run(worker_id, until)?;
        self.sleep_run_impl(run_id, worker_id, until)
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        check::complete_run(worker_id, &output)?;
        self.complete_run_impl(run_id, worker_id, output)
    }

    async fn complete_run_with_steps(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
        steps: Vec<RecordStepAttempt>,
    ) -> StoreResult<WorkflowRun> {
        self.complete_run_with_steps_impl(run_id, worker_id, output, steps)
            .await
    }

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        check::fail_run(&params)?;
        self.fail_run_impl(params)
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        check::release_run(worker_id, delay, &reason)?;
        self.release_run_impl(run_id, worker_id, delay, reason)
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.heartbeat_impl(worker_id, stale_after)
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        check::worker(worker_id)?;
        self.remove_worker_impl(worker_id)
    }
}

#[async_trait]
impl StepStore for MemoryStore {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        check::create_step_attempt(&params)?;
        self.create_step_attempt_impl(params)
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        Ok(self.get_step_attempt_impl(step_attempt_id))
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        check::list_step_attempts(&self.namespace, &params)?;
        self.list_step_attempts_impl(params)
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        Ok(self.step_history_impl(run_id))
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        check::complete_step_attempt(worker_id, &output)?;
        self.complete_step_attempt_impl(run_id, step_attempt_id, worker_id, output)
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        self.record_step_attempt_impl(params)
    }
}

#[async_trait]
impl LifecycleStore for MemoryStore {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.cancel_run_impl(run_id)
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.pause_run_impl(run_id)
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.resume_run_impl(run_id)
    }

    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.retry_run_impl(run_id)
    }

    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        check::fork_run(from_step)?;
        self.fork_run_impl(run_id, from_step)
    }
}

#[async_trait]
impl EventStore for MemoryStore {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        check::send_event(&self.namespace, &params)?;
        self.send_event_impl(params)
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        check::wait_for_event(&params)?;
        self.wait_for_event_impl(params)
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        Ok(self.list_events_impl(run_id))
    }
}

#[async_trait]
impl ChildStore for MemoryStore {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        check::start_child(&self.namespace, &params)?;
        self.start_child_impl(params)
    }

    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait> {
        check::wait_for_children(&params)?;
        self.wait_for_children_impl(params)
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        check::set_state(&params)?;
        self.set_state_impl(params)
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        check::get_state(key)?;
        self.get_state_impl(run_id, key)
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        self.list_state_impl(run_id)
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
        self.put_schedule_impl(params, first_slot, false)
    }

    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        check::put_schedule(&self.namespace, &params)?;
        self.put_schedule_impl(params, first_slot, true)
    }

    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        check::schedule_name(name)?;
        Ok(self.get_schedule_impl(name))
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        Ok(self.list_schedules_impl())
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
        self.delete_schedule_impl(name)
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        Ok(self.due_schedules_impl(limit))
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        check::fire_schedule(&self.namespace, &params)?;
        self.fire_schedule_impl(params)
    }
}

#[async_trait]
impl QueueStore for MemoryStore {
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        check::put_queue(&self.namespace, options)?;
        self.put_queue_impl(options)
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        check::queue_name(name)?;
        Ok(self.get_queue_impl(name))
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        Ok(self.list_queues_impl())
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        check::queue_name(name)?;
        self.delete_queue_impl(name)
    }
}

#[async_trait]
impl RetentionStore for MemoryStore {
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        check::purge_runs(&self.namespace, params)?;
        self.purge_runs_impl(params)
    }

    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        check::take_retention_turn(&self.namespace, worker_id, every)?;
        self.take_retention_turn_impl(worker_id, every)
    }
}
