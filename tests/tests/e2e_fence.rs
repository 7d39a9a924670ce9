//! Every write of an execution is fenced by its claim, not by its worker id: a worker frozen
//! past its lease, whose run is taken over and then handed back to the same worker id, has
//! every late write of its frozen execution refused by the store, against each store.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use support::{Backend, bump, calls, client, worker};
use tasks::{RunStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

use crate::e2e_recovery::Flaky;

/// The worker id the run is handed back to: the frozen worker's, and its successor's.
const FROZEN_WORKER: &str = "fence-frozen-worker";

/// How the test drives the executions of one run's middle step.
#[derive(Default)]
struct Gates {
    /// Set when the frozen execution may go on (the frozen worker is thawed).
    thawed: Mutex<bool>,
    thaw: Condvar,
    /// Lets the execution of the worker the run is handed back to finish the step.
    finish: tokio::sync::Notify,
}

/// The gates of `run_id`, made on first use by whichever side comes first.
fn gates(run_id: Uuid) -> Arc<Gates> {
    static GATES: OnceLock<Mutex<HashMap<Uuid, Arc<Gates>>>> = OnceLock::new();
    GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(run_id)
        .or_default()
        .clone()
}

#[step]
async fn fence_first(run: Uuid) -> Result<u32, std::io::Error> {
    Ok(bump(run, "first"))
}

/// The middle step. Its first execution (the frozen worker's) blocks the worker's only
/// thread until the test thaws it, as `SIGSTOP` would: no heartbeat, no lease extension.
/// The second (the rescuer's) waits until the rescuer shuts down and abandons the run. The
/// third (the frozen worker's id again, by a new claim) waits for the test.
#[step]
async fn fence_frozen(run: Uuid) -> Result<u32, std::io::Error> {
    let n = bump(run, "frozen");
    let gates = gates(run);
    match n {
        1 => {
            let thawed = gates.thawed.lock().unwrap();
            let (thawed, _) = gates
                .thaw
                .wait_timeout_while(thawed, Duration::from_secs(60), |thawed| !*thawed)
                .unwrap();
            assert!(*thawed, "the test never thawed the frozen worker");
        }
        2 => std::future::pending::<()>().await,
        _ => gates.finish.notified().await,
    }
    Ok(n)
}

#[step]
async fn fence_last(run: Uuid) -> Result<u32, std::io::Error> {
    Ok(bump(run, "last"))
}

/// A step, a publication (which writes the step's record, so nothing is held when the
/// middle step freezes), the middle step, a last step.
#[workflow(name = "e2e-fence-handback")]
async fn handed_back(ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    fence_first(ctx.run_id()).await?;
    ctx.set_state("first", &true).await?;
    let frozen = fence_frozen(ctx.run_id()).await?;
    fence_last(ctx.run_id()).await?;
    Ok(frozen)
}

/// A handle on `store` for a runtime of its own: the same in-memory store, or a new
/// connection to the same database and namespace.
enum Reopen {
    Memory(tasks::SharedStore),
    Url { url: String, namespace: String },
}

impl Reopen {
    async fn open(self) -> tasks::SharedStore {
        match self {
            Reopen::Memory(store) => store,
            Reopen::Url { url, namespace } => tasks::connect(&url)
                .await
                .unwrap()
                .contract()
                .scoped(&namespace)
                .unwrap(),
        }
    }
}

/// A worker frozen in a step body past its lease loses its run to a rescuer, which is shut
/// down mid-step, and the run is handed back to a new worker with the frozen worker's id.
/// When the frozen worker thaws, its execution is stale although its worker id holds the
/// run again: its step record is refused (`LeaseLost`), it writes nothing and starts no
/// further step. The run then completes once, through its current claim, and each step is
/// recorded once.
async fn a_frozen_workers_late_writes_are_refused_after_its_run_is_handed_back(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let reopen = match backend {
        Backend::Memory => Reopen::Memory(store.shared()),
        _ => Reopen::Url {
            url: store.url(),
            namespace: store.namespace().to_owned(),
        },
    };
    // The frozen worker: on a runtime of its own with one thread, so that a step body that
    // blocks the thread stops all of it. Its store counts the refusals of its writes.
    let flaky = Arc::new(OnceLock::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let frozen = {
        let flaky = flaky.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let counting = Flaky::over(reopen.open().await);
                let _ = flaky.set(counting.lease_lost.clone());
                let worker = tasks::Worker::builder(tasks::SharedStore::new(counting))
                    .worker_id(FROZEN_WORKER)
                    .concurrency(1)
                    .lease(Duration::from_secs(1))
                    .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
                    .build()
                    .unwrap()
                    .spawn();
                let _ = stopped.await;
                worker.shutdown().await;
            });
        })
    };
    let run = handed_back::start(&client, ()).await.unwrap();
    let id = run.id();
    eventually!(
        Duration::from_secs(30),
        (calls(id, "frozen") == 1).then_some(())
    );
    let first = run.run().await.unwrap();
    assert_eq!(first.worker_id.as_deref(), Some(FROZEN_WORKER));

    // Its lease runs out; a rescuer takes the run over and is shut down in the middle step,
    // abandoning the run at once (its heartbeat row made stale).
    let rescuer = worker(&store)
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .spawn();
    eventually!(
        Duration::from_secs(30),
        (calls(id, "frozen") == 2).then_some(())
    );
    rescuer.shutdown().await;

    // The run is handed back to the frozen worker's id, by a new claim.
    let successor = worker(&store)
        .worker_id(FROZEN_WORKER)
        .build()
        .unwrap()
        .spawn();
    eventually!(
        Duration::from_secs(30),
        (calls(id, "frozen") == 3).then_some(())
    );
    let handed = run.run().await.unwrap();
    assert_eq!(handed.status, RunStatus::Running);
    assert_eq!(handed.worker_id.as_deref(), Some(FROZEN_WORKER));
    assert!(
        handed.claim_epoch >= first.claim_epoch + 2,
        "taken over, then handed back: {} then {}",
        first.claim_epoch,
        handed.claim_epoch
    );

    // The frozen worker thaws: its execution's step record is refused.
    let gates = gates(id);
    *gates.thawed.lock().unwrap() = true;
    gates.thaw.notify_all();
    let refused = flaky.get().expect("the frozen worker's store").clone();
    eventually!(
        Duration::from_secs(30),
        (refused.load(Ordering::SeqCst) >= 1).then_some(())
    );
    // Time for anything else the stale execution would write or start.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let names = |steps: Vec<tasks::StepAttempt>| -> Vec<String> {
        steps.into_iter().map(|step| step.step_name).collect()
    };
    assert_eq!(
        names(run.steps().await.unwrap()),
        ["fence_first", "state/first"],
        "the stale execution recorded nothing"
    );
    assert_eq!(
        calls(id, "last"),
        0,
        "the stale execution started no further step"
    );
    let still = run.run().await.unwrap();
    assert_eq!(still.status, RunStatus::Running);
    assert_eq!(still.claim_epoch, handed.claim_epoch);
    assert_eq!(still.attempts, handed.attempts);

    // The current claim finishes the run, once.
    gates.finish.notify_one();
    assert_eq!(run.result_within(Duration::from_secs(30)).await.unwrap(), 3);
    successor.shutdown().await;
    stop.send(()).unwrap();
    tokio::task::spawn_blocking(move || frozen.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        names(run.steps().await.unwrap()),
        ["fence_first", "state/first", "fence_frozen", "fence_last"],
        "each step recorded once"
    );
    assert_eq!(calls(id, "first"), 1);
    assert_eq!(calls(id, "frozen"), 3);
    assert_eq!(calls(id, "last"), 1);
    let done = run.run().await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        done.claim_epoch, handed.claim_epoch,
        "completed by the current claim"
    );
}

every_store! {
    a_frozen_workers_late_writes_are_refused_after_its_run_is_handed_back,
}
