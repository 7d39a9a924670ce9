//! The SQLite store beyond the conformance suite: claims from several OS processes and from
//! many claimers in one process, in-process wake-ups between separately opened stores, and
//! choosing the store from a database URL.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tasks::store::{LeaseStore, RunStore, StepStore};

use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tasks::sqlite::SqliteStore;
use tasks::store::{CreateRun, Notification, Store};
use tasks::{
    Client, ConnectError, ListRuns, RetryPolicy, RunStatus, Worker, WorkflowContext, WorkflowError,
    WorkflowRun, connect, step, workflow,
};
use tasks_tests::sqlite::{open as open_sqlite, temp_database_path};
use tasks_tests::unique_namespace;
use tokio::sync::Barrier;
use uuid::Uuid;

/// Creates `n` runs of one workflow and returns their ids.
async fn seed(store: &impl Store, n: usize) -> HashSet<Uuid> {
    let mut ids = HashSet::with_capacity(n);
    for i in 0..n {
        let run = store
            .create_run(CreateRun {
                input: Some(json!({ "i": i })),
                // A failed first attempt is retried at once.
                retry_policy: Some(RetryPolicy::new(3).with_initial_interval(Duration::ZERO)),
                ..CreateRun::new("claim-me")
            })
            .await
            .expect("create_run");
        ids.insert(run.id);
    }
    ids
}

/// Every run of the namespace.
async fn all_runs(store: &impl Store) -> Vec<WorkflowRun> {
    store
        .list_runs(ListRuns {
            limit: Some(10_000),
            ..ListRuns::default()
        })
        .await
        .expect("list_runs")
        .data
}

/// Two OS processes claim from one database file at the same time: every attempt of every
/// run is claimed exactly once. Each run fails its first attempt (retried at once, by either
/// process) and completes its second, so both the claim path and the read-then-write
/// transitions (failing with the retry policy) run concurrently across processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_claim_each_run_exactly_once() {
    const RUNS: usize = 200;
    let path = temp_database_path();
    let namespace = unique_namespace("test");
    let store = open_sqlite(&path)
        .await
        .with_namespace(namespace.clone())
        .unwrap();
    let seeded = seed(&store, RUNS).await;

    let mut children: Vec<_> = ["proc-a", "proc-b"]
        .into_iter()
        .map(|worker| {
            let child = Command::new(env!("CARGO_BIN_EXE_sqlite_claimer"))
                .arg(&path)
                .arg(&namespace)
                .arg(worker)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn sqlite_claimer");
            (worker, child)
        })
        .collect();
    // Both processes are connected before either starts claiming.
    let outputs: Vec<_> = children
        .iter_mut()
        .map(|(worker, child)| {
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let first = lines.next().expect("claimer output").expect("read");
            assert_eq!(first, "ready", "{worker} did not start");
            (*worker, lines)
        })
        .collect();
    for (_, child) in &mut children {
        writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    }

    // (run, attempt) -> the processes that claimed it.
    let mut claimed_by: HashMap<(Uuid, i32), Vec<&str>> = HashMap::new();
    let mut counts = HashMap::new();
    let readers: Vec<_> = outputs
        .into_iter()
        .map(|(worker, lines)| {
            std::thread::spawn(move || (worker, lines.collect::<Result<Vec<_>, _>>()))
        })
        .collect();
    for reader in readers {
        let (worker, lines) = reader.join().unwrap();
        let lines = lines.expect("read claimer output");
        assert!(
            lines.last().is_some_and(|line| line.starts_with("done ")),
            "{worker} did not finish: {lines:?}"
        );
        let mut count = 0;
        for line in &lines {
            if let Some(claim) = line.strip_prefix("claimed ") {
                let (id, attempt) = claim.split_once(' ').unwrap();
                claimed_by
                    .entry((id.parse().unwrap(), attempt.parse().unwrap()))
                    .or_default()
                    .push(worker);
                count += 1;
            }
        }
        counts.insert(worker, count);
    }
    for (worker, mut child) in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "{worker} exited with {status}");
    }

    let doubles: Vec<_> = claimed_by.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(doubles.is_empty(), "attempts claimed twice: {doubles:?}");
    for attempt in [1, 2] {
        let claimed: HashSet<Uuid> = claimed_by
            .keys()
            .filter(|(_, a)| *a == attempt)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(claimed, seeded, "every run's attempt {attempt} is claimed");
    }
    assert_eq!(claimed_by.len(), 2 * RUNS, "no third attempt");
    assert!(
        counts.values().all(|&count| count > 0),
        "both processes should claim some runs: {counts:?}"
    );

    let runs = all_runs(&store).await;
    assert_eq!(runs.len(), RUNS);
    for run in runs {
        let by = claimed_by[&(run.id, 2)][0];
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.attempts, 2, "{run:?}");
        assert_eq!(run.worker_id.as_deref(), Some(by));
        assert_eq!(run.output, Some(json!({ "by": by })));
        let steps = store.step_history(run.id).await.unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].output, Some(json!(2)));
    }
}

/// Many claimers in one process, some sharing a pool and some with their own, never claim a
/// run twice and together claim every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_claimers_in_one_process_claim_each_run_once() {
    const RUNS: usize = 300;
    const CLAIMERS: usize = 16;
    let path = temp_database_path();
    let namespace = unique_namespace("test");
    let shared = open_sqlite(&path)
        .await
        .with_namespace(namespace.clone())
        .unwrap();
    let seeded = seed(&shared, RUNS).await;

    let barrier = Arc::new(Barrier::new(CLAIMERS));
    let mut tasks = Vec::new();
    for i in 0..CLAIMERS {
        // Even claimers share one pool; odd ones open the file on a pool of their own.
        let store = if i % 2 == 0 {
            shared.clone()
        } else {
            SqliteStore::open(&path)
                .await
                .unwrap()
                .with_namespace(namespace.clone())
                .unwrap()
        };
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("claimer-{i}");
            barrier.wait().await;
            let mut mine = Vec::new();
            for batch in (1..=3).cycle() {
                let claimed = store
                    .claim_runs(&worker, Duration::from_secs(300), batch)
                    .await
                    .expect("claim_runs");
                if claimed.is_empty() {
                    break;
                }
                for claimed in claimed {
                    let (holder, run) = (claimed.holder(), claimed.run);
                    assert_eq!(run.worker_id.as_deref(), Some(worker.as_str()));
                    store
                        .complete_run(run.id, &holder, json!(i))
                        .await
                        .expect("complete_run");
                    mine.push(run.id);
                }
            }
            mine
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.expect("claimer panicked"));
    }
    let unique: HashSet<Uuid> = claimed.iter().copied().collect();
    assert_eq!(unique.len(), claimed.len(), "a run was claimed twice");
    assert_eq!(unique, seeded);
    assert!(
        all_runs(&shared)
            .await
            .iter()
            .all(|run| run.status == RunStatus::Completed && run.attempts == 1)
    );
}

/// Stores opened separately on one file in one process (a worker's and a client's) wake each
/// other, and only in their namespace; a store on another file hears nothing.
#[tokio::test]
async fn separately_opened_stores_on_one_file_wake_each_other() {
    let path = temp_database_path();
    let namespace = unique_namespace("test");
    let worker_side = open_sqlite(&path)
        .await
        .with_namespace(namespace.clone())
        .unwrap();
    // The same file through another spelling of its path, and another pool.
    let other_spelling = path
        .parent()
        .unwrap()
        .join(".")
        .join(path.file_name().unwrap());
    let client_side = SqliteStore::open(&other_spelling)
        .await
        .unwrap()
        .with_namespace(namespace.clone())
        .unwrap();
    let elsewhere = open_sqlite(&temp_database_path())
        .await
        .with_namespace(namespace.clone())
        .unwrap();

    let mut worker_events = worker_side.subscribe().await.unwrap();
    let mut elsewhere_events = elsewhere.subscribe().await.unwrap();
    client_side
        .scoped(&unique_namespace("test"))
        .unwrap()
        .contract()
        .create_run(CreateRun::new("not-ours"))
        .await
        .unwrap();
    let run = client_side
        .create_run(CreateRun::new("ours"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), worker_events.next()).await;
    assert_eq!(
        next.unwrap(),
        Some(Notification::RunAvailable {
            namespace: namespace.clone()
        })
    );

    let claimed = worker_side
        .claim_runs("w", Duration::from_secs(60), 1)
        .await
        .unwrap();
    assert_eq!(claimed[0].run.id, run.id);
    let mut client_events = client_side.subscribe().await.unwrap();
    worker_side
        .complete_run(run.id, &claimed[0].holder(), json!(1))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), client_events.next()).await;
    assert_eq!(
        next.unwrap(),
        Some(Notification::RunFinished {
            namespace,
            run_id: run.id
        })
    );
    let heard = tokio::time::timeout(Duration::from_millis(300), elsewhere_events.next()).await;
    assert!(heard.is_err(), "another file's store heard {heard:?}");
}

/// `connect` picks the store from the URL, creates and migrates a SQLite file, and refuses
/// unknown schemes with a typed error.
#[tokio::test]
async fn connect_selects_the_store_from_the_url() {
    let path = temp_database_path();
    assert!(!path.exists());
    let url = format!("sqlite://{}", path.display());
    let store = connect(&url).await.expect("connect to a new SQLite file");
    assert!(path.exists(), "the file is created");
    assert_eq!(store.namespace(), tasks::DEFAULT_NAMESPACE);
    let run = store
        .contract()
        .scoped("elsewhere")
        .unwrap()
        .contract()
        .create_run(CreateRun::new("wf"))
        .await
        .unwrap();
    // Connecting again (and migrating again) finds the same data.
    let again = connect(&url)
        .await
        .expect("reconnect")
        .contract()
        .scoped("elsewhere")
        .unwrap();
    assert_eq!(
        again.contract().get_run(run.id).await.unwrap().unwrap().id,
        run.id
    );

    let memory = connect("sqlite::memory:").await.expect("in-memory SQLite");
    assert_eq!(memory.contract().get_run(run.id).await.unwrap(), None);

    let postgres = connect(&tasks_tests::database_url())
        .await
        .expect("connect to the test Postgres");
    let ns = postgres.scoped(&unique_namespace("test")).unwrap();
    let pg_run = ns
        .contract()
        .create_run(CreateRun::new("wf"))
        .await
        .unwrap();
    assert_eq!(
        ns.contract().get_run(pg_run.id).await.unwrap().unwrap().id,
        pg_run.id
    );

    for url in ["mysql://root:secret@localhost/db", "tasks.sqlite", ""] {
        match connect(url).await {
            Err(error @ ConnectError::UnsupportedScheme { .. }) => {
                assert!(!error.to_string().contains("secret"), "{error}");
            }
            Err(other) => panic!("{url:?}: expected UnsupportedScheme, got {other:?}"),
            Ok(_) => panic!("{url:?}: expected UnsupportedScheme, got a store"),
        }
    }
    assert!(matches!(
        connect("sqlite:///nonexistent-dir/sub/x.sqlite").await,
        Err(ConnectError::Connect {
            backend: "SQLite",
            ..
        })
    ));
}

/// Several stores opening and migrating one new file at once all succeed, and the schema is
/// applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_opens_of_one_file_succeed() {
    let path = temp_database_path();
    let opens: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let store = SqliteStore::open(&path).await?;
                store.migrate().await.map_err(|e| e.to_string()).unwrap();
                Ok::<_, tasks::StoreError>(store)
            })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().expect("open"));
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks_schema_migrations")
        .fetch_one(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(
        applied,
        tasks::sqlite::MIGRATIONS.len() as i64,
        "each migration recorded once"
    );
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Greeting {
    name: String,
}

#[step]
async fn greet(name: &str) -> Result<String, std::io::Error> {
    Ok(format!("hello {name}"))
}

/// A step, a durable sleep, then the result.
#[workflow(name = "sqlite-e2e-greet")]
async fn greet_later(ctx: WorkflowContext, input: Greeting) -> Result<String, WorkflowError> {
    let greeting = greet(&input.name).await?;
    ctx.sleep("nap", Duration::from_millis(200)).await?;
    Ok(greeting)
}

/// A worker and a client on the store `connect` returns for a SQLite URL run a workflow to
/// completion. The worker's idle poll is far longer than the test, so the run is picked up,
/// resumed and reported through in-process wake-ups alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_client_in_one_process_wake_each_other() {
    let url = format!("sqlite://{}", temp_database_path().display());
    let store = connect(&url)
        .await
        .unwrap()
        .contract()
        .scoped(&unique_namespace("test"))
        .unwrap();
    let worker = Worker::builder(store.clone())
        .poll_interval(Duration::from_secs(60), Duration::from_secs(60))
        .build()
        .unwrap()
        .spawn();
    let client = Client::new(store.clone()).unwrap();
    let run = greet_later::start(
        &client,
        Greeting {
            name: "sqlite".into(),
        },
    )
    .await
    .unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, "hello sqlite");
    let steps = store.contract().step_history(run.id()).await.unwrap();
    assert_eq!(steps.len(), 2);
    worker.shutdown().await;
}
