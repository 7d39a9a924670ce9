//! The claim's admission, held to the core's rule: each case is a table of queue settings,
//! runs (queue, concurrency key, priority) and claims, and the runs each claim must take
//! are computed by `tasks_core::transition::admit_in_order`, the claim order and admission
//! walk, from the runs as the store holds them. The store's claim must take exactly those.
//!
//! The walk is the upper bound of the contract (a claim never passes a limit) and, in these
//! small cases, what every store takes, but for the steps marked as claims that may take
//! fewer (`ClaimFewer`), whose known cases the core's `transition::admission` lists.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tasks_core::transition::{Admission, Candidate, RateWindow, admit_in_order};
use tasks_core::{
    ClaimFilter, Concurrency, CreateRun, DEFAULT_QUEUE, LeaseStore, QueueOptions, RunStatus,
    RunStore, Store,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// One step of a case.
enum Step {
    /// Configures a queue.
    Queue(QueueOptions),
    /// Creates `count` pending runs in `queue`, with a concurrency key (and the run's own
    /// limit) and a priority.
    Create {
        count: usize,
        queue: &'static str,
        key: Option<(&'static str, u32)>,
        priority: i32,
    },
    /// Claims up to this many runs; the store must take what the walk takes.
    Claim(u32),
    /// Claims up to this many runs where a SQL claim is known to take fewer: the runs of
    /// one key have different limits (their own, or their queues' limits per key), and a
    /// candidate refused for its smaller limit still takes a rank among its key's
    /// candidates, so one with a larger limit after it may be left for the next claim.
    /// The store must take some of the walk's runs, and nothing else.
    ClaimFewer(u32),
    /// Releases this many of the runs claimed so far (the oldest first): pending again,
    /// started already, so their next claim is no start.
    Release(usize),
}

use Step::{Claim, ClaimFewer, Create, Release};

/// What the case knows of each run it created.
struct Known {
    id: Uuid,
    queue: &'static str,
    key: Option<(&'static str, u32)>,
    priority: i32,
    /// The worker holding it, while it runs.
    worker: Option<String>,
    /// A claim started it (a release keeps `started_at`).
    started: bool,
}

const HOUR: Duration = Duration::from_secs(3_600);

fn create(count: usize, queue: &'static str, key: Option<(&'static str, u32)>) -> Step {
    Create {
        count,
        queue,
        key,
        priority: 0,
    }
}

/// Runs the steps of one case on a fresh store.
async fn run_case(setup: &impl Setup, case: &str, steps: Vec<Step>) {
    let store = setup.store().await;
    let mut known: Vec<Known> = Vec::new();
    // The rate windows as the walk counted them (their periods are long: a window opened
    // during the case stays open to its end).
    let mut queue_windows: HashMap<String, RateWindow> = HashMap::new();
    let mut key_windows: HashMap<String, RateWindow> = HashMap::new();
    let workflow = unique_name();
    for (index, step) in steps.into_iter().enumerate() {
        match step {
            Step::Queue(options) => {
                store.queues().unwrap().put_queue(&options).await.unwrap();
            }
            Create {
                count,
                queue,
                key,
                priority,
            } => {
                for _ in 0..count {
                    let run = store
                        .create_run(CreateRun {
                            queue: (queue != DEFAULT_QUEUE).then(|| queue.to_owned()),
                            concurrency: key.map(|(key, limit)| Concurrency::new(key, limit)),
                            priority,
                            input: Some(json!({ "case": case })),
                            ..CreateRun::new(workflow.clone())
                        })
                        .await
                        .unwrap();
                    known.push(Known {
                        id: run.id,
                        queue,
                        key,
                        priority,
                        worker: None,
                        started: false,
                    });
                }
            }
            Claim(limit) | ClaimFewer(limit) => {
                let exact = matches!(step, Claim(_));
                let now = Utc::now();
                let mut candidates = Vec::new();
                let mut holders = Vec::new();
                for run in &known {
                    let stored = store.get_run(run.id).await.unwrap().unwrap();
                    match stored.status {
                        RunStatus::Running => holders.push((run.key, run.queue)),
                        RunStatus::Pending => candidates.push(Candidate {
                            id: run.id,
                            status: stored.status,
                            priority: run.priority,
                            available_at: stored.available_at,
                            created_at: stored.created_at,
                            key: run.key.map(|(key, limit)| (key.to_owned(), limit)),
                            queue: run.queue.to_owned(),
                            started: run.started,
                        }),
                        status => panic!("{case}: run {} is {status:?}", run.id),
                    }
                }
                let mut queues = store.queues().unwrap().list_queues().await.unwrap();
                for queue in &mut queues {
                    let window = queue_windows
                        .get(&queue.name)
                        .copied()
                        .unwrap_or(RateWindow {
                            start: None,
                            starts: 0,
                        });
                    queue.window_start = window.start;
                    queue.window_starts = window.starts;
                }
                let admission = || {
                    Admission::new(
                        now,
                        &queues,
                        holders
                            .iter()
                            .map(|(key, queue)| (RunStatus::Running, key.map(|(k, _)| k), *queue)),
                        &key_windows,
                    )
                };
                let mut expected = admit_in_order(candidates.clone(), &mut admission(), limit);
                let worker = new_worker();
                let claimed = store
                    .claim_runs_filtered(&worker, LONG_LEASE, limit, &ClaimFilter::ALL)
                    .await
                    .unwrap();
                let mut taken = ids(&claimed_runs(claimed));
                taken.sort();
                expected.sort();
                if exact {
                    assert_eq!(
                        taken, expected,
                        "{case}, step {index} (claim of {limit}): the store's claim and the \
                         core's admission walk disagree"
                    );
                } else {
                    assert!(
                        !taken.is_empty() && taken.iter().all(|id| expected.contains(id)),
                        "{case}, step {index} (claim of {limit}): the store took {taken:?}, \
                         not some of the walk's {expected:?}"
                    );
                }
                // The windows count the runs the store took.
                candidates.retain(|candidate| taken.contains(&candidate.id));
                let mut counted = admission();
                admit_in_order(candidates, &mut counted, limit);
                let (queues_after, keys_after) = counted.into_windows();
                queue_windows = queues_after.collect();
                key_windows = keys_after;
                for run in known.iter_mut().filter(|run| taken.contains(&run.id)) {
                    run.worker = Some(worker.clone());
                    run.started = true;
                }
            }
            Release(count) => {
                let held: Vec<Uuid> = known
                    .iter()
                    .filter(|run| run.worker.is_some())
                    .map(|run| run.id)
                    .take(count)
                    .collect();
                for id in held {
                    store
                        .release_run(
                            id,
                            &held_by(&store, id).await,
                            Duration::ZERO,
                            json!({ "released": true }),
                        )
                        .await
                        .unwrap();
                    if let Some(run) = known.iter_mut().find(|run| run.id == id) {
                        run.worker = None;
                    }
                }
            }
        }
    }
}

/// Concurrency keys: a claim takes no more runs of a key than it has free slots, whatever
/// its limit, and keyless runs fill the rest; a later claim takes none of a full key.
pub async fn claim_admits_keys_as_the_core_walk_does(setup: impl Setup) {
    run_case(
        &setup,
        "keys",
        vec![
            create(4, DEFAULT_QUEUE, Some(("k", 2))),
            create(2, DEFAULT_QUEUE, Some(("j", 1))),
            create(2, DEFAULT_QUEUE, None),
            Claim(3),
            Claim(10),
            create(1, DEFAULT_QUEUE, Some(("k", 3))),
            Claim(10),
            Release(1),
            Claim(10),
        ],
    )
    .await;
}

/// Priorities: a claim smaller than the backlog takes the highest priorities first, then
/// the oldest.
pub async fn claim_admits_priorities_as_the_core_walk_does(setup: impl Setup) {
    let with = |count, priority| Create {
        count,
        queue: DEFAULT_QUEUE,
        key: None,
        priority,
    };
    run_case(
        &setup,
        "priorities",
        vec![
            with(2, 0),
            with(1, 5),
            with(2, 1),
            with(1, 5),
            with(1, -3),
            Claim(3),
            Claim(2),
            Claim(5),
        ],
    )
    .await;
}

/// A queue's concurrency limit and its limit per key, beside an unlimited queue.
pub async fn claim_admits_queue_slots_as_the_core_walk_does(setup: impl Setup) {
    run_case(
        &setup,
        "queue slots",
        vec![
            Step::Queue(
                QueueOptions::new("capped")
                    .concurrency(3)
                    .concurrency_per_key(1),
            ),
            create(2, "capped", Some(("a", 5))),
            create(1, "capped", Some(("b", 5))),
            create(3, "capped", None),
            create(2, DEFAULT_QUEUE, Some(("a", 5))),
            Claim(2),
            Claim(10),
            Release(2),
            Claim(10),
        ],
    )
    .await;
}

/// Rate limits of a queue and per key: starts are counted, a claim of a released run is no
/// start.
pub async fn claim_admits_rate_windows_as_the_core_walk_does(setup: impl Setup) {
    run_case(
        &setup,
        "rate windows",
        vec![
            Step::Queue(QueueOptions::new("rated").rate_limit(3, HOUR)),
            Step::Queue(QueueOptions::new("per-key").rate_limit_per_key(1, HOUR)),
            create(5, "rated", None),
            create(2, "per-key", Some(("x", 9))),
            create(2, "per-key", Some(("y", 9))),
            create(1, "per-key", None),
            Claim(2),
            Claim(10),
            Release(3),
            Claim(10),
            Claim(10),
        ],
    )
    .await;
}

/// Every limit at once, with claims smaller than what fits.
pub async fn claim_admits_mixed_limits_as_the_core_walk_does(setup: impl Setup) {
    run_case(
        &setup,
        "mixed",
        vec![
            Step::Queue(
                QueueOptions::new("mixed")
                    .concurrency(4)
                    .rate_limit(5, HOUR)
                    .concurrency_per_key(2),
            ),
            Create {
                count: 3,
                queue: "mixed",
                key: Some(("m", 3)),
                priority: 2,
            },
            Create {
                count: 2,
                queue: "mixed",
                key: Some(("n", 1)),
                priority: 0,
            },
            Create {
                count: 2,
                queue: "mixed",
                key: None,
                priority: 7,
            },
            Create {
                count: 2,
                queue: DEFAULT_QUEUE,
                key: Some(("m", 3)),
                priority: 1,
            },
            Claim(1),
            Claim(3),
            Release(2),
            // Key `m` is capped at 2 in `mixed` and at 3 in the default queue.
            ClaimFewer(4),
            Claim(10),
        ],
    )
    .await;
}
