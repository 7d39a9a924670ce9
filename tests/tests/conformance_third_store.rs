//! A store defined outside the runtime proves itself with the published conformance suite:
//! one `tasks_conformance::conformance_suite!` call, as a third backend's test file would
//! make.
//!
//! The store here is a decorator of the SQLite store that counts the transitions it
//! forwards (the shape of a metrics or tracing layer). It is its own type, implemented
//! only through the public `Store` contract, so the suite exercises exactly what a new
//! backend would have to provide.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tasks::store::{
    ChildStore, EventStore, LeaseStore, LifecycleStore, QueueStore, RetentionStore, RunStore,
    ScheduleStore, StateStore, StepStore,
};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tasks::schedule::{DueSchedules, FireSchedule, NewSchedule, NextSlot, Schedule};
use tasks::{
    ChildWait, ClaimFilter, ClaimedRun, CreateRun, CreateStepAttempt, EventWait, FailRun,
    LimitError, ListRuns, ListStepAttempts, NotificationStream, Page, PublishedState, PurgeRuns,
    Queue, QueueOptions, RecordStepAttempt, RunEvent, RunStatus, SendEvent, SentEvent, SetState,
    SharedStore, StartChild, StartedChild, StateSet, StepAttempt, StepUpdate, Store, StoreResult,
    WaitForChildren, WaitForEvent, WorkflowRun,
};
use uuid::Uuid;

/// Counts the writes it forwards to the store it wraps.
struct Counting {
    inner: SharedStore,
    writes: Arc<AtomicU64>,
}

impl Counting {
    fn write(&self) -> &SharedStore {
        self.writes.fetch_add(1, Ordering::Relaxed);
        &self.inner
    }
}

#[async_trait]
impl Store for Counting {
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    fn is_postgres(&self) -> bool {
        self.inner.is_postgres()
    }

    fn scoped(&self, namespace: &str) -> Result<SharedStore, LimitError> {
        Ok(SharedStore::new(Counting {
            inner: self.inner.scoped(namespace)?,
            writes: self.writes.clone(),
        }))
    }

    async fn subscribe(&self) -> StoreResult<NotificationStream> {
        self.inner.subscribe().await
    }

    fn lifecycle(&self) -> StoreResult<&dyn LifecycleStore> {
        Ok(self)
    }

    fn events(&self) -> StoreResult<&dyn EventStore> {
        Ok(self)
    }

    fn children(&self) -> StoreResult<&dyn ChildStore> {
        Ok(self)
    }

    fn published_state(&self) -> StoreResult<&dyn StateStore> {
        Ok(self)
    }

    fn schedules(&self) -> StoreResult<&dyn ScheduleStore> {
        Ok(self)
    }

    fn queues(&self) -> StoreResult<&dyn QueueStore> {
        Ok(self)
    }

    fn retention(&self) -> StoreResult<&dyn RetentionStore> {
        Ok(self)
    }
}

#[async_trait]
impl RunStore for Counting {
    async fn create_run(&self, params: CreateRun) -> StoreResult<WorkflowRun> {
        self.write().create_run(params).await
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        self.inner.get_run(run_id).await
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        self.inner.list_runs(params).await
    }

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        self.inner.count_runs(statuses).await
    }
}

#[async_trait]
impl LeaseStore for Counting {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &ClaimFilter,
    ) -> StoreResult<Vec<ClaimedRun>> {
        self.write()
            .claim_runs_filtered(worker_id, lease, limit, filter)
            .await
    }

    async fn extend_lease(
        &self,
        run_id: Uuid,
        worker_id: &str,
        lease: Duration,
    ) -> StoreResult<WorkflowRun> {
        self.write().extend_lease(run_id, worker_id, lease).await
    }

    async fn sleep_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        self.write().sleep_run(run_id, worker_id, until).await
    }

    async fn complete_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<WorkflowRun> {
        self.write().complete_run(run_id, worker_id, output).await
    }

    // `complete_run_with_steps` keeps the trait's default: the separate writes.

    async fn fail_run(&self, params: FailRun) -> StoreResult<WorkflowRun> {
        self.write().fail_run(params).await
    }

    async fn release_run(
        &self,
        run_id: Uuid,
        worker_id: &str,
        delay: Duration,
        reason: Value,
    ) -> StoreResult<WorkflowRun> {
        self.write()
            .release_run(run_id, worker_id, delay, reason)
            .await
    }

    async fn heartbeat(&self, worker_id: &str, stale_after: Duration) -> StoreResult<()> {
        self.write().heartbeat(worker_id, stale_after).await
    }

    async fn remove_worker(&self, worker_id: &str) -> StoreResult<()> {
        self.write().remove_worker(worker_id).await
    }
}

#[async_trait]
impl StepStore for Counting {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        self.write().create_step_attempt(params).await
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        self.inner.get_step_attempt(step_attempt_id).await
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        self.inner.list_step_attempts(params).await
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        self.inner.step_history(run_id).await
    }

    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        worker_id: &str,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        self.write()
            .complete_step_attempt(run_id, step_attempt_id, worker_id, output)
            .await
    }

    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        self.write().record_step_attempt(params).await
    }
}

#[async_trait]
impl LifecycleStore for Counting {
    async fn cancel_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.write().lifecycle()?.cancel_run(run_id).await
    }

    async fn pause_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.write().lifecycle()?.pause_run(run_id).await
    }

    async fn resume_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.write().lifecycle()?.resume_run(run_id).await
    }

    async fn retry_run(&self, run_id: Uuid) -> StoreResult<WorkflowRun> {
        self.write().lifecycle()?.retry_run(run_id).await
    }

    async fn fork_run(&self, run_id: Uuid, from_step: &str) -> StoreResult<WorkflowRun> {
        self.write().lifecycle()?.fork_run(run_id, from_step).await
    }
}

#[async_trait]
impl EventStore for Counting {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        self.write().events()?.send_event(params).await
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        self.write().events()?.wait_for_event(params).await
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        self.inner.events()?.list_events(run_id).await
    }
}

#[async_trait]
impl ChildStore for Counting {
    async fn start_child(&self, params: StartChild) -> StoreResult<StartedChild> {
        self.write().children()?.start_child(params).await
    }

    async fn wait_for_children(&self, params: WaitForChildren) -> StoreResult<ChildWait> {
        self.write().children()?.wait_for_children(params).await
    }
}

#[async_trait]
impl StateStore for Counting {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        self.write().published_state()?.set_state(params).await
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        self.inner.published_state()?.get_state(run_id, key).await
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        self.inner.published_state()?.list_state(run_id).await
    }
}

#[async_trait]
impl ScheduleStore for Counting {
    async fn create_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.write()
            .schedules()?
            .create_schedule(params, first_slot)
            .await
    }

    async fn put_schedule(
        &self,
        params: NewSchedule,
        first_slot: NextSlot<'_>,
    ) -> StoreResult<Schedule> {
        self.write()
            .schedules()?
            .put_schedule(params, first_slot)
            .await
    }

    async fn get_schedule(&self, name: &str) -> StoreResult<Option<Schedule>> {
        self.inner.schedules()?.get_schedule(name).await
    }

    async fn list_schedules(&self) -> StoreResult<Vec<Schedule>> {
        self.inner.schedules()?.list_schedules().await
    }

    async fn pause_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.write().schedules()?.pause_schedule(name).await
    }

    async fn resume_schedule(&self, name: &str) -> StoreResult<Schedule> {
        self.write().schedules()?.resume_schedule(name).await
    }

    async fn delete_schedule(&self, name: &str) -> StoreResult<()> {
        self.write().schedules()?.delete_schedule(name).await
    }

    async fn due_schedules(&self, limit: u32) -> StoreResult<DueSchedules> {
        self.inner.schedules()?.due_schedules(limit).await
    }

    async fn fire_schedule(&self, params: FireSchedule) -> StoreResult<Option<Vec<WorkflowRun>>> {
        self.write().schedules()?.fire_schedule(params).await
    }
}

#[async_trait]
impl QueueStore for Counting {
    async fn put_queue(&self, options: &QueueOptions) -> StoreResult<Queue> {
        self.write().queues()?.put_queue(options).await
    }

    async fn get_queue(&self, name: &str) -> StoreResult<Option<Queue>> {
        self.inner.queues()?.get_queue(name).await
    }

    async fn list_queues(&self) -> StoreResult<Vec<Queue>> {
        self.inner.queues()?.list_queues().await
    }

    async fn delete_queue(&self, name: &str) -> StoreResult<()> {
        self.write().queues()?.delete_queue(name).await
    }
}

#[async_trait]
impl RetentionStore for Counting {
    async fn purge_runs(&self, params: &PurgeRuns) -> StoreResult<u64> {
        self.write().retention()?.purge_runs(params).await
    }

    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> StoreResult<Option<u64>> {
        self.write()
            .retention()?
            .take_retention_turn(worker_id, every)
            .await
    }
}

/// A counting store over a fresh SQLite namespace.
async fn counting_store() -> Counting {
    Counting {
        inner: SharedStore::new(tasks_tests::sqlite::sqlite_store().await),
        writes: Arc::new(AtomicU64::new(0)),
    }
}

tasks_conformance::conformance_suite!(counting_store);

/// The decorator really is in the path: the suite's writes went through it.
#[tokio::test]
async fn the_decorator_sees_the_writes() {
    let store = counting_store().await;
    store.create_run(CreateRun::new("counted")).await.unwrap();
    store
        .claim_runs("w", Duration::from_secs(60), 1)
        .await
        .unwrap();
    assert_eq!(store.writes.load(Ordering::Relaxed), 2);
}
