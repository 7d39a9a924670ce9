//! End to end: retention against each store (Postgres and SQLite). A worker with
//! `retention` purges the runs that finished long enough ago, with their steps, while new
//! runs execute; three workers of one namespace purge once per period between them, which
//! the namespace's lease row counts.

use crate::support;

use std::time::{Duration, Instant};

use support::{Backend, client, worker};
use tasks::{ListRuns, RunStatus, WorkflowError, step, workflow};
use tasks_test_support::wait::eventually;

#[step]
async fn hold(ms: u64) -> Result<u64, WorkflowError> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

#[workflow(name = "e2e-retention-job")]
async fn job(_ctx: tasks::WorkflowContext, ms: u64) -> Result<u64, WorkflowError> {
    hold(ms).await
}

async fn a_worker_with_retention_purges_old_runs_while_new_ones_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);

    // Runs that finish, then age past the retention.
    let plain = worker(&store).build().unwrap().spawn();
    let mut old = Vec::new();
    for _ in 0..6 {
        old.push(job::start(&client, 1).await.unwrap());
    }
    for run in &old {
        assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 1);
        assert_eq!(run.steps().await.unwrap().len(), 1);
    }
    plain.shutdown().await;
    let paused = job::start(&client, 1).await.unwrap();
    client.pause(paused.id()).await.unwrap();
    let max_age = Duration::from_secs(3);
    tokio::time::sleep(max_age + Duration::from_millis(500)).await;

    let retaining = worker(&store)
        .retention(max_age)
        .retention_interval(Duration::from_millis(100))
        .build()
        .unwrap();
    let retaining_id = retaining.id().to_owned();
    let retaining = retaining.spawn();
    let mut new = Vec::new();
    for _ in 0..6 {
        new.push(job::start(&client, 400).await.unwrap());
    }

    let purged = eventually(Duration::from_secs(20), async || {
        for run in &old {
            if client.get_run(run.id()).await.unwrap().is_some() {
                return false;
            }
        }
        true
    })
    .await;
    assert!(purged, "the old runs were purged");
    for run in &old {
        assert!(
            run.steps().await.unwrap().is_empty(),
            "their steps went with them"
        );
    }
    // The new runs executed meanwhile, and are younger than the retention.
    for run in &new {
        assert_eq!(
            run.result_within(Duration::from_secs(20)).await.unwrap(),
            400
        );
    }
    let paused = client.get_run(paused.id()).await.unwrap();
    assert_eq!(
        paused.map(|run| run.status),
        Some(RunStatus::Paused),
        "a live run is never purged, however old"
    );
    let (turns, last) = store.retention_turns().await.expect("a purge was taken");
    assert!(turns >= 1);
    assert_eq!(last, retaining_id);
    retaining.shutdown().await;
}

async fn three_workers_purge_once_per_period(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let period = Duration::from_millis(300);
    let started = Instant::now();
    let workers: Vec<_> = (0..3)
        .map(|i| {
            worker(&store)
                .worker_id(format!("retainer-{i}"))
                .retention(Duration::ZERO)
                .retention_interval(period)
                .build()
                .unwrap()
                .spawn()
        })
        .collect();

    // Runs keep finishing; every one is purged soon after.
    for _ in 0..4 {
        let mut batch = Vec::new();
        for _ in 0..3 {
            batch.push(job::start(&client, 10).await.unwrap());
        }
        for run in &batch {
            // The run may already be purged by the time we look: then it finished.
            match run.result_within(Duration::from_secs(20)).await {
                Ok(output) => assert_eq!(output, 10),
                Err(error) => {
                    assert_eq!(
                        client.get_run(run.id()).await.unwrap(),
                        None,
                        "only a purged run may fail to report: {error:?}"
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_purged = eventually(Duration::from_secs(20), async || {
        let finished = ListRuns {
            statuses: vec![RunStatus::Completed],
            ..ListRuns::default()
        };
        client.list_runs(finished).await.unwrap().data.is_empty()
    })
    .await;
    assert!(all_purged, "finished runs are purged");
    for worker in workers {
        worker.shutdown().await;
    }
    let elapsed = started.elapsed();

    let (turns, _) = store.retention_turns().await.expect("purges were taken");
    // One turn per period at most, between all three workers; each asks about once per
    // period, so three workers purging on their own would take about three times as many.
    let at_most = (elapsed.as_millis() / period.as_millis()) as i64 + 1;
    assert!(
        turns <= at_most,
        "{turns} purges in {elapsed:?}: more than one per {period:?}"
    );
    let periods = (elapsed.as_millis() / period.as_millis()) as i64;
    assert!(
        turns >= periods / 4,
        "{turns} purges in {elapsed:?}: the workers stopped purging"
    );
}

every_store! {
    ;
    sql:
    three_workers_purge_once_per_period,
    a_worker_with_retention_purges_old_runs_while_new_ones_run,
}
