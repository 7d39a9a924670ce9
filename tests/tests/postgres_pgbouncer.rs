//! The Postgres store through PgBouncer in transaction mode (a PgBouncer of the test's own,
//! with fewer server connections than clients): worker processes with
//! `tasks_pooling=transaction` drain runs with steps, durable sleeps, events and children,
//! each run completing once with each step recorded once; and the default pooling, through
//! the same kind of PgBouncer, failing, which shows that the server connections really
//! change under the store.
//!
//! Without PgBouncer installed the tests skip, saying so, except in CI (`CI` set), where
//! they fail.

use crate::e2e_recovery::{KillOnDrop, effect_counts, effects_pool};

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tasks::postgres::{PgOptions, PgStore, Pooling};
use tasks::store::{CreateRun, RunStore, SharedStore, Store};
use tasks::{Client, RunStatus, StepStatus};
use tasks_test_support::pgbouncer::{Config, PgBouncer};
use uuid::Uuid;

/// The approval `test_worker`'s `test-approval` runs wait for (same topic, same shape).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct TestApproval {
    by: String,
}

impl tasks::Event for TestApproval {
    const TOPIC: &'static str = "test-approval";
}

/// A PgBouncer in transaction mode with `pool_size` server connections in front of the test
/// server, with `ignore` as its `ignore_startup_parameters`; `None` when the test skips.
fn bouncer(pool_size: u32, ignore: &'static str) -> Option<PgBouncer> {
    let direct = tasks_tests::connect_options();
    let mut config = Config::transaction(pool_size, direct.get_host(), direct.get_port());
    config.ignore_startup_parameters = ignore;
    PgBouncer::start_or_skip(&config)
}

/// The test database's URL through `bouncer`.
fn url_through(bouncer: &PgBouncer) -> String {
    let direct = tasks_tests::connect_options();
    bouncer.url(
        direct.get_username(),
        direct.get_database().unwrap_or("postgres"),
    )
}

/// `value` percent-encoded for a URL's query.
fn percent_encoded(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A `test_worker` process on `store_url`, running at most 4 runs at once.
fn spawn_worker(store_url: &str, namespace: &str) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_test_worker"))
        .args([store_url, namespace, "20000", "4"])
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
async fn worker_processes_through_pgbouncer_complete_every_run_once() {
    // Three server connections for three worker processes and this test's client, each
    // with a pool of several connections: clients share server connections all the time.
    let Some(bouncer) = bouncer(3, "") else {
        return;
    };
    // Migrated directly, as the guide tells operators to.
    drop(tasks_tests::pg_store().await);
    let namespace = tasks_tests::unique_namespace("pgbouncer");
    let pooled = format!("{}?tasks_pooling=transaction", url_through(&bouncer));
    // The client goes through PgBouncer too, listening directly.
    let store = PgStore::connect_with(
        &pooled,
        PgOptions::new().listen_url(tasks_tests::database_url()),
    )
    .await
    .unwrap()
    .with_namespace(namespace.clone())
    .unwrap();
    assert_eq!(store.pooling(), Pooling::Transaction);
    let effects = effects_pool().await;
    let effects_url = tasks_tests::database_url();

    let mut runs: Vec<(Uuid, &str)> = Vec::new();
    for _ in 0..8 {
        let run = store
            .create_run(CreateRun {
                input: Some(json!({
                    "effects_database_url": effects_url,
                    "steps": 4,
                    "step_millis": 20,
                })),
                ..CreateRun::new("test-effects")
            })
            .await
            .unwrap();
        runs.push((run.id, "test-effects"));
    }
    for (workflow, input) in [
        (
            "test-nap",
            json!({ "effects_database_url": effects_url, "nap_millis": 300 }),
        ),
        (
            "test-parent",
            json!({ "effects_database_url": effects_url, "work_millis": 50 }),
        ),
        (
            "test-approval",
            json!({ "effects_database_url": effects_url }),
        ),
    ] {
        for _ in 0..4 {
            let run = store
                .create_run(CreateRun {
                    input: Some(input.clone()),
                    ..CreateRun::new(workflow)
                })
                .await
                .unwrap();
            runs.push((run.id, workflow));
        }
    }

    // Two workers listen directly; the third has no listen URL, and finds runs by polling.
    let listening = format!(
        "{pooled}&tasks_listen_url={}",
        percent_encoded(&tasks_tests::database_url())
    );
    let _workers = [
        spawn_worker(&listening, &namespace),
        spawn_worker(&listening, &namespace),
        spawn_worker(&pooled, &namespace),
    ];

    // Approve each `test-approval` run once it waits.
    let client = Client::new(SharedStore::new(store.clone())).unwrap();
    for (run_id, _) in runs.iter().filter(|(_, w)| *w == "test-approval") {
        eventually!(Duration::from_secs(60), {
            let run = store.get_run(*run_id).await.unwrap().unwrap();
            (run.status == RunStatus::Sleeping).then_some(())
        });
        let sent = client
            .send_event(*run_id, &TestApproval { by: "ops".into() })
            .await
            .unwrap();
        assert!(sent.woke, "the send finds the run waiting on its topic");
    }

    let deadline = Instant::now() + Duration::from_secs(120);
    for (run_id, workflow) in &runs {
        let finished = loop {
            let run = store.get_run(*run_id).await.unwrap().unwrap();
            if run.status.is_terminal() {
                break run;
            }
            assert!(
                Instant::now() < deadline,
                "{workflow} run {run_id} did not finish: {run:?}\n{}",
                bouncer.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            finished.status,
            RunStatus::Completed,
            "{workflow}: {:?}",
            finished.error
        );
        let (expected_output, effects_expected): (_, &[&str]) = match *workflow {
            "test-effects" => (json!(4), &["step-000", "step-001", "step-002", "step-003"]),
            "test-nap" => (json!(300), &["before", "after"]),
            "test-approval" => (json!("ops"), &["before", "after"]),
            "test-parent" => (finished.output.clone().unwrap(), &["before", "after"]),
            other => unreachable!("{other}"),
        };
        assert_eq!(finished.output, Some(expected_output), "{workflow}");
        let counts = effect_counts(&effects, *run_id).await;
        for effect in effects_expected {
            assert_eq!(
                counts.get(*effect),
                Some(&1),
                "{workflow} {run_id}: {counts:?}"
            );
        }
        assert_eq!(counts.len(), effects_expected.len(), "{counts:?}");
        let steps = completed_steps(&store, *run_id).await;
        assert!(
            steps.values().all(|count| *count == 1),
            "{workflow} {run_id}: a step recorded twice: {steps:?}"
        );
        if *workflow == "test-parent" {
            // The child ran once, through PgBouncer too.
            let child: Uuid = finished
                .output
                .as_ref()
                .and_then(|output| output.as_str())
                .and_then(|id| id.parse().ok())
                .expect("the parent returns its child's id");
            let counts = effect_counts(&effects, child).await;
            assert_eq!(counts.get("child-start"), Some(&1), "{counts:?}");
            assert_eq!(counts.get("child-work"), Some(&1), "{counts:?}");
            assert!(
                completed_steps(&store, child)
                    .await
                    .values()
                    .all(|count| *count == 1)
            );
        }
    }
}

/// The store's default pooling through PgBouncer in transaction mode fails: its named
/// prepared statements, and the two exchanges of each statement outside a transaction, land
/// on server connections that other clients used. `extra_float_digits` is let through so
/// that the store connects at all (PgBouncer refuses it otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_pooling_fails_through_pgbouncer_in_transaction_mode() {
    let Some(bouncer) = bouncer(2, "extra_float_digits") else {
        return;
    };
    drop(tasks_tests::pg_store().await);
    let store = PgStore::connect_with(
        &url_through(&bouncer),
        PgOptions::new().pooling(Pooling::Session),
    )
    .await;
    let store = match store {
        // Even its first connection may fail already (its session settings are a statement).
        Err(error) => {
            eprintln!("connecting failed: {error}");
            return;
        }
        Ok(store) => store
            .with_namespace(tasks_tests::unique_namespace("pgbouncer"))
            .unwrap(),
    };
    let failures = Arc::new(AtomicUsize::new(0));
    let first_failure = Arc::new(std::sync::Mutex::new(None::<String>));
    let failed = Arc::new(tokio::sync::Notify::new());
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..8 {
        let store = store.clone();
        let failures = failures.clone();
        let first_failure = first_failure.clone();
        let failed = failed.clone();
        tasks.spawn(async move {
            loop {
                let created = store
                    .create_run(CreateRun::new(format!("pgbouncer-control-{task}")))
                    .await;
                let read = match &created {
                    Ok(run) => store.get_run(run.id).await.map(drop),
                    Err(_) => Ok(()),
                };
                for outcome in [created.map(drop), read] {
                    if let Err(error) = outcome {
                        failures.fetch_add(1, Ordering::Relaxed);
                        first_failure
                            .lock()
                            .unwrap()
                            .get_or_insert_with(|| format!("{:?}: {error}", started.elapsed()));
                        failed.notify_one();
                    }
                }
            }
        });
    }
    // Some statements also hang (the client waits for an answer to a message the server
    // connection it reached never got): the first failure ends the load.
    let _ = tokio::time::timeout(Duration::from_secs(30), failed.notified()).await;
    tasks.abort_all();
    let first = first_failure.lock().unwrap().clone();
    eprintln!(
        "{} failures in {:?}, the first at {first:?}",
        failures.load(Ordering::Relaxed),
        started.elapsed()
    );
    assert!(
        failures.load(Ordering::Relaxed) > 0,
        "eight clients on two server connections for 30 s, and no statement failed"
    );
}

/// The same load as the control, with `Pooling::Transaction`: nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_pooling_survives_the_control_load() {
    let Some(bouncer) = bouncer(2, "") else {
        return;
    };
    drop(tasks_tests::pg_store().await);
    let store = PgStore::connect_with(
        &url_through(&bouncer),
        PgOptions::new().pooling(Pooling::Transaction),
    )
    .await
    .unwrap()
    .with_namespace(tasks_tests::unique_namespace("pgbouncer"))
    .unwrap();
    let mut tasks = Vec::new();
    for task in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let run = store
                    .create_run(CreateRun::new(format!("pgbouncer-control-{task}")))
                    .await
                    .unwrap();
                let read = store.get_run(run.id).await.unwrap().unwrap();
                assert_eq!(read.id, run.id);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Doubles its input (the transactional starts through PgBouncer).
#[tasks::workflow(name = "pgbouncer-double")]
async fn double(_ctx: tasks::WorkflowContext, n: u64) -> Result<u64, tasks::WorkflowError> {
    Ok(n * 2)
}

/// Transactional starts through PgBouncer, several at once on two server connections: in
/// transactions begun with `PgStore::begin`, each committed start runs (woken by its
/// `NOTIFY`, sent through PgBouncer and heard on the direct listen URL, by a worker that
/// would otherwise poll once a minute), each rolled-back one never exists, and the
/// idempotency key of a committed start returns its run in a later transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_starts_through_pgbouncer() {
    let Some(bouncer) = bouncer(2, "") else {
        return;
    };
    drop(tasks_tests::pg_store().await);
    let store = PgStore::connect_with(
        &url_through(&bouncer),
        PgOptions::new()
            .pooling(Pooling::Transaction)
            .listen_url(tasks_tests::database_url()),
    )
    .await
    .unwrap()
    .with_namespace(tasks_tests::unique_namespace("pgbouncer"))
    .unwrap();
    let worker = tasks::Worker::builder(SharedStore::new(store.clone()))
        .concurrency(4)
        .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
        .build()
        .unwrap()
        .spawn();
    let client = Client::new(SharedStore::new(store.clone())).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..4u64 {
        let (store, client) = (store.clone(), client.clone());
        tasks.spawn(async move {
            let mut committed = Vec::new();
            let mut rolled_back = Vec::new();
            for n in 0..5u64 {
                let input = task * 100 + n;
                let mut tx = store.begin().await.unwrap();
                let handle = client
                    .start::<double>(input)
                    .idempotency_key(format!("pgbouncer-{input}"))
                    .in_transaction(&store, &mut tx)
                    .await
                    .unwrap();
                if n % 2 == 0 {
                    tx.commit().await.unwrap();
                    committed.push((handle, input));
                } else {
                    tx.rollback().await.unwrap();
                    rolled_back.push(handle.id());
                }
            }
            (committed, rolled_back)
        });
    }
    let started = Instant::now();
    while let Some(done) = tasks.join_next().await {
        let (committed, rolled_back) = done.unwrap();
        for (handle, input) in committed {
            let output = handle.result_within(Duration::from_secs(20)).await.unwrap();
            assert_eq!(output, input * 2);
            // The key is taken: a later start with it returns the same run.
            let mut tx = store.begin().await.unwrap();
            let again = client
                .start::<double>(input)
                .idempotency_key(format!("pgbouncer-{input}"))
                .in_transaction(&store, &mut tx)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            assert_eq!(again.id(), handle.id());
        }
        for run_id in rolled_back {
            assert!(store.get_run(run_id).await.unwrap().is_none());
        }
    }
    // Woken by notifications, not by the minute-long poll.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    worker.shutdown().await;
}
