//! End to end: continue-as-new against each store: a loop that hands over to successors
//! until it is done, awaited through its first run; events sent to the lineage across the
//! hand-overs; the idempotency key following the lineage; a refused continue; and worker
//! processes SIGKILLed over and over while a lineage hands over (the SQL stores).

use crate::e2e_recovery::{Flaky, effect_counts, effects_pool, spawn_worker};
use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, client, worker};
use tasks::store::CreateRun;
use tasks::uuid::Uuid;
use tasks::{
    Event, ListRuns, RunError, RunStatus, WorkflowContext, WorkflowError, WorkflowRun, step,
    workflow,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Countdown {
    /// Ticks left.
    left: u32,
    /// Ticks per run before it continues as new.
    per_run: u32,
    /// The sum of the ticks so far.
    sum: u64,
}

#[step]
async fn tick(left: u32) -> Result<u64, std::io::Error> {
    Ok(u64::from(left))
}

/// Counts down, `per_run` ticks per run, summing the ticks.
#[workflow(name = "e2e-continue-countdown")]
async fn countdown(ctx: WorkflowContext, input: Countdown) -> Result<u64, WorkflowError> {
    let mut state = input;
    for _ in 0..state.per_run {
        if state.left == 0 {
            break;
        }
        state.sum += tick(state.left).await?;
        state.left -= 1;
    }
    if state.left == 0 {
        return Ok(state.sum);
    }
    ctx.continue_as_new::<countdown>(state).await
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Coin {
    value: u64,
}

impl Event for Coin {
    const TOPIC: &'static str = "e2e-continue-coin";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Inbox {
    /// Coins received so far.
    received: u32,
    /// Coins to receive in all.
    expected: u32,
    /// Their sum.
    sum: u64,
}

/// Takes one coin per run, then continues as new, until every coin is in.
#[workflow(name = "e2e-continue-inbox", events(Coin))]
async fn inbox(ctx: WorkflowContext, input: Inbox) -> Result<u64, WorkflowError> {
    let coin = ctx.wait_for_event::<Coin>().await?;
    let state = Inbox {
        received: input.received + 1,
        sum: input.sum + coin.value,
        ..input
    };
    if state.received == state.expected {
        return Ok(state.sum);
    }
    ctx.continue_as_new::<inbox>(state).await
}

/// Tries to continue as another workflow.
#[workflow(name = "e2e-continue-wrong")]
async fn wrong(ctx: WorkflowContext) -> Result<u64, WorkflowError> {
    ctx.continue_as_new::<countdown>(Countdown {
        left: 1,
        per_run: 1,
        sum: 0,
    })
    .await
}

/// Every run of the store's namespace.
async fn all_runs(store: &support::TestStore) -> Vec<WorkflowRun> {
    store
        .list_runs(ListRuns {
            limit: Some(500),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
}

/// The runs of the lineage `first` starts, in hand-over order, checked link by link: each
/// run names its successor, which names it back and names the lineage; one run, the last,
/// continued as nothing.
async fn lineage(store: &support::TestStore, first: Uuid) -> Vec<WorkflowRun> {
    let runs: HashMap<Uuid, WorkflowRun> = all_runs(store)
        .await
        .into_iter()
        .map(|run| (run.id, run))
        .collect();
    let mut chain = vec![runs[&first].clone()];
    assert_eq!(
        chain[0].lineage_root_id, None,
        "the first run is the lineage"
    );
    assert_eq!(chain[0].lineage_id(), first);
    while let Some(next) = chain.last().unwrap().continued_as_run_id {
        let previous = chain.last().unwrap();
        assert_eq!(previous.status, RunStatus::Completed);
        assert_eq!(previous.output, None, "a run that continued has no output");
        let successor = runs[&next].clone();
        assert_eq!(successor.continued_from_run_id, Some(previous.id));
        assert_eq!(successor.lineage_root_id, Some(first));
        assert_eq!(successor.workflow_name, previous.workflow_name);
        chain.push(successor);
    }
    let members = runs
        .values()
        .filter(|run| run.lineage_id() == first)
        .count();
    assert_eq!(
        members,
        chain.len(),
        "every run of the lineage is on its chain"
    );
    for run in &chain {
        let successors = runs
            .values()
            .filter(|other| other.continued_from_run_id == Some(run.id))
            .count();
        assert!(
            successors <= 1,
            "run {} has {successors} successors",
            run.id
        );
    }
    chain
}

async fn a_loop_continues_until_it_is_done(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let input = Countdown {
        left: 10,
        per_run: 3,
        sum: 0,
    };
    let run = countdown::start(&client(&store), input).await.unwrap();
    let sum = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        sum,
        (1..=10).sum::<u64>(),
        "the first run's handle awaits the lineage"
    );
    let chain = lineage(&store, run.id()).await;
    assert_eq!(chain.len(), 4, "3 + 3 + 3 + 1 ticks");
    let last = chain.last().unwrap();
    assert_eq!(last.status, RunStatus::Completed);
    assert_eq!(last.output, Some(json!(55)));
    for (i, run) in chain.iter().enumerate() {
        let steps = store.step_history(run.id).await.unwrap();
        let expected = if i < 3 { 3 } else { 1 };
        assert_eq!(
            steps.len(),
            expected,
            "each run starts with an empty history"
        );
    }
    assert_eq!(
        chain[1].input,
        Some(json!({ "left": 7, "per_run": 3, "sum": 10 + 9 + 8 })),
        "the successor runs on the input it was given"
    );
    assert_eq!(
        run.lineage_head().await.unwrap().id,
        last.id,
        "the lineage's current run is its last"
    );
    // `tasks runs show` names both links of a run in the middle of the lineage.
    let shown = runs_show(&store, chain[1].id).await;
    assert!(
        shown.contains(&format!("continued from  {}", chain[0].id)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("continued as    {}", chain[2].id)),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("lineage         {}", run.id())),
        "{shown}"
    );
    worker.shutdown().await;
}

/// What `tasks runs show <id>` prints on the test store's client.
async fn runs_show(store: &support::TestStore, id: Uuid) -> String {
    use tasks::cli::clap::Parser as _;
    let id = id.to_string();
    let cli = tasks::cli::Cli::try_parse_from(["tasks", "runs", "show", &id]).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli
        .tasks
        .execute_with(&client(store), &mut out, &mut err)
        .await;
    assert!(
        matches!(exit, tasks::cli::Exit::Success),
        "{}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8(out).unwrap()
}

async fn events_sent_to_the_lineage_are_not_lost(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    const COINS: u32 = 12;
    let run = inbox::start(
        &client,
        Inbox {
            received: 0,
            expected: COINS,
            sum: 0,
        },
    )
    .await
    .unwrap();
    // Every coin is sent to the lineage's id, some while a run waits, some while it hands
    // over to its successor: none may be refused, lost or taken twice.
    for value in 1..=u64::from(COINS) {
        let sent = client
            .send_event(run.id(), &Coin { value })
            .await
            .unwrap_or_else(|error| panic!("coin {value}: {error}"));
        assert_eq!(sent.event.payload, json!({ "value": value }));
        if value % 3 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let sum = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(sum, (1..=u64::from(COINS)).sum::<u64>());
    let chain = lineage(&store, run.id()).await;
    assert_eq!(chain.len(), COINS as usize, "one run per coin");
    let mut events = 0;
    for run in &chain {
        let received = store.events().unwrap().list_events(run.id).await.unwrap();
        assert_eq!(
            received.len(),
            1,
            "run {} took one coin: {received:?}",
            run.id
        );
        assert!(received[0].consumed_at.is_some());
        events += received.len();
    }
    assert_eq!(events, COINS as usize);
    // The lineage finished for good: a send to it is refused now.
    let refused = client.send_event(run.id(), &Coin { value: 0 }).await;
    assert!(refused.is_err(), "{refused:?}");
    worker.shutdown().await;
}

async fn the_idempotency_key_follows_the_lineage(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let input = Inbox {
        received: 0,
        expected: 3,
        sum: 0,
    };
    let first = client
        .start::<inbox>(input.clone())
        .idempotency_key("inbox-7")
        .await
        .unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    client
        .send_event(first.id(), &Coin { value: 5 })
        .await
        .unwrap();
    let second = eventually!(Duration::from_secs(20), {
        let run = store.get_run(first.id()).await.unwrap().unwrap();
        run.continued_as_run_id
    });
    let again = client
        .start::<inbox>(input)
        .idempotency_key("inbox-7")
        .await
        .unwrap();
    assert_eq!(
        again.id(),
        second,
        "a start with the key finds the lineage's current run, not a new lineage"
    );
    let continued = store.get_run(first.id()).await.unwrap().unwrap();
    assert_eq!(
        continued.idempotency_key, None,
        "the key moved to the successor"
    );
    let successor = store.get_run(second).await.unwrap().unwrap();
    assert_eq!(successor.idempotency_key.as_deref(), Some("inbox-7"));
    // A send by key reaches the current run too.
    for value in [6, 7] {
        client
            .send_event(
                tasks::EventTarget::Key {
                    workflow_name: "e2e-continue-inbox".into(),
                    idempotency_key: "inbox-7".into(),
                },
                &Coin { value },
            )
            .await
            .unwrap();
    }
    assert_eq!(
        again.result_within(Duration::from_secs(20)).await.unwrap(),
        18
    );
    assert_eq!(lineage(&store, first.id()).await.len(), 3);
    worker.shutdown().await;
}

async fn continuing_as_another_workflow_fails_the_run(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = wrong::start(&client(&store), ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert!(
                error.message.contains("continues as its own workflow"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(all_runs(&store).await.len(), 1, "no successor was created");
    let failed = store.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(failed.attempts, 1, "the refusal is not retried");
    worker.shutdown().await;
}

/// A store without the continue-as-new capability (a wrapper that does not pass it on)
/// answers `Unsupported`, which fails the run for good with kind `unsupported`, once.
async fn a_store_without_the_capability_fails_the_run(backend: Backend) {
    let store = backend.store().await;
    let without = tasks::SharedStore::new(Flaky::over(store.shared()));
    assert!(without.contract().continuation().is_err());
    let worker = tasks::Worker::builder(without.clone())
        .lease(Duration::from_secs(20))
        .build()
        .unwrap()
        .spawn();
    let run = countdown::start(
        &tasks::Client::new(without).unwrap(),
        Countdown {
            left: 2,
            per_run: 1,
            sum: 0,
        },
    )
    .await
    .unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.kind.as_deref(), Some("unsupported"), "{error:?}");
            assert!(
                error.message.contains("continue-as-new"),
                "{}",
                error.message
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let failed = store.get_run(run.id()).await.unwrap().unwrap();
    assert_eq!(failed.attempts, 1, "the refusal is not retried");
    assert_eq!(all_runs(&store).await.len(), 1, "no successor was created");
    worker.shutdown().await;
}

/// Hand-overs that commit but whose acknowledgement is lost: the worker retries, finds the
/// run continued by its own claim, and takes the hand-over as done. One successor each.
async fn a_lost_acknowledgement_of_a_hand_over_creates_one_successor(backend: Backend) {
    let store = backend.store().await;
    let flaky = Flaky::continuing(store.shared(), 3);
    let lost = flaky.lost_continue_acks.clone();
    let shared = tasks::SharedStore::new(flaky);
    let worker = tasks::Worker::builder(shared.clone())
        .lease(Duration::from_secs(20))
        .build()
        .unwrap()
        .spawn();
    let run = countdown::start(
        &tasks::Client::new(shared).unwrap(),
        Countdown {
            left: 5,
            per_run: 1,
            sum: 0,
        },
    )
    .await
    .unwrap();
    let sum = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(sum, 15);
    assert_eq!(
        lost.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "three acknowledgements were lost"
    );
    let chain = lineage(&store, run.id()).await;
    assert_eq!(chain.len(), 5, "one run per tick, no duplicate successor");
    assert!(
        chain.iter().all(|run| run.attempts == 1),
        "no run was executed again"
    );
    worker.shutdown().await;
}

/// Worker processes are SIGKILLed one after the other while a lineage continues as new
/// after every iteration, so that kills land during hand-overs: after them, every run of
/// the lineage has at most one successor, the chain is whole, and the lineage finishes
/// with every iteration done (an iteration in flight at a kill may run twice, no more).
async fn worker_kills_during_hand_overs_leave_one_successor_each(backend: Backend) {
    let store = backend.store().await;
    let effects = effects_pool().await;
    const TOTAL: u32 = 40;
    let first = store
        .create_run(CreateRun {
            input: Some(json!({
                "effects_database_url": tasks_tests::database_url(),
                "done": 0,
                "total": TOTAL,
                "per_run": 1,
            })),
            ..CreateRun::new("test-continue")
        })
        .await
        .unwrap();
    let runs_of_lineage = || async {
        all_runs(&store)
            .await
            .into_iter()
            .filter(|run| run.lineage_id() == first.id)
            .count()
    };
    for kill in 1..=4 {
        let mut process = spawn_worker(&store.url(), store.namespace(), 1_000);
        let reached = kill * 5;
        eventually!(
            Duration::from_secs(60),
            (runs_of_lineage().await >= reached).then_some(())
        );
        process.0.kill().expect("SIGKILL the worker");
        process.0.wait().unwrap();
    }
    let _last = spawn_worker(&store.url(), store.namespace(), 1_000);
    let last = eventually!(Duration::from_secs(120), {
        let head = store
            .continuation()
            .unwrap()
            .lineage_head(first.id)
            .await
            .unwrap()
            .unwrap();
        head.status.is_terminal().then_some(head)
    });
    assert_eq!(last.status, RunStatus::Completed, "{:?}", last.error);
    assert_eq!(last.output, Some(json!(TOTAL)));
    let chain = lineage(&store, first.id).await;
    assert_eq!(chain.len(), TOTAL as usize, "one run per iteration");
    let counts = effect_counts(&effects, first.id).await;
    assert_eq!(
        counts.len(),
        TOTAL as usize,
        "every iteration ran: {counts:?}"
    );
    let twice = counts.values().filter(|&&count| count > 1).count();
    assert!(
        counts.values().all(|&count| count <= 2) && twice <= 4,
        "only an iteration in flight at a kill may run again: {counts:?}"
    );
}

/// Postgres: the worker process is SIGKILLed *inside* the hand-over's transaction. A lock
/// the test holds on the event the hand-over moves stops the transaction after it finished
/// the run and inserted the successor, uncommitted; the kill then leaves the run running,
/// with no successor, once the orphaned transaction is rolled back. A new worker runs the
/// run again and its lineage finishes with one successor per run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_kill_inside_the_hand_over_transaction_leaves_no_successor() {
    let store = Backend::Postgres.store().await;
    let support::Pool::Postgres(pool) = store.pool() else {
        unreachable!("a Postgres store")
    };
    let effects = effects_pool().await;
    let first = store
        .create_run(CreateRun {
            input: Some(json!({
                "effects_database_url": tasks_tests::database_url(),
                "done": 0,
                "total": 3,
                "per_run": 1,
            })),
            ..CreateRun::new("test-continue")
        })
        .await
        .unwrap();
    // An event the hand-over moves to the successor, locked by the test.
    store
        .events()
        .unwrap()
        .send_event(tasks::store::SendEvent {
            target: first.id.into(),
            topic: "pending-mail".into(),
            payload: json!({ "n": 1 }),
            dedup_key: None,
        })
        .await
        .unwrap();
    let mut locker = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM tasks.events WHERE workflow_run_id = $1 FOR UPDATE")
        .bind(first.id)
        .fetch_all(&mut *locker)
        .await
        .unwrap();

    let mut process = spawn_worker(&store.url(), store.namespace(), 1_000);
    // The hand-over waits on the test's lock: the run is finished and the successor
    // inserted in its transaction, which cannot commit.
    eventually!(Duration::from_secs(30), {
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE tasks.events SET workflow_run_id%'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (waiting > 0).then_some(())
    });
    process
        .0
        .kill()
        .expect("SIGKILL the worker inside the hand-over");
    process.0.wait().unwrap();
    locker.rollback().await.unwrap();
    // The orphaned transaction gets the lock, finds its client gone and rolls back.
    eventually!(Duration::from_secs(30), {
        let (open,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity
              WHERE query LIKE 'UPDATE tasks.events SET workflow_run_id%' AND state <> 'idle'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        (open == 0).then_some(())
    });
    let stranded = store.get_run(first.id).await.unwrap().unwrap();
    assert_eq!(
        stranded.status,
        RunStatus::Running,
        "the finish rolled back"
    );
    assert_eq!(stranded.continued_as_run_id, None);
    assert_eq!(all_runs(&store).await.len(), 1, "the successor rolled back");
    let mail = store.events().unwrap().list_events(first.id).await.unwrap();
    assert_eq!(mail.len(), 1, "the event stayed with the run");

    let _second = spawn_worker(&store.url(), store.namespace(), 1_000);
    let last = eventually!(Duration::from_secs(60), {
        let head = store
            .continuation()
            .unwrap()
            .lineage_head(first.id)
            .await
            .unwrap()
            .unwrap();
        head.status.is_terminal().then_some(head)
    });
    assert_eq!(last.status, RunStatus::Completed, "{:?}", last.error);
    assert_eq!(last.output, Some(json!(3)));
    let chain = lineage(&store, first.id).await;
    assert_eq!(chain.len(), 3);
    assert_eq!(
        chain[0].attempts, 2,
        "the first run was claimed again after the kill"
    );
    let moved = store.events().unwrap().list_events(last.id).await.unwrap();
    assert_eq!(
        moved.len(),
        1,
        "the event moved along the lineage: {moved:?}"
    );
    let counts = effect_counts(&effects, first.id).await;
    assert_eq!(
        counts.get("iteration-000"),
        Some(&1),
        "its step was recorded: {counts:?}"
    );
    assert_eq!(counts.len(), 3, "{counts:?}");
}

every_store!(
    a_loop_continues_until_it_is_done,
    events_sent_to_the_lineage_are_not_lost,
    the_idempotency_key_follows_the_lineage,
    continuing_as_another_workflow_fails_the_run,
    a_store_without_the_capability_fails_the_run,
    a_lost_acknowledgement_of_a_hand_over_creates_one_successor;
    sql: worker_kills_during_hand_overs_leave_one_successor_each,
);
