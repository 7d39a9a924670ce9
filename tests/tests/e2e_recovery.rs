//! Crash recovery and exactly-once completion across workers, against each store (Postgres
//! and SQLite).

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use sqlx::{PgPool, Row};
use support::{Backend, bump, calls, client, worker};
use tasks::{
    CreateRun, ListRuns, RunStatus, StepStatus, WorkflowContext, WorkflowError, step, workflow,
};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a `test_worker` process on the store at `store_url`, scoped to `namespace`.
fn spawn_worker(store_url: &str, namespace: &str, lease_ms: u64) -> KillOnDrop {
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
async fn effects_pool() -> PgPool {
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

async fn effect_counts(effects: &PgPool, run_id: uuid::Uuid) -> HashMap<String, i32> {
    sqlx::query("SELECT step, count FROM tasks_test.effects WHERE run_id = $1")
        .bind(run_id)
        .fetch_all(effects)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.get::<String, _>(0), row.get::<i32, _>(1)))
        .collect()
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
    let finished = eventually!(Duration::from_secs(60), {
        let run = store.get_run(run.id).await.unwrap().unwrap();
        run.status.is_terminal().then_some(run)
    });
    assert_eq!(
        finished.status,
        RunStatus::Completed,
        "{:?}",
        finished.error
    );
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
    let workers: Vec<_> = (0..3)
        .map(|i| {
            worker(&store)
                .concurrency(16)
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

both_backends!(
    a_killed_worker_is_replaced_and_no_completed_step_runs_again,
    runs_shared_by_several_workers_complete_exactly_once,
);
