//! End to end, named queues on both stores: workers that serve chosen queues,
//! a workflow's declared queue, a queue's concurrency limit and its concurrency limit per
//! key under four workers (checked from the database at every start), and a rate limit that
//! spreads starts over windows.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, TestStore, client, worker};
use tasks::{ListRuns, QueueOptions, RunStatus, SharedStore, WorkflowContext, WorkflowError};
use tasks::{step, workflow};
use uuid::Uuid;

/// The stores of the running tests, by probe id (tests run in parallel in one process).
fn stores() -> &'static Mutex<HashMap<Uuid, SharedStore>> {
    static STORES: OnceLock<Mutex<HashMap<Uuid, SharedStore>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// Per probe: the most running runs of each queue (and of each key of a queue, as
/// `queue/key`) seen in the database by a run.
fn most_running() -> &'static Mutex<HashMap<Uuid, HashMap<String, usize>>> {
    static MOST: OnceLock<Mutex<HashMap<Uuid, HashMap<String, usize>>>> = OnceLock::new();
    MOST.get_or_init(Default::default)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Job {
    probe: String,
    queue: String,
    millis: u64,
    /// The run's concurrency key, if its start gave one.
    #[serde(default)]
    key: Option<String>,
}

/// Counts, from the database, the running runs of this run's queue (and, for a run with a
/// key, those of its key in its queue, by their stored input), and remembers the most.
#[step(name = "observe_queued")]
async fn observe(job: &Job) -> Result<(), std::io::Error> {
    let probe: Uuid = job.probe.parse().unwrap();
    let store = stores().lock().unwrap()[&probe].clone();
    let running = store
        .contract()
        .list_runs(ListRuns {
            statuses: vec![RunStatus::Running],
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .map_err(std::io::Error::other)?;
    let of_queue: Vec<_> = running
        .data
        .iter()
        .filter(|run| run.queue == job.queue)
        .collect();
    let mut counts = vec![(job.queue.clone(), of_queue.len())];
    if let Some(key) = &job.key {
        let of_key = of_queue
            .iter()
            .filter(|run| {
                run.input.as_ref().and_then(|input| input["key"].as_str()) == Some(key.as_str())
            })
            .count();
        counts.push((format!("{}/{key}", job.queue), of_key));
    }
    let mut most = most_running().lock().unwrap();
    let of_probe = most.entry(probe).or_default();
    for (name, count) in counts {
        let entry = of_probe.entry(name).or_default();
        *entry = (*entry).max(count);
    }
    Ok(())
}

#[step(name = "queued_work")]
async fn work(job: &Job) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(job.millis)).await;
    Ok(())
}

/// Observes its queue, works, sleeps durably (holding no slot), observes again.
#[workflow(name = "e2e-queue-job")]
async fn queue_job(ctx: WorkflowContext, job: Job) -> Result<(), WorkflowError> {
    observe(&job).await?;
    work(&job).await?;
    ctx.sleep("rest", Duration::from_millis(20)).await?;
    observe(&job).await?;
    Ok(())
}

/// A workflow whose runs go to its declared queue.
#[workflow(name = "e2e-queue-mailer", queue = "e2e-mail")]
async fn mailer(_ctx: WorkflowContext, to: u32) -> Result<u32, WorkflowError> {
    Ok(to)
}

fn probe(store: &TestStore) -> Uuid {
    let probe = Uuid::new_v4();
    stores().lock().unwrap().insert(probe, store.shared());
    probe
}

fn job(probe: Uuid, queue: &str, millis: u64) -> Job {
    Job {
        probe: probe.to_string(),
        queue: queue.into(),
        millis,
        key: None,
    }
}

async fn wait_all(client: &tasks::Client, ids: &[Uuid]) {
    for id in ids {
        client
            .handle::<serde_json::Value>(*id)
            .result_within(Duration::from_secs(120))
            .await
            .unwrap();
    }
}

/// A worker serving only queue A runs all of A's runs and never one of B's, which stay
/// pending until a worker serving B comes. A workflow's declared queue holds its runs; a
/// start's queue overrides it.
async fn workers_serve_only_their_queues(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let start = |queue: &'static str| {
        let client = client.clone();
        async move {
            client
                .start::<queue_job>(job(probe, queue, 5))
                .queue(queue)
                .await
                .unwrap()
                .id()
        }
    };
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..6 {
        a.push(start("e2e-a").await);
        b.push(start("e2e-b").await);
    }
    let declared = client.start::<mailer>(7).await.unwrap().id();
    let overridden = client.start::<mailer>(8).queue("e2e-a").await.unwrap().id();
    assert_eq!(
        store.get_run(declared).await.unwrap().unwrap().queue,
        "e2e-mail"
    );
    assert_eq!(
        store.get_run(overridden).await.unwrap().unwrap().queue,
        "e2e-a"
    );

    let serving_a = worker(&store)
        .queues(["e2e-a"])
        .concurrency(4)
        .build()
        .unwrap()
        .spawn();
    wait_all(&client, &a).await;
    wait_all(&client, &[overridden]).await;
    // Give the worker time to take what it should not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in b.iter().chain([&declared]) {
        let run = store.get_run(*id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Pending, "{} was claimed", run.queue);
        assert_eq!(run.attempts, 0);
    }
    serving_a.shutdown().await;

    // A worker serving B and the mail queue, for the mailer workflow only, takes the
    // mailer's run and leaves B's; then one serving every workflow of B takes the rest.
    let mailer_only = worker(&store)
        .queues(["e2e-b", "e2e-mail"])
        .workflows(["e2e-queue-mailer"])
        .build()
        .unwrap()
        .spawn();
    wait_all(&client, &[declared]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in &b {
        assert_eq!(
            store.get_run(*id).await.unwrap().unwrap().status,
            RunStatus::Pending
        );
    }
    mailer_only.shutdown().await;
    let serving_b = worker(&store).queues(["e2e-b"]).build().unwrap().spawn();
    wait_all(&client, &b).await;
    serving_b.shutdown().await;
}

/// Four workers drain 24 runs of a queue whose limit of 2 one of them declares: no run ever
/// saw more than two running runs of its queue in the database, at its start or after its
/// durable sleep.
async fn queue_limit_holds_under_four_workers(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let mut ids = Vec::new();
    for _ in 0..24 {
        let handle = client
            .start::<queue_job>(job(probe, "e2e-limited", 30))
            .queue("e2e-limited")
            .await
            .unwrap();
        ids.push(handle.id());
    }
    // The first worker declares the queue's limit before its first claim; the others start
    // once it is stored.
    let first = worker(&store)
        .queue(QueueOptions::new("e2e-limited").concurrency(2))
        .concurrency(4)
        .build()
        .unwrap()
        .spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store
        .queues()
        .unwrap()
        .get_queue("e2e-limited")
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue was never declared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut workers = vec![first];
    workers.extend((0..3).map(|_| worker(&store).concurrency(4).build().unwrap().spawn()));
    wait_all(&client, &ids).await;
    for handle in workers {
        handle.shutdown().await;
    }
    let most = most_running().lock().unwrap()[&probe]["e2e-limited"];
    assert!(most <= 2, "the queue had {most} runs running at once");
    assert!(most >= 1);
    let queue = store
        .queues()
        .unwrap()
        .get_queue("e2e-limited")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue.concurrency, Some(2));
}

/// A queue limited to 2 runs of one key at once, under four workers: no key of it ever has
/// more than 2 running (seen from the database at every start), although each run's own
/// key limit is 10, and its runs without a key all run.
async fn per_key_limit_holds_under_four_workers(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    const QUEUE: &str = "e2e-per-key";
    const KEYS: [&str; 3] = ["tenant-a", "tenant-b", "tenant-c"];
    let mut ids = Vec::new();
    for _ in 0..8 {
        for key in KEYS {
            let handle = client
                .start::<queue_job>(Job {
                    key: Some(key.into()),
                    ..job(probe, QUEUE, 30)
                })
                .queue(QUEUE)
                .concurrency_key(key, 10)
                .await
                .unwrap();
            ids.push(handle.id());
        }
    }
    for _ in 0..4 {
        let handle = client
            .start::<queue_job>(job(probe, QUEUE, 30))
            .queue(QUEUE)
            .await
            .unwrap();
        ids.push(handle.id());
    }
    // The first worker declares the queue's limit before its first claim; the others start
    // once it is stored.
    let first = worker(&store)
        .queue(QueueOptions::new(QUEUE).concurrency_per_key(2))
        .concurrency(4)
        .build()
        .unwrap()
        .spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store
        .queues()
        .unwrap()
        .get_queue(QUEUE)
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue was never declared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut workers = vec![first];
    workers.extend((0..3).map(|_| worker(&store).concurrency(4).build().unwrap().spawn()));
    wait_all(&client, &ids).await;
    for handle in workers {
        handle.shutdown().await;
    }
    let most = most_running().lock().unwrap()[&probe].clone();
    for key in KEYS {
        let of_key = most[&format!("{QUEUE}/{key}")];
        assert!(of_key <= 2, "key {key} had {of_key} runs running at once");
        assert!(of_key >= 1);
    }
    let queue = store
        .queues()
        .unwrap()
        .get_queue(QUEUE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue.key_concurrency, Some(2));
    assert_eq!(queue.concurrency, None);
}

/// A queue limited to 3 starts per second: 9 runs start in three windows, each opened a
/// second or more after the previous one (by the database's `started_at`).
async fn rate_limit_spreads_starts_over_windows(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    client
        .put_queue(QueueOptions::new("e2e-rated").rate_limit(3, Duration::from_secs(1)))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..9 {
        let handle = client
            .start::<queue_job>(job(probe, "e2e-rated", 0))
            .queue("e2e-rated")
            .await
            .unwrap();
        ids.push(handle.id());
    }
    let started = std::time::Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|_| worker(&store).concurrency(8).build().unwrap().spawn())
        .collect();
    wait_all(&client, &ids).await;
    for handle in workers {
        handle.shutdown().await;
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    let mut starts = Vec::new();
    for id in &ids {
        starts.push(
            store
                .get_run(*id)
                .await
                .unwrap()
                .unwrap()
                .started_at
                .unwrap(),
        );
    }
    starts.sort();
    let second = chrono::Duration::seconds(1);
    assert!(
        starts[3] - starts[0] >= second && starts[6] - starts[3] >= second,
        "starts of one window came too early: {starts:?}"
    );
    // The windows' starts, by the rule: no window holds more than three.
    for window in [&starts[0..3], &starts[3..6], &starts[6..9]] {
        assert!(window[2] - window[0] < second, "{starts:?}");
    }
}

/// A worker's queue and workflow filters, and the queues it declares, are checked when it
/// is built.
#[tokio::test]
async fn worker_filters_are_checked() {
    let store = Backend::Sqlite.store().await;
    let refused = |builder: tasks::WorkerBuilder| match builder.build() {
        Err(tasks::WorkerError::InvalidSetting(message)) => message,
        Ok(_) => panic!("a bad setting was accepted"),
        Err(other) => panic!("{other}"),
    };
    assert!(refused(worker(&store).queues(Vec::<String>::new())).contains("no queue"));
    assert!(refused(worker(&store).queues(["bad name"])).contains("queue name"));
    assert!(refused(worker(&store).workflows(["no-such-workflow"])).contains("registry"));
    assert!(
        refused(worker(&store).queue(QueueOptions::new("q").concurrency(0)))
            .contains("concurrency")
    );
    assert!(
        worker(&store)
            .queues(["e2e-a"])
            .workflows(["e2e-queue-job"])
            .queue(QueueOptions::new("e2e-a").concurrency(1))
            .build()
            .is_ok()
    );
}

every_store!(
    workers_serve_only_their_queues,
    queue_limit_holds_under_four_workers,
    per_key_limit_holds_under_four_workers,
    rate_limit_spreads_starts_over_windows,
);
