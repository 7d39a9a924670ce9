//! Crash recovery and exactly-once completion across workers, against each store (Postgres
//! and SQLite).

use crate::support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sqlx::{PgPool, Row};
use support::{Backend, bump, calls, client, worker};
use tasks::store::CreateRun;
use tasks::{ListRuns, RunStatus, StepStatus, WorkflowContext, WorkflowError, step, workflow};

pub(crate) struct KillOnDrop(pub(crate) Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a `test_worker` process on the store at `store_url`, scoped to `namespace`.
pub(crate) fn spawn_worker(store_url: &str, namespace: &str, lease_ms: u64) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_test_worker"))
        .args([store_url, namespace, &lease_ms.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the test worker process");
    KillOnDrop(child)
}

/// A pool on the Postgres test database holding `tasks_test.effects`, the side-effect
/// counters of `test_worker`. They live in Postgres whichever store is under test: the
/// counters are independent of the store, and a separate process must reach them.
pub(crate) async fn effects_pool() -> PgPool {
    let pool = tasks_tests::connect_pool(tasks_tests::connect_options(), 2).await;
    sqlx::raw_sql(
        "CREATE SCHEMA IF NOT EXISTS tasks_test;
         CREATE TABLE IF NOT EXISTS tasks_test.effects (
             run_id UUID NOT NULL, step TEXT NOT NULL, count INTEGER NOT NULL,
             PRIMARY KEY (run_id, step));",
    )
    .execute(&pool)
    .await
    .or_else(|error| match &error {
        // Another test created them at the same time.
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => {
            Ok(Default::default())
        }
        _ => Err(error),
    })
    .unwrap();
    pool
}

pub(crate) async fn effect_counts(effects: &PgPool, run_id: uuid::Uuid) -> HashMap<String, i32> {
    sqlx::query("SELECT step, count FROM tasks_test.effects WHERE run_id = $1")
        .bind(run_id)
        .fetch_all(effects)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.get::<String, _>(0), row.get::<i32, _>(1)))
        .collect()
}

/// Run `run_id` once it is finished (within 60 s), which must be completed: what a test
/// asks of the worker that took over from a killed one.
pub(crate) async fn completed_run(
    store: &support::TestStore,
    run_id: uuid::Uuid,
) -> tasks::WorkflowRun {
    let finished = eventually!(Duration::from_secs(60), {
        let run = store.get_run(run_id).await.unwrap().unwrap();
        run.status.is_terminal().then_some(run)
    });
    assert_eq!(
        finished.status,
        RunStatus::Completed,
        "{:?}",
        finished.error
    );
    finished
}

async fn a_killed_worker_is_replaced_and_no_completed_step_runs_again(backend: Backend) {
    let store = backend.store().await;
    let effects = effects_pool().await;

    const STEPS: usize = 12;
    let run = store
        .create_run(CreateRun {
            input: Some(
                json!({ "effects_database_url": tasks_tests::database_url(), "steps": STEPS, "step_millis": 150 }),
            ),
            ..CreateRun::new("test-effects")
        })
        .await
        .unwrap();

    // First worker: a separate OS process, killed with SIGKILL in the middle of the run.
    let mut first = spawn_worker(&store.url(), store.namespace(), 1_000);
    let completed_before_kill: HashSet<String> = eventually!(Duration::from_secs(30), {
        let steps = store.step_history(run.id).await.unwrap();
        let done: HashSet<String> = steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .map(|s| s.step_name.clone())
            .collect();
        (done.len() >= 4).then_some(done)
    });
    first.0.kill().expect("SIGKILL the first worker");
    first.0.wait().unwrap();
    // Read what was completed at the moment of the kill (a step may have completed
    // between the check above and the kill).
    let completed_at_kill: HashSet<String> = store
        .step_history(run.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.status == StepStatus::Completed)
        .map(|s| s.step_name)
        .collect();
    assert!(completed_at_kill.is_superset(&completed_before_kill));
    assert!(completed_at_kill.len() < STEPS, "the kill landed mid-run");
    let stranded = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(
        stranded.status,
        RunStatus::Running,
        "the dead worker still holds the lease"
    );

    // Second worker: another process; it claims the run once the lease expires.
    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let finished = completed_run(&store, run.id).await;
    assert_eq!(finished.output, Some(json!(STEPS)));
    assert_eq!(finished.attempts, 2, "claimed once by each worker");
    assert_ne!(
        finished.worker_id, stranded.worker_id,
        "the second worker finished it"
    );

    let counts = effect_counts(&effects, run.id).await;
    assert_eq!(counts.len(), STEPS, "every step ran: {counts:?}");
    for (i, name) in ["record_effect"].iter().cycle().take(STEPS).enumerate() {
        let step_name = if i == 0 {
            name.to_string()
        } else {
            format!("{name}:{i}")
        };
        let label = format!("step-{i:03}");
        let count = counts[&label];
        if completed_at_kill.contains(&step_name) {
            assert_eq!(
                count, 1,
                "completed step {step_name} ran again after the takeover"
            );
        } else {
            // At most the one step in flight at the kill ran twice.
            assert!(
                (1..=2).contains(&count),
                "step {step_name} ran {count} times"
            );
        }
    }
    let rerun = counts.values().filter(|&&c| c == 2).count();
    assert!(
        rerun <= 1,
        "only the step in flight may run twice: {counts:?}"
    );
}

/// The payload `test_worker`'s `test-approval` workflow waits for (same topic, same shape).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct TestApproval {
    by: String,
}

impl tasks::Event for TestApproval {
    const TOPIC: &'static str = "test-approval";
}

/// A worker process is SIGKILLed while its run waits for an event; the event is sent while
/// no worker is alive, and a new worker process delivers it: the step before the wait does
/// not run again, the run completes with the event.
async fn a_run_waiting_for_an_event_survives_a_killed_worker(backend: Backend) {
    let store = backend.store().await;
    let effects = effects_pool().await;
    let run = store
        .create_run(CreateRun {
            input: Some(json!({ "effects_database_url": tasks_tests::database_url() })),
            ..CreateRun::new("test-approval")
        })
        .await
        .unwrap();

    let mut first = spawn_worker(&store.url(), store.namespace(), 1_000);
    let waiting = eventually!(Duration::from_secs(30), {
        let run = store.get_run(run.id).await.unwrap().unwrap();
        (run.status == RunStatus::Sleeping).then_some(run)
    });
    assert_eq!(waiting.worker_id, None, "a waiting run holds no worker");
    first.0.kill().expect("SIGKILL the first worker");
    first.0.wait().unwrap();

    let client = client(&store);
    let sent = client
        .send_event(run.id, &TestApproval { by: "ops".into() })
        .await
        .unwrap();
    assert!(sent.woke, "the send finds the run waiting on its topic");

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let finished = completed_run(&store, run.id).await;
    assert_eq!(finished.output, Some(json!("ops")));
    let counts = effect_counts(&effects, run.id).await;
    assert_eq!(counts.get("before"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("after"), Some(&1), "{counts:?}");
    let steps = store.step_history(run.id).await.unwrap();
    let kinds: Vec<(&str, tasks::StepKind)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("record_effect", tasks::StepKind::Function),
            ("event/test-approval", tasks::StepKind::Event),
            ("record_effect:1", tasks::StepKind::Function),
        ]
    );
}

/// A worker process is SIGKILLed while two runs are parked in a select (an approval or a
/// timer): an approval is sent to one while no worker is alive, and a new worker process
/// finishes both, one won by the approval, the other by its timer, which ran out on the
/// new worker. The steps before the select ran once, and each select recorded its winner.
async fn a_run_parked_in_a_select_survives_a_killed_worker(backend: Backend) {
    let store = backend.store().await;
    let effects = effects_pool().await;
    let start = |timer_millis: u64| CreateRun {
        input: Some(json!({
            "effects_database_url": tasks_tests::database_url(),
            "timer_millis": timer_millis,
        })),
        ..CreateRun::new("test-select")
    };
    let approved = store.create_run(start(3_600_000)).await.unwrap();
    let expired = store.create_run(start(6_000)).await.unwrap();

    let mut first = spawn_worker(&store.url(), store.namespace(), 1_000);
    eventually!(Duration::from_secs(30), {
        let mut parked = true;
        for id in [approved.id, expired.id] {
            let run = store.get_run(id).await.unwrap().unwrap();
            parked &= run.status == RunStatus::Sleeping && run.worker_id.is_none();
        }
        parked.then_some(())
    });
    first.0.kill().expect("SIGKILL the first worker");
    first.0.wait().unwrap();
    let parked = store.get_run(expired.id).await.unwrap().unwrap();
    assert_eq!(
        parked.status,
        RunStatus::Sleeping,
        "the timer has not run out on the killed worker"
    );

    let client = client(&store);
    let sent = client
        .send_event(approved.id, &TestApproval { by: "ops".into() })
        .await
        .unwrap();
    assert!(sent.woke, "the send finds the run parked in its select");

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    for (run, winner) in [(approved.id, "approved by ops"), (expired.id, "expired")] {
        let finished = completed_run(&store, run).await;
        assert_eq!(finished.output, Some(json!(winner)));
        let counts = effect_counts(&effects, run).await;
        assert_eq!(counts.get("before"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("after"), Some(&1), "{counts:?}");
        let steps = store.step_history(run).await.unwrap();
        let select = steps
            .iter()
            .find(|s| s.step_name == "select/decision")
            .expect("the select's attempt");
        let won = if winner == "expired" { 1 } else { 0 };
        assert_eq!(select.output.as_ref().unwrap()["winner"], json!(won));
        let kinds: Vec<&str> = steps.iter().map(|s| s.step_name.as_str()).collect();
        let mut expected = vec!["record_effect", "select/decision"];
        if won == 0 {
            expected.push("event/test-approval");
        }
        expected.push("record_effect:1");
        assert_eq!(kinds, expected);
    }
}

/// A worker process is SIGKILLed while the child of its parent run is running: a new
/// worker process finishes the child, whose completion wakes the parent, which gets the
/// child's result. The child is started once, and the parent's step before it ran once.
async fn a_killed_worker_does_not_start_a_child_twice(backend: Backend) {
    let store = backend.store().await;
    let effects = effects_pool().await;
    let parent = store
        .create_run(CreateRun {
            input: Some(json!({
                "effects_database_url": tasks_tests::database_url(),
                "work_millis": 3_000,
            })),
            ..CreateRun::new("test-parent")
        })
        .await
        .unwrap();
    let (shared, parent_id) = (store.shared(), parent.id);
    let children = || {
        let shared = shared.clone();
        async move {
            shared
                .contract()
                .list_runs(ListRuns {
                    parent_run_id: Some(parent_id),
                    ..ListRuns::default()
                })
                .await
                .unwrap()
                .data
        }
    };

    let mut first = spawn_worker(&store.url(), store.namespace(), 1_000);
    let child = eventually!(Duration::from_secs(30), {
        let found = children().await;
        match found.first() {
            Some(child) if child.status == RunStatus::Running => {
                // The child's first step is durable (its record, not only its effect).
                let steps = store.step_history(child.id).await.unwrap();
                steps
                    .iter()
                    .any(|s| s.status == tasks::StepStatus::Completed)
                    .then(|| child.clone())
            }
            _ => None,
        }
    });
    first
        .0
        .kill()
        .expect("SIGKILL the worker while the child runs");
    first.0.wait().unwrap();

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let finished = completed_run(&store, parent.id).await;
    assert_eq!(finished.output, Some(json!(child.id.to_string())));
    let all = children().await;
    assert_eq!(all.len(), 1, "the child was started once: {all:?}");
    assert_eq!(all[0].status, RunStatus::Completed);
    let parent_effects = effect_counts(&effects, parent.id).await;
    assert_eq!(parent_effects.get("before"), Some(&1), "{parent_effects:?}");
    assert_eq!(parent_effects.get("after"), Some(&1), "{parent_effects:?}");
    let child_effects = effect_counts(&effects, child.id).await;
    assert_eq!(
        child_effects.get("child-start"),
        Some(&1),
        "{child_effects:?}"
    );
    let steps = store.step_history(parent.id).await.unwrap();
    let kinds: Vec<(&str, tasks::StepKind)> = steps
        .iter()
        .map(|s| (s.step_name.as_str(), s.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("record_effect", tasks::StepKind::Function),
            ("child/test-child", tasks::StepKind::Child),
            ("record_effect:1", tasks::StepKind::Function),
        ]
    );
}

#[step]
async fn unit_of_work(n: u32) -> Result<u32, std::io::Error> {
    let run_id = WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default();
    bump(run_id, &format!("work:{n}"));
    Ok(n)
}

#[workflow(name = "e2e-many")]
async fn many(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let a = unit_of_work(n).await?;
    let b = unit_of_work(n + 1).await?;
    let c = unit_of_work(n + 2).await?;
    Ok(a + b + c)
}

async fn runs_shared_by_several_workers_complete_exactly_once(backend: Backend) {
    const RUNS: u32 = 240;
    let store = backend.store().await;
    let client = client(&store);
    let mut handles = Vec::new();
    for n in 0..RUNS {
        handles.push(many::start(&client, n).await.unwrap());
    }
    // Leases and heartbeats long enough that a loaded machine (a CI build beside, SQLite's
    // one writer) never lets a live worker's run be taken over: this test is about claims
    // racing, and a takeover after a lost lease is a second attempt by design.
    let workers: Vec<_> = (0..3)
        .map(|i| {
            worker(&store)
                .concurrency(16)
                .lease(Duration::from_secs(60))
                .heartbeat_timeout(Duration::from_secs(30))
                .worker_id(format!("w{i}"))
                .build()
                .unwrap()
                .spawn()
        })
        .collect();
    for (n, handle) in handles.iter().enumerate() {
        let n = n as u32;
        assert_eq!(
            handle
                .result_within(Duration::from_secs(120))
                .await
                .unwrap(),
            3 * n + 3
        );
    }
    for worker in workers {
        worker.shutdown().await;
    }

    let mut finishers = HashMap::new();
    let mut page = store
        .list_runs(ListRuns {
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(page.next.is_none());
    assert_eq!(page.data.len(), RUNS as usize);
    for run in page.data.drain(..) {
        assert_eq!(run.status, RunStatus::Completed);
        assert_eq!(run.attempts, 1, "no run was executed twice");
        *finishers.entry(run.worker_id.clone().unwrap()).or_insert(0) += 1;
        let steps = store.step_history(run.id).await.unwrap();
        assert_eq!(steps.len(), 3, "run {}: {steps:?}", run.id);
        let names: HashSet<_> = steps.iter().map(|s| s.step_name.as_str()).collect();
        assert_eq!(names.len(), 3, "no step completed twice");
        assert!(steps.iter().all(|s| s.status == StepStatus::Completed));
    }
    for (n, handle) in handles.iter().enumerate() {
        for k in 0..3 {
            assert_eq!(calls(handle.id(), &format!("work:{}", n as u32 + k)), 1);
        }
    }
    assert!(
        finishers.len() >= 2,
        "work was shared between workers: {finishers:?}"
    );
}

/// Runs held by a worker process that is SIGKILLed are claimed by another worker within
/// seconds (its heartbeat goes stale), far sooner than their 30 s leases.
async fn a_killed_workers_runs_are_reclaimed_within_seconds(backend: Backend) {
    const RUNS: usize = 3;
    let store = backend.store().await;
    let _effects = effects_pool().await;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let run = store
            .create_run(CreateRun {
                input: Some(json!({
                    "effects_database_url": tasks_tests::database_url(),
                    "steps": 200,
                    "step_millis": 50,
                })),
                ..CreateRun::new("test-effects")
            })
            .await
            .unwrap();
        runs.push(run.id);
    }
    let mut first = spawn_worker(&store.url(), store.namespace(), 30_000);
    let holder: String = eventually!(Duration::from_secs(30), {
        let mut holders = HashSet::new();
        let mut running = true;
        for id in &runs {
            let run = store.get_run(*id).await.unwrap().unwrap();
            running &= run.status == RunStatus::Running;
            holders.insert(run.worker_id);
        }
        if running && holders.len() == 1 {
            holders.into_iter().next().flatten()
        } else {
            None
        }
    });
    // The rescuer is up and idle before the kill, as in production.
    let _second = spawn_worker(&store.url(), store.namespace(), 30_000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.0.kill().expect("SIGKILL the first worker");
    let killed = std::time::Instant::now();
    first.0.wait().unwrap();
    eventually!(Duration::from_secs(20), {
        let mut all = true;
        for id in &runs {
            let run = store.get_run(*id).await.unwrap().unwrap();
            all &= run.status == RunStatus::Running && run.worker_id != Some(holder.clone());
        }
        all.then_some(())
    });
    let reclaim = killed.elapsed();
    eprintln!("kill -> reclaim of {RUNS} runs: {reclaim:?}");
    assert!(
        reclaim < Duration::from_secs(15),
        "reclaimed after {reclaim:?}, not well under the 30 s lease"
    );
}

/// A store that fails the first `failures` writes a worker makes for its runs with a
/// database error, as during a database restart, then passes everything through.
pub(crate) struct Flaky {
    inner: tasks::SharedStore,
    failures: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// How long the first `slow_extends` lease extensions take, as on a starved machine or
    /// a stalled connection (`None`: as long as the store takes).
    slow_extend: Option<Duration>,
    /// How many lease extensions, from the first, take `slow_extend`.
    slow_extends: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// How many of the worker's step records and lease extensions the store refused with
    /// `LeaseLost`.
    pub(crate) lease_lost: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Refuse every step record with a limit error, as a store would refuse a value past
    /// the limits that no check before it caught.
    refuse_steps: bool,
    /// Pass continue-as-new through (`false`: the store lacks the capability).
    continues: bool,
    /// How many of the first hand-overs commit and then answer with a database error, as
    /// when the acknowledgement of the commit is lost.
    pub(crate) lost_continue_acks: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Flaky {
    /// A store that passes everything through to `inner`, and counts its refusals.
    pub(crate) fn over(inner: tasks::SharedStore) -> Flaky {
        Flaky {
            inner,
            failures: Default::default(),
            slow_extend: None,
            slow_extends: Default::default(),
            lease_lost: Default::default(),
            refuse_steps: false,
            continues: false,
            lost_continue_acks: Default::default(),
        }
    }

    /// A store that passes everything through to `inner`, continue-as-new included, and
    /// loses the acknowledgement of the first `lost_acks` hand-overs after their commit.
    pub(crate) fn continuing(inner: tasks::SharedStore, lost_acks: u32) -> Flaky {
        Flaky {
            continues: true,
            lost_continue_acks: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(lost_acks)),
            ..Flaky::over(inner)
        }
    }

    /// Counts `result` when it is a `LeaseLost` refusal.
    fn count<T>(&self, result: tasks::store::StoreResult<T>) -> tasks::store::StoreResult<T> {
        if let Err(tasks::StoreError::LeaseLost { .. }) = &result {
            self.lease_lost
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }

    fn refuse(&self) -> tasks::store::StoreResult<()> {
        if self.refuse_steps {
            return Err(tasks::StoreError::Limit(tasks::LimitError::TooLarge {
                field: tasks::limits::Field::StepOutput,
                bytes: tasks::limits::MAX_PAYLOAD_BYTES + 1,
                limit: tasks::limits::MAX_PAYLOAD_BYTES,
            }));
        }
        Ok(())
    }

    fn fail(&self, operation: tasks::store::Operation) -> tasks::store::StoreResult<()> {
        let left = self.failures.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |left| left.checked_sub(1),
        );
        match left {
            Ok(_) => Err(tasks::StoreError::database(
                operation,
                "injected: connection reset by peer",
            )),
            Err(_) => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl tasks::store::Store for Flaky {
    fn namespace(&self) -> &str {
        self.inner.namespace()
    }

    fn scoped(&self, namespace: &str) -> Result<tasks::SharedStore, tasks::LimitError> {
        Ok(tasks::SharedStore::new(Flaky {
            inner: self.inner.scoped(namespace)?,
            failures: self.failures.clone(),
            slow_extend: self.slow_extend,
            slow_extends: self.slow_extends.clone(),
            lease_lost: self.lease_lost.clone(),
            refuse_steps: self.refuse_steps,
            continues: self.continues,
            lost_continue_acks: self.lost_continue_acks.clone(),
        }))
    }

    async fn subscribe(&self) -> tasks::store::StoreResult<tasks::store::NotificationStream> {
        self.inner.contract().subscribe().await
    }
    fn lifecycle(&self) -> tasks::store::StoreResult<&dyn tasks::store::LifecycleStore> {
        Ok(self)
    }
    fn events(&self) -> tasks::store::StoreResult<&dyn tasks::store::EventStore> {
        Ok(self)
    }
    fn children(&self) -> tasks::store::StoreResult<&dyn tasks::store::ChildStore> {
        Ok(self)
    }
    fn published_state(&self) -> tasks::store::StoreResult<&dyn tasks::store::StateStore> {
        Ok(self)
    }
    fn schedules(&self) -> tasks::store::StoreResult<&dyn tasks::store::ScheduleStore> {
        Ok(self)
    }
    fn queues(&self) -> tasks::store::StoreResult<&dyn tasks::store::QueueStore> {
        Ok(self)
    }
    fn retention(&self) -> tasks::store::StoreResult<&dyn tasks::store::RetentionStore> {
        Ok(self)
    }
    fn continuation(&self) -> tasks::store::StoreResult<&dyn tasks::store::ContinueStore> {
        if self.continues {
            Ok(self)
        } else {
            Err(tasks::StoreError::unsupported(
                tasks::store::Capability::Continuation,
                self.namespace(),
            ))
        }
    }
}

#[async_trait::async_trait]
impl tasks::store::ContinueStore for Flaky {
    async fn continue_run(
        &self,
        params: tasks::store::ContinueRun,
    ) -> tasks::store::StoreResult<tasks::store::ContinuedRun> {
        let continued = self
            .inner
            .contract()
            .continuation()?
            .continue_run(params)
            .await?;
        let lost = self.lost_continue_acks.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |left| left.checked_sub(1),
        );
        match lost {
            Ok(_) => Err(tasks::StoreError::database(
                tasks::store::Operation::ContinueRun,
                "injected: the commit's acknowledgement was lost",
            )),
            Err(_) => Ok(continued),
        }
    }

    async fn lineage_head(
        &self,
        lineage_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Option<tasks::WorkflowRun>> {
        self.inner
            .contract()
            .continuation()?
            .lineage_head(lineage_id)
            .await
    }
}
#[async_trait::async_trait]
impl tasks::store::RunStore for Flaky {
    async fn create_run(&self, params: CreateRun) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner.contract().create_run(params).await
    }

    async fn create_or_get_run(
        &self,
        params: CreateRun,
    ) -> tasks::store::StoreResult<tasks::store::CreatedRun> {
        self.inner.contract().create_or_get_run(params).await
    }

    async fn get_run(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Option<tasks::WorkflowRun>> {
        self.inner.contract().get_run(run_id).await
    }

    async fn list_runs(
        &self,
        params: ListRuns,
    ) -> tasks::store::StoreResult<tasks::Page<tasks::WorkflowRun>> {
        self.inner.contract().list_runs(params).await
    }

    async fn count_runs(
        &self,
        statuses: &[tasks::RunStatus],
    ) -> tasks::store::StoreResult<Vec<(tasks::RunStatus, u64)>> {
        self.inner.contract().count_runs(statuses).await
    }
}
#[async_trait::async_trait]
impl tasks::store::LeaseStore for Flaky {
    async fn claim_runs_filtered(
        &self,
        worker_id: &str,
        lease: Duration,
        limit: u32,
        filter: &tasks::store::ClaimFilter,
    ) -> tasks::store::StoreResult<Vec<tasks::store::ClaimedRun>> {
        self.inner
            .contract()
            .claim_runs_filtered(worker_id, lease, limit, filter)
            .await
    }

    async fn extend_lease(
        &self,
        run_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        lease: Duration,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        let slowed = self.slow_extends.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |left| left.checked_sub(1),
        );
        if let (Some(slow), Ok(_)) = (self.slow_extend, slowed) {
            tokio::time::sleep(slow).await;
        }
        self.count(
            self.inner
                .contract()
                .extend_lease(run_id, holder, lease)
                .await,
        )
    }

    async fn sleep_run(
        &self,
        run_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        until: chrono::DateTime<chrono::Utc>,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.fail(tasks::store::Operation::SleepRun)?;
        self.inner.contract().sleep_run(run_id, holder, until).await
    }

    async fn complete_run(
        &self,
        run_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        output: serde_json::Value,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.fail(tasks::store::Operation::CompleteRun)?;
        self.inner
            .contract()
            .complete_run(run_id, holder, output)
            .await
    }

    async fn complete_run_with_steps(
        &self,
        run_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        output: serde_json::Value,
        steps: Vec<tasks::store::RecordStepAttempt>,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.fail(tasks::store::Operation::CompleteRun)?;
        if !steps.is_empty() {
            self.refuse()?;
        }
        self.inner
            .contract()
            .complete_run_with_steps(run_id, holder, output, steps)
            .await
    }

    async fn fail_run(
        &self,
        params: tasks::store::FailRun,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.fail(tasks::store::Operation::FailRun)?;
        self.inner.contract().fail_run(params).await
    }

    async fn release_run(
        &self,
        run_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        delay: Duration,
        reason: serde_json::Value,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner
            .contract()
            .release_run(run_id, holder, delay, reason)
            .await
    }

    async fn heartbeat(
        &self,
        worker_id: &str,
        stale_after: Duration,
    ) -> tasks::store::StoreResult<()> {
        self.inner
            .contract()
            .heartbeat(worker_id, stale_after)
            .await
    }

    async fn remove_worker(&self, worker_id: &str) -> tasks::store::StoreResult<()> {
        self.inner.contract().remove_worker(worker_id).await
    }
}
#[async_trait::async_trait]
impl tasks::store::StepStore for Flaky {
    async fn create_step_attempt(
        &self,
        params: tasks::store::CreateStepAttempt,
    ) -> tasks::store::StoreResult<tasks::StepAttempt> {
        self.fail(tasks::store::Operation::CreateStepAttempt)?;
        self.inner.contract().create_step_attempt(params).await
    }

    async fn get_step_attempt(
        &self,
        step_attempt_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Option<tasks::StepAttempt>> {
        self.inner
            .contract()
            .get_step_attempt(step_attempt_id)
            .await
    }

    async fn list_step_attempts(
        &self,
        params: tasks::ListStepAttempts,
    ) -> tasks::store::StoreResult<tasks::Page<tasks::StepAttempt>> {
        self.inner.contract().list_step_attempts(params).await
    }

    async fn step_history(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Vec<tasks::StepAttempt>> {
        self.inner.contract().step_history(run_id).await
    }

    async fn complete_step_attempt(
        &self,
        run_id: uuid::Uuid,
        step_attempt_id: uuid::Uuid,
        holder: &tasks::store::Holder,
        output: serde_json::Value,
    ) -> tasks::store::StoreResult<tasks::store::StepUpdate> {
        self.fail(tasks::store::Operation::CompleteStepAttempt)?;
        self.inner
            .contract()
            .complete_step_attempt(run_id, step_attempt_id, holder, output)
            .await
    }

    async fn record_step_attempt(
        &self,
        params: tasks::store::RecordStepAttempt,
    ) -> tasks::store::StoreResult<tasks::store::StepUpdate> {
        self.fail(tasks::store::Operation::RecordStepAttempt)?;
        self.refuse()?;
        self.count(self.inner.contract().record_step_attempt(params).await)
    }
}
#[async_trait::async_trait]
impl tasks::store::LifecycleStore for Flaky {
    async fn cancel_run(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner.contract().lifecycle()?.cancel_run(run_id).await
    }

    async fn pause_run(&self, run_id: uuid::Uuid) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner.contract().lifecycle()?.pause_run(run_id).await
    }

    async fn resume_run(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner.contract().lifecycle()?.resume_run(run_id).await
    }

    // Retry and fork.
    async fn retry_run(&self, run_id: uuid::Uuid) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner.contract().lifecycle()?.retry_run(run_id).await
    }

    async fn fork_run(
        &self,
        run_id: uuid::Uuid,
        from_step: &str,
    ) -> tasks::store::StoreResult<tasks::WorkflowRun> {
        self.inner
            .contract()
            .lifecycle()?
            .fork_run(run_id, from_step)
            .await
    }
}
#[async_trait::async_trait]
impl tasks::store::EventStore for Flaky {
    // Events sent to a run.
    async fn send_event(
        &self,
        params: tasks::store::SendEvent,
    ) -> tasks::store::StoreResult<tasks::SentEvent> {
        self.inner.contract().events()?.send_event(params).await
    }

    async fn signal_with_start(
        &self,
        params: tasks::store::SignalWithStart,
    ) -> tasks::store::StoreResult<tasks::store::SignalledRun> {
        self.inner
            .contract()
            .events()?
            .signal_with_start(params)
            .await
    }

    async fn wait_for_event(
        &self,
        params: tasks::store::WaitForEvent,
    ) -> tasks::store::StoreResult<tasks::store::EventWait> {
        self.inner.contract().events()?.wait_for_event(params).await
    }

    async fn list_events(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Vec<tasks::RunEvent>> {
        self.inner.contract().events()?.list_events(run_id).await
    }
}
#[async_trait::async_trait]
impl tasks::store::ChildStore for Flaky {
    // Child workflows.
    async fn start_child(
        &self,
        params: tasks::store::StartChild,
    ) -> tasks::store::StoreResult<tasks::store::StartedChild> {
        self.inner.contract().children()?.start_child(params).await
    }

    async fn wait_for_children(
        &self,
        params: tasks::store::WaitForChildren,
    ) -> tasks::store::StoreResult<tasks::store::ChildWait> {
        self.inner
            .contract()
            .children()?
            .wait_for_children(params)
            .await
    }
}
#[async_trait::async_trait]
impl tasks::store::StateStore for Flaky {
    // Published state.
    async fn set_state(
        &self,
        params: tasks::store::SetState,
    ) -> tasks::store::StoreResult<tasks::store::StateSet> {
        self.inner
            .contract()
            .published_state()?
            .set_state(params)
            .await
    }

    async fn get_state(
        &self,
        run_id: uuid::Uuid,
        key: &str,
    ) -> tasks::store::StoreResult<Option<tasks::PublishedState>> {
        self.inner
            .contract()
            .published_state()?
            .get_state(run_id, key)
            .await
    }

    async fn list_state(
        &self,
        run_id: uuid::Uuid,
    ) -> tasks::store::StoreResult<Vec<tasks::PublishedState>> {
        self.inner
            .contract()
            .published_state()?
            .list_state(run_id)
            .await
    }
}
#[async_trait::async_trait]
impl tasks::store::ScheduleStore for Flaky {
    async fn create_schedule(
        &self,
        params: tasks::NewSchedule,
        first_slot: tasks::store::schedule::NextSlot<'_>,
    ) -> tasks::store::StoreResult<tasks::Schedule> {
        self.inner
            .contract()
            .schedules()?
            .create_schedule(params, first_slot)
            .await
    }

    async fn put_schedule(
        &self,
        params: tasks::NewSchedule,
        first_slot: tasks::store::schedule::NextSlot<'_>,
    ) -> tasks::store::StoreResult<tasks::Schedule> {
        self.inner
            .contract()
            .schedules()?
            .put_schedule(params, first_slot)
            .await
    }

    async fn get_schedule(&self, name: &str) -> tasks::store::StoreResult<Option<tasks::Schedule>> {
        self.inner.contract().schedules()?.get_schedule(name).await
    }

    async fn list_schedules(&self) -> tasks::store::StoreResult<Vec<tasks::Schedule>> {
        self.inner.contract().schedules()?.list_schedules().await
    }

    async fn pause_schedule(&self, name: &str) -> tasks::store::StoreResult<tasks::Schedule> {
        self.inner
            .contract()
            .schedules()?
            .pause_schedule(name)
            .await
    }

    async fn resume_schedule(&self, name: &str) -> tasks::store::StoreResult<tasks::Schedule> {
        self.inner
            .contract()
            .schedules()?
            .resume_schedule(name)
            .await
    }

    async fn delete_schedule(&self, name: &str) -> tasks::store::StoreResult<()> {
        self.inner
            .contract()
            .schedules()?
            .delete_schedule(name)
            .await
    }

    async fn due_schedules(
        &self,
        limit: u32,
    ) -> tasks::store::StoreResult<tasks::store::schedule::DueSchedules> {
        self.inner
            .contract()
            .schedules()?
            .due_schedules(limit)
            .await
    }

    async fn fire_schedule(
        &self,
        params: tasks::store::schedule::FireSchedule,
    ) -> tasks::store::StoreResult<Option<Vec<tasks::WorkflowRun>>> {
        self.inner
            .contract()
            .schedules()?
            .fire_schedule(params)
            .await
    }
}
#[async_trait::async_trait]
impl tasks::store::QueueStore for Flaky {
    async fn put_queue(
        &self,
        options: &tasks::QueueOptions,
    ) -> tasks::store::StoreResult<tasks::Queue> {
        self.inner.contract().queues()?.put_queue(options).await
    }

    async fn get_queue(&self, name: &str) -> tasks::store::StoreResult<Option<tasks::Queue>> {
        self.inner.contract().queues()?.get_queue(name).await
    }

    async fn list_queues(&self) -> tasks::store::StoreResult<Vec<tasks::Queue>> {
        self.inner.contract().queues()?.list_queues().await
    }

    async fn delete_queue(&self, name: &str) -> tasks::store::StoreResult<()> {
        self.inner.contract().queues()?.delete_queue(name).await
    }
}
#[async_trait::async_trait]
impl tasks::store::RetentionStore for Flaky {
    async fn purge_runs(&self, params: &tasks::PurgeRuns) -> tasks::store::StoreResult<u64> {
        self.inner.contract().retention()?.purge_runs(params).await
    }

    async fn take_retention_turn(
        &self,
        worker_id: &str,
        every: Duration,
    ) -> tasks::store::StoreResult<Option<u64>> {
        self.inner
            .contract()
            .retention()?
            .take_retention_turn(worker_id, every)
            .await
    }
}

/// A worker whose run's writes fail on database errors (a restart) tries them again and
/// finishes the run itself, instead of leaving it to its (here 60 s) lease.
async fn a_worker_retries_its_writes_through_database_errors(backend: Backend) {
    let store = backend.store().await;
    let failures = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(5));
    let flaky = tasks::SharedStore::new(Flaky {
        failures: failures.clone(),
        ..Flaky::over(store.shared())
    });
    let client = tasks::Client::new(flaky.clone()).unwrap();
    let handle = many::start(&client, 10).await.unwrap();
    let worker = tasks::Worker::builder(flaky)
        .lease(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .build()
        .unwrap()
        .spawn();
    let output = handle
        .result_within(Duration::from_secs(20))
        .await
        .expect("the run completes without waiting for its lease");
    worker.shutdown().await;
    assert_eq!(output, 33);
    assert_eq!(
        failures.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every failure was injected"
    );
    let run = store.get_run(handle.id()).await.unwrap().unwrap();
    assert_eq!(run.attempts, 1, "one worker, one attempt");
    for k in 0..3 {
        assert_eq!(calls(handle.id(), &format!("work:{}", 10 + k)), 1);
    }
}

/// A run whose stored row cannot be decoded (a poison row) is failed with an error naming
/// it, while the worker drains the other runs; listings name it while it is corrupt and
/// read again once it was failed.
async fn a_poison_row_is_failed_and_the_others_complete(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let mut handles = Vec::new();
    for n in 0..6 {
        handles.push(many::start(&client, 100 + n).await.unwrap());
    }
    let poison = handles[2].id();
    store.poison_input(poison).await;
    match store.list_runs(ListRuns::default()).await {
        Err(tasks::StoreError::CorruptRun { id, .. }) => assert_eq!(id, poison),
        other => panic!("expected the listing to name the corrupt run, got {other:?}"),
    }
    let worker = worker(&store).build().unwrap().spawn();
    for (i, handle) in handles.iter().enumerate() {
        if i != 2 {
            handle.result_within(Duration::from_secs(20)).await.unwrap();
        }
    }
    let failed = eventually!(Duration::from_secs(10), {
        let run = store.get_run(poison).await.unwrap().unwrap();
        run.status.is_terminal().then_some(run)
    });
    worker.shutdown().await;
    assert_eq!(failed.status, RunStatus::Failed);
    let error = failed.error.expect("an error record");
    assert_eq!(error["kind"], "corrupt");
    assert_eq!(error["retryable"], false);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&poison.to_string()), "{message}");
    assert!(error["quarantined"]["input"].is_string(), "{error}");
    assert_eq!(
        failed.input, None,
        "the undecodable input was moved into the error"
    );
    let page = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(page.data.len(), 6);
    let completed = page
        .data
        .iter()
        .filter(|run| run.status == RunStatus::Completed)
        .count();
    assert_eq!(completed, 5);
}

#[step]
async fn before_the_nap(n: u32) -> Result<u32, std::io::Error> {
    let run_id = WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default();
    bump(run_id, "before_the_nap");
    Ok(n)
}

/// One step, a sleep (during which a test corrupts the step's row), one more step.
#[workflow(name = "e2e-napper")]
async fn napper(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let first = before_the_nap(n).await?;
    ctx.sleep("nap", Duration::from_millis(1500)).await?;
    Ok(first + unit_of_work(n).await?)
}

/// A run whose step history holds a row that cannot be decoded (a poison step row) is
/// failed for good at its next claim, with an error naming the run and the step row,
/// instead of being claimed again after every lease; the worker drains the other runs.
async fn a_poison_step_row_fails_its_run_for_good_and_the_others_complete(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let poisoned = napper::start(&client, 7).await.unwrap();
    let step = eventually!(Duration::from_secs(20), {
        let run = store.get_run(poisoned.id()).await.unwrap().unwrap();
        let steps = poisoned.steps().await.unwrap();
        (run.status == RunStatus::Sleeping)
            .then(|| steps.into_iter().find(|s| s.step_name == "before_the_nap"))
            .flatten()
    });
    store
        .poison_step_output(poisoned.id(), "before_the_nap")
        .await;
    match poisoned.steps().await {
        Err(tasks::StoreError::CorruptStep {
            run_id,
            step_id,
            column,
            ..
        }) => {
            assert_eq!(run_id, poisoned.id());
            assert_eq!(step_id, step.id);
            assert_eq!(column, "output");
        }
        other => panic!("expected the listing to name the corrupt run, got {other:?}"),
    }
    let mut others = Vec::new();
    for n in 0..4 {
        others.push(many::start(&client, 200 + n).await.unwrap());
    }
    for other in &others {
        other.result_within(Duration::from_secs(20)).await.unwrap();
    }
    // The worker's lease is 2 s: failing on the first claim after the nap takes well under
    // a few leases; being claimed again after every lease would never end.
    let failed = eventually!(Duration::from_secs(20), {
        let run = store.get_run(poisoned.id()).await.unwrap().unwrap();
        run.status.is_terminal().then_some(run)
    });
    // A few more leases: nothing claims it again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    worker.shutdown().await;
    assert_eq!(failed.status, RunStatus::Failed);
    let error = failed.error.clone().expect("an error record");
    assert_eq!(error["kind"], "corrupt", "{error}");
    assert_eq!(error["retryable"], false, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&poisoned.id().to_string()), "{message}");
    assert!(message.contains(&step.id.to_string()), "{message}");
    assert!(message.contains("before_the_nap"), "{message}");
    let again = store.get_run(poisoned.id()).await.unwrap().unwrap();
    assert_eq!(again.status, RunStatus::Failed);
    assert_eq!(again.attempts, failed.attempts, "not claimed again");
    assert_eq!(again.updated_at, failed.updated_at, "not touched again");
    assert_eq!(calls(poisoned.id(), "before_the_nap"), 1);
    assert_eq!(calls(poisoned.id(), "work:7"), 0, "the run went no further");
}

/// A worker write that the store refuses for a value past its limits (here every step
/// record, as if no check before the store had caught the value) fails the run for good
/// at once with a typed `limit` error, instead of leaving it to its lease to be refused
/// again after every one.
async fn a_worker_write_refused_for_its_limits_fails_the_run_at_once(backend: Backend) {
    let store = backend.store().await;
    let refusing = tasks::SharedStore::new(Flaky {
        refuse_steps: true,
        ..Flaky::over(store.shared())
    });
    let client = tasks::Client::new(refusing.clone()).unwrap();
    let worker = tasks::Worker::builder(refusing)
        .lease(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .build()
        .unwrap()
        .spawn();
    for n in [300, 400] {
        let handle = many::start(&client, n).await.unwrap();
        let started = std::time::Instant::now();
        match handle.result_within(Duration::from_secs(20)).await {
            Err(tasks::RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("limit"), "{error}");
                assert!(!error.retryable, "{error}");
                assert!(error.message.contains("the step output"), "{error}");
                assert!(
                    error
                        .message
                        .contains(&tasks::limits::MAX_PAYLOAD_BYTES.to_string()),
                    "{error}"
                );
            }
            other => panic!("expected the run to fail for good, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "failed at once, not after the 60 s lease"
        );
        let run = store.get_run(handle.id()).await.unwrap().unwrap();
        assert_eq!((run.status, run.attempts), (RunStatus::Failed, 1));
        assert!(
            store.step_history(handle.id()).await.unwrap().is_empty(),
            "nothing was recorded"
        );
    }
    worker.shutdown().await;
}

/// A run whose worker was SIGKILLed mid-run is canceled, then retried: the retried run is
/// claimed by another worker process at once, no completed step runs again, and a fork of
/// the finished run from a later step runs only the steps from there.
async fn a_killed_run_is_canceled_retried_and_forked_without_rerunning_completed_steps(
    backend: Backend,
) {
    let store = backend.store().await;
    let effects = effects_pool().await;

    const STEPS: usize = 10;
    let run = store
        .create_run(CreateRun {
            input: Some(
                json!({ "effects_database_url": tasks_tests::database_url(), "steps": STEPS, "step_millis": 150 }),
            ),
            ..CreateRun::new("test-effects")
        })
        .await
        .unwrap();

    // A long lease: only the retry can make the run available to the second worker soon.
    let mut first = spawn_worker(&store.url(), store.namespace(), 60_000);
    eventually!(Duration::from_secs(30), {
        let steps = store.step_history(run.id).await.unwrap();
        let done = steps
            .iter()
            .filter(|s| s.status == StepStatus::Completed)
            .count();
        (done >= 3).then_some(())
    });
    first.0.kill().expect("SIGKILL the first worker");
    first.0.wait().unwrap();
    let completed_at_kill: HashSet<String> = store
        .step_history(run.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.status == StepStatus::Completed)
        .map(|s| s.step_name)
        .collect();
    assert!(completed_at_kill.len() < STEPS, "the kill landed mid-run");

    let canceled = store.lifecycle().unwrap().cancel_run(run.id).await.unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
    let retried = store.lifecycle().unwrap().retry_run(run.id).await.unwrap();
    assert_eq!(retried.status, RunStatus::Pending);

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let finished = completed_run(&store, run.id).await;
    assert_eq!(finished.output, Some(json!(STEPS)));
    assert_eq!(
        finished.attempts, 1,
        "the retry started the run's attempts over"
    );

    let counts = effect_counts(&effects, run.id).await;
    assert_eq!(counts.len(), STEPS, "every step ran: {counts:?}");
    for i in 0..STEPS {
        let step_name = if i == 0 {
            "record_effect".to_owned()
        } else {
            format!("record_effect:{i}")
        };
        let count = counts[&format!("step-{i:03}")];
        if completed_at_kill.contains(&step_name) {
            assert_eq!(
                count, 1,
                "completed step {step_name} ran again after the retry"
            );
        } else {
            assert!(
                (1..=2).contains(&count),
                "step {step_name} ran {count} times"
            );
        }
    }
    assert!(
        counts.values().filter(|&&c| c == 2).count() <= 1,
        "{counts:?}"
    );

    // Fork the finished run from its seventh step: only steps 6.. run, in the new run.
    let forked = store
        .lifecycle()
        .unwrap()
        .fork_run(run.id, "record_effect:6")
        .await
        .unwrap();
    let done = eventually!(Duration::from_secs(60), {
        let run = store.get_run(forked.id).await.unwrap().unwrap();
        run.status.is_terminal().then_some(run)
    });
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(json!(STEPS)));
    let forked_counts = effect_counts(&effects, forked.id).await;
    let mut labels: Vec<_> = forked_counts.keys().cloned().collect();
    labels.sort();
    let expected: Vec<String> = (6..STEPS).map(|i| format!("step-{i:03}")).collect();
    assert_eq!(labels, expected, "only the steps from the fork ran");
    assert!(forked_counts.values().all(|&c| c == 1), "{forked_counts:?}");
    assert_eq!(
        effect_counts(&effects, run.id).await,
        counts,
        "the source is untouched"
    );
}

#[step]
async fn recovery_long_step() -> Result<(), WorkflowError> {
    let run_id = WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default();
    bump(run_id, "long");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

#[workflow(name = "recovery-own-lease")]
async fn own_lease(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    recovery_long_step().await
}

/// A run whose lease runs out while its worker still executes it (the heartbeat's first
/// extension stalls for 3 s, the lease is 500 ms) is claimed again by that same worker, by a
/// new claim. The execution in flight is stale from then on: the store refuses its step
/// record (its claim no longer holds the run), whatever the worker remembers. The new
/// execution, which waited for the stale one to end instead of overlapping it, runs the
/// step again and completes the run: the step is recorded once.
async fn a_worker_whose_own_lease_ran_out_has_its_stale_writes_refused(backend: Backend) {
    let store = backend.store().await;
    let flaky = Flaky {
        slow_extend: Some(Duration::from_secs(3)),
        slow_extends: std::sync::Arc::new(std::sync::atomic::AtomicU32::new(1)),
        ..Flaky::over(store.shared())
    };
    let lease_lost = flaky.lease_lost.clone();
    let stalling = tasks::SharedStore::new(flaky);
    let client = tasks::Client::new(stalling.clone()).unwrap();
    let worker = tasks::Worker::builder(stalling)
        .lease(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap()
        .spawn();
    let run = own_lease::start(&client, ()).await.unwrap();
    run.result_within(Duration::from_secs(30)).await.unwrap();
    worker.shutdown().await;
    assert!(
        lease_lost.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "the stale execution's record was refused"
    );
    assert!(
        calls(run.id(), "long") >= 2,
        "the step the stale execution could not record ran again under the new claim"
    );
    let steps = run.steps().await.unwrap();
    assert_eq!(steps.len(), 1, "the step is recorded once: {steps:?}");
    let done = run.run().await.unwrap();
    assert!(
        done.attempts >= 2 && done.claim_epoch >= 2,
        "the lease ran out and the run was claimed again ({} attempts, claim {})",
        done.attempts,
        done.claim_epoch
    );
}

every_store! {
    a_worker_whose_own_lease_ran_out_has_its_stale_writes_refused,
    runs_shared_by_several_workers_complete_exactly_once,
    a_worker_retries_its_writes_through_database_errors,
    a_worker_write_refused_for_its_limits_fails_the_run_at_once,
    ;
    sql:
    a_worker_whose_heartbeat_beats_again_after_a_freeze_still_confirms_its_hold,
    a_thawed_worker_starts_no_step_of_a_run_it_lost,
    a_killed_run_is_canceled_retried_and_forked_without_rerunning_completed_steps,
    a_killed_worker_does_not_start_a_child_twice,
    a_killed_worker_is_replaced_and_no_completed_step_runs_again,
    a_killed_workers_runs_are_reclaimed_within_seconds,
    a_poison_row_is_failed_and_the_others_complete,
    a_poison_step_row_fails_its_run_for_good_and_the_others_complete,
    a_run_waiting_for_an_event_survives_a_killed_worker,
    a_run_parked_in_a_select_survives_a_killed_worker,
}

// ---- A worker frozen past its heartbeat's staleness ----

/// The runs whose first execution froze already.
fn froze_once(run_id: tasks::uuid::Uuid) -> bool {
    static FROZEN: std::sync::Mutex<Option<HashSet<tasks::uuid::Uuid>>> =
        std::sync::Mutex::new(None);
    !FROZEN
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(run_id)
}

/// Set once the frozen execution of a run resumed.
fn thawed() -> &'static std::sync::Mutex<HashSet<tasks::uuid::Uuid>> {
    static THAWED: std::sync::OnceLock<std::sync::Mutex<HashSet<tasks::uuid::Uuid>>> =
        std::sync::OnceLock::new();
    THAWED.get_or_init(Default::default)
}

#[step]
async fn before_freeze(run: tasks::uuid::Uuid) -> Result<u32, std::io::Error> {
    Ok(bump(run, "before-freeze"))
}

#[step]
async fn after_freeze(run: tasks::uuid::Uuid) -> Result<u32, std::io::Error> {
    Ok(bump(run, "after-freeze"))
}

/// How the first execution of [`freezes`] stops.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Freeze {
    /// How long the whole worker stops.
    ms: u64,
    /// How long the thawed execution then waits in the workflow's code (its worker beats
    /// again meanwhile) before its next step.
    then_wait_ms: u64,
}

/// A step, a publication (which writes the step's record, so nothing is held), then on its
/// first execution the whole worker stops for `ms` (its runtime's only thread sleeps: no
/// heartbeat, no lease extension, as under `SIGSTOP`), waits `then_wait_ms` more in the
/// workflow's code, then a step.
#[workflow(name = "e2e-freeze")]
async fn freezes(ctx: WorkflowContext, freeze: Freeze) -> Result<u32, WorkflowError> {
    before_freeze(ctx.run_id()).await?;
    ctx.set_state("before", &true).await?;
    if !froze_once(ctx.run_id()) {
        std::thread::sleep(Duration::from_millis(freeze.ms));
        thawed().lock().unwrap().insert(ctx.run_id());
        tokio::time::sleep(Duration::from_millis(freeze.then_wait_ms)).await;
    }
    Ok(after_freeze(ctx.run_id()).await?)
}

/// A worker frozen past its heartbeat's staleness loses its run to another worker, which
/// completes it. When the frozen worker resumes, it starts no step body of the run it lost:
/// before a body it confirms its hold, and the store refuses it. Every step body ran once.
async fn a_thawed_worker_starts_no_step_of_a_run_it_lost(backend: Backend) {
    thawed_worker_starts_no_step(backend, 0, Duration::from_secs(2)).await;
}

/// As [`a_thawed_worker_starts_no_step_of_a_run_it_lost`], but the thawed execution waits
/// in the workflow's code long enough for its worker's heartbeat to go through again before
/// the next step: a heartbeat that is fresh again says nothing of the runs taken over while
/// it was stale, so the worker still confirms its hold (and is refused).
async fn a_worker_whose_heartbeat_beats_again_after_a_freeze_still_confirms_its_hold(
    backend: Backend,
) {
    thawed_worker_starts_no_step(backend, 1_500, Duration::from_secs(6)).await;
}

/// Freezes a worker (see [`freezes`]) while it holds a run, lets another worker complete
/// the run, and watches the thawed execution for `watch` after it resumed.
async fn thawed_worker_starts_no_step(backend: Backend, then_wait_ms: u64, watch: Duration) {
    let store = backend.store().await;
    let client = client(&store);
    let (url, namespace) = (store.url(), store.namespace().to_owned());
    // The worker that freezes: on a runtime of its own, with one thread, so that sleeping
    // in the workflow stops all of it.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let frozen = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let store = tasks::connect(&url)
                .await
                .unwrap()
                .contract()
                .scoped(&namespace)
                .unwrap();
            let worker = tasks::Worker::builder(store)
                .concurrency(1)
                .lease(Duration::from_secs(20))
                .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
                .build()
                .unwrap()
                .spawn();
            let _ = stopped.await;
            worker.shutdown().await;
        });
    });
    let freeze = Freeze {
        ms: 8_000,
        then_wait_ms,
    };
    let run = freezes::start(&client, freeze).await.unwrap();
    let id = run.id();
    // The frozen worker ran the first step and published: it is about to freeze.
    eventually!(
        Duration::from_secs(30),
        client.get_state::<bool>(id, "before").await.unwrap()
    );
    let rescuer = worker(&store).build().unwrap().spawn();
    assert_eq!(run.result_within(Duration::from_secs(30)).await.unwrap(), 1);
    assert!(
        !thawed().lock().unwrap().contains(&id),
        "the rescuer finished before the frozen worker resumed"
    );
    eventually!(
        Duration::from_secs(30),
        thawed().lock().unwrap().contains(&id).then_some(())
    );
    // Time for the thawed execution to reach its next step and be refused.
    tokio::time::sleep(watch).await;
    stop.send(()).unwrap();
    tokio::task::spawn_blocking(move || frozen.join().unwrap())
        .await
        .unwrap();
    rescuer.shutdown().await;
    assert_eq!(calls(id, "before-freeze"), 1);
    assert_eq!(
        calls(id, "after-freeze"),
        1,
        "the thawed worker started a step body of a run it no longer held"
    );
}
