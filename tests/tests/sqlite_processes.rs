//! Two live worker processes on one SQLite file, one of them SIGKILLed in the middle of its
//! steps: the other takes its runs over, and every run completes once with each step
//! recorded once.

use crate::e2e_recovery::{KillOnDrop, effect_counts, effects_pool};
use crate::support::Backend;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tasks::store::{CreateRun, Store};
use tasks::{RunStatus, StepStatus};
use uuid::Uuid;

/// A `test_worker` process on `store_url`, running at most `concurrency` runs at once.
fn spawn_worker(store_url: &str, namespace: &str, lease_ms: u64, concurrency: usize) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_test_worker"))
        .args([
            store_url,
            namespace,
            &lease_ms.to_string(),
            &concurrency.to_string(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the test worker process");
    KillOnDrop(child)
}

/// The completed steps of `run`, by name, with how many completed records each has.
async fn completed_steps(store: &dyn Store, run: Uuid) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for step in store.step_history(run).await.unwrap() {
        if step.status == StepStatus::Completed {
            *counts.entry(step.step_name).or_default() += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_mid_step_on_a_shared_sqlite_file_is_taken_over() {
    const RUNS: usize = 8;
    const STEPS: usize = 8;
    // Leases far longer than the bound below: the takeover must come from the dead
    // worker's heartbeat going stale, as in production.
    const LEASE_MS: u64 = 30_000;
    let store = Backend::Sqlite.store().await;
    let effects = effects_pool().await;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let run = store
            .create_run(CreateRun {
                input: Some(json!({
                    "effects_database_url": tasks_tests::database_url(),
                    "steps": STEPS,
                    "step_millis": 300,
                })),
                ..CreateRun::new("test-effects")
            })
            .await
            .unwrap();
        runs.push(run.id);
    }
    // Three runs each at most: both processes hold runs, two wait.
    let mut first = spawn_worker(&store.url(), store.namespace(), LEASE_MS, 3);
    let _second = spawn_worker(&store.url(), store.namespace(), LEASE_MS, 3);

    // Kill a process once both hold runs and the victim's runs are under way (a step
    // completed), so that the kill lands between a step's start and its record.
    let held: HashMap<String, HashSet<Uuid>> = eventually!(Duration::from_secs(30), {
        let mut holders: HashMap<String, HashSet<Uuid>> = HashMap::new();
        for id in &runs {
            let run = store.get_run(*id).await.unwrap().unwrap();
            if let (RunStatus::Running, Some(worker)) = (run.status, run.worker_id) {
                holders.entry(worker).or_default().insert(*id);
            }
        }
        let mut started = true;
        for id in holders.values().flatten() {
            started &= !completed_steps(&*store, *id).await.is_empty();
        }
        (holders.len() == 2 && started).then_some(holders)
    });
    first.0.kill().expect("SIGKILL the first worker");
    let killed = Instant::now();
    first.0.wait().unwrap();

    // Which worker id was the killed process's: the one whose runs record no more steps.
    // Read what each run had recorded at the kill first.
    let mut recorded_at_kill = HashMap::new();
    let mut began_at_kill = HashMap::new();
    for id in &runs {
        let recorded = completed_steps(&*store, *id).await;
        let began = effect_counts(&effects, *id).await.len();
        began_at_kill.insert(*id, began.saturating_sub(recorded.len()));
        recorded_at_kill.insert(*id, recorded);
    }
    let survivor_id = eventually!(Duration::from_secs(10), {
        // The survivor records new steps; the dead one cannot.
        let mut advancing = None;
        for (worker, ids) in &held {
            for id in ids {
                let now = completed_steps(&*store, *id).await;
                if now.len() > recorded_at_kill[id].len() {
                    advancing = Some(worker.clone());
                }
            }
        }
        advancing
    });
    let dead_id = held
        .keys()
        .find(|worker| **worker != survivor_id)
        .cloned()
        .expect("two holders");
    let orphaned = held[&dead_id].clone();
    // The kill landed mid-step: a body of the killed process had begun (its effect is
    // counted) without a record.
    let in_flight: usize = orphaned.iter().map(|id| began_at_kill[id]).sum();
    assert!(in_flight > 0, "no step of the killed process was in flight");

    let takeover = eventually!(Duration::from_secs(30), {
        let mut all = true;
        for id in &orphaned {
            let run = store.get_run(*id).await.unwrap().unwrap();
            all &= run.worker_id.as_deref() != Some(dead_id.as_str());
        }
        all.then(|| killed.elapsed())
    });
    eprintln!(
        "kill -> takeover of {} runs on one SQLite file: {takeover:?}",
        orphaned.len()
    );
    assert!(
        takeover < Duration::from_secs(20),
        "taken over after {takeover:?}, not within the heartbeat's staleness and well under \
         the {LEASE_MS} ms lease"
    );

    for id in &runs {
        let run = eventually!(Duration::from_secs(60), {
            let run = store.get_run(*id).await.unwrap().unwrap();
            run.status.is_terminal().then_some(run)
        });
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
        assert_eq!(run.output, Some(json!(STEPS)));
        let expected_attempts = if orphaned.contains(id) { 2 } else { 1 };
        assert_eq!(
            run.attempts, expected_attempts,
            "run {id}: claimed once, and once more if its worker was killed"
        );
        if orphaned.contains(id) {
            assert_eq!(run.worker_id.as_deref(), Some(survivor_id.as_str()));
        }
        let recorded = completed_steps(&*store, *id).await;
        assert_eq!(recorded.len(), STEPS, "run {id}: {recorded:?}");
        assert!(
            recorded.values().all(|&count| count == 1),
            "run {id}: a step recorded twice: {recorded:?}"
        );
        let counts = effect_counts(&effects, *id).await;
        assert_eq!(counts.len(), STEPS, "run {id}: every step ran: {counts:?}");
        let ran_twice = counts.values().filter(|&&count| count > 1).count();
        assert!(
            counts.values().all(|&count| count <= 2) && ran_twice <= 1,
            "run {id}: only the step in flight at the kill may run twice: {counts:?}"
        );
        if !orphaned.contains(id) {
            assert_eq!(ran_twice, 0, "run {id} was never taken over: {counts:?}");
        }
        let before = &recorded_at_kill[id];
        for (i, count) in (0..STEPS).map(|i| (i, counts[&format!("step-{i:03}")])) {
            let name = if i == 0 {
                "record_effect".to_owned()
            } else {
                format!("record_effect:{i}")
            };
            if before.contains_key(&name) {
                assert_eq!(
                    count, 1,
                    "run {id}: {name}, recorded before the kill, ran again"
                );
            }
        }
    }
}
