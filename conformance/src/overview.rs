//! The overview's figures ([`OverviewStore`](tasks_core::OverviewStore)): queue backlogs,
//! workers and their heartbeats, runs finished in a recent window, and the bounds every
//! read keeps.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore};

use chrono::Utc;
use serde_json::json;
use tasks_core::store::overview::{FinishedWindow, MAX_OVERVIEW_ROWS};
use tasks_core::{CreateRun, FailRun, Holder, Store, StoreError};

use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A pending run of a new workflow in `queue`, available after `delay` (now when zero).
async fn pending_in<S: Store + ?Sized>(store: &S, queue: &str, delay: Duration) -> Uuid {
    store
        .create_run(CreateRun {
            queue: Some(queue.to_owned()),
            delay: (!delay.is_zero()).then_some(delay),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap()
        .id
}

/// Each queue with live runs shows its ready, delayed and running runs and when its oldest
/// ready run became claimable; finished runs and queues without live runs are not counted.
pub async fn queue_backlogs_count_live_runs_per_queue(setup: impl Setup) {
    let store = setup.store().await;
    let before = micros(Utc::now()) - chrono::Duration::seconds(1);
    pending_in(&store, "mail", Duration::ZERO).await;
    pending_in(&store, "mail", Duration::ZERO).await;
    pending_in(&store, "mail", Duration::from_secs(3600)).await;
    pending_in(&store, "reports", Duration::ZERO).await;
    // The three ready runs taken by a worker.
    let worker = new_worker();
    let claimed = store.claim_runs(&worker, LONG_LEASE, 10).await.unwrap();
    assert_eq!(claimed.len(), 3, "the three ready runs are claimed");
    // Finish one mail run, release the other: it is pending and ready again.
    let mut mail_runs = claimed
        .iter()
        .map(|claimed| &claimed.run)
        .filter(|run| run.queue == "mail");
    let done = mail_runs.next().unwrap();
    let released = mail_runs.next().unwrap();
    let holder = |run: &tasks_core::WorkflowRun| Holder::new(worker.clone(), run.claim_epoch);
    store
        .complete_run(done.id, &holder(done), json!(1))
        .await
        .unwrap();
    store
        .release_run(
            released.id,
            &holder(released),
            Duration::ZERO,
            json!("stopping"),
        )
        .await
        .unwrap();
    // A queue whose only run finished has no backlog.
    let gone = pending_in(&store, "gone", Duration::ZERO).await;
    store.lifecycle().unwrap().cancel_run(gone).await.unwrap();

    let backlogs = store.overview().unwrap().queue_backlogs(100).await.unwrap();
    let names: Vec<&str> = backlogs.iter().map(|b| b.queue.as_str()).collect();
    assert_eq!(names, ["mail", "reports"], "{backlogs:?}");
    let mail = &backlogs[0];
    assert_eq!(
        (mail.ready, mail.delayed, mail.running),
        (1, 1, 0),
        "{mail:?}"
    );
    let oldest = mail.oldest_ready_at.expect("a ready run's time");
    assert!(oldest >= before, "{oldest} is before the test began");
    let released_run = store.get_run(released.id).await.unwrap().unwrap();
    assert_eq!(
        Some(oldest),
        released_run.available_at.or(Some(released_run.created_at))
    );
    let reports = &backlogs[1];
    assert_eq!(
        (reports.ready, reports.delayed, reports.running),
        (0, 0, 1),
        "{reports:?}"
    );
    assert_eq!(reports.oldest_ready_at, None);

    // The limit keeps the first queues by name.
    let first = store.overview().unwrap().queue_backlogs(1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].queue, "mail");
}

/// Workers with a heartbeat row are listed with their last beat, liveness and the runs they
/// hold running; a worker that stopped is not.
pub async fn list_workers_shows_heartbeats_and_running_runs(setup: impl Setup) {
    let store = setup.store().await;
    let overview = store.overview().unwrap();
    assert!(overview.list_workers(10).await.unwrap().is_empty());
    let (busy, idle, gone) = (new_worker(), new_worker(), new_worker());
    let before = micros(Utc::now()) - chrono::Duration::seconds(1);
    for worker in [&busy, &idle, &gone] {
        store
            .heartbeat(worker, Duration::from_secs(60))
            .await
            .unwrap();
    }
    store.remove_worker(&gone).await.unwrap();
    store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    assert_eq!(
        store.claim_runs(&busy, LONG_LEASE, 10).await.unwrap().len(),
        2
    );

    let workers = overview.list_workers(10).await.unwrap();
    let mut expected = vec![busy.clone(), idle.clone()];
    expected.sort();
    let listed: Vec<&str> = workers.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(listed, expected, "{workers:?}");
    for worker in &workers {
        assert!(worker.live, "{worker:?}");
        assert!(worker.beat_at >= before, "{worker:?}");
        assert!(worker.stale_at > worker.beat_at, "{worker:?}");
        let running = if worker.worker_id == busy { 2 } else { 0 };
        assert_eq!(worker.running, running, "{worker:?}");
    }
    // A heartbeat that went stale is listed after the live ones, as not live.
    let stale = new_worker();
    store.heartbeat(&stale, Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let workers = overview.list_workers(10).await.unwrap();
    assert_eq!(workers.len(), 3, "{workers:?}");
    assert_eq!(workers[2].worker_id, stale);
    assert!(!workers[2].live);
    assert_eq!(overview.list_workers(1).await.unwrap().len(), 1);
}

/// Runs that finished within the window are counted in the bucket of their finishing time,
/// per terminal status; live runs are not counted.
pub async fn finished_runs_counts_the_window_by_status(setup: impl Setup) {
    let store = setup.store().await;
    let overview = store.overview().unwrap();
    let empty = overview
        .finished_runs(FinishedWindow::LAST_HOUR)
        .await
        .unwrap();
    assert_eq!(empty.buckets.len(), 60);
    assert_eq!(empty.totals(), (0, 0, 0));
    assert_eq!(empty.bucket, Duration::from_secs(60));

    let worker = new_worker();
    for _ in 0..4 {
        store
            .create_run(CreateRun::new(unique_name()))
            .await
            .unwrap();
    }
    let claimed = store.claim_runs(&worker, LONG_LEASE, 4).await.unwrap();
    assert_eq!(claimed.len(), 4);
    for claimed in &claimed[..2] {
        store
            .complete_run(claimed.run.id, &claimed.holder(), json!("ok"))
            .await
            .unwrap();
    }
    store
        .fail_run(FailRun {
            run_id: claimed[2].run.id,
            holder: claimed[2].holder(),
            error: json!({ "message": "no" }),
            force: true,
        })
        .await
        .unwrap();
    let canceled = store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    store
        .lifecycle()
        .unwrap()
        .cancel_run(canceled.id)
        .await
        .unwrap();
    // Still running (the fourth claimed run) and pending: not counted.
    store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();

    let window = overview
        .finished_runs(FinishedWindow::LAST_HOUR)
        .await
        .unwrap();
    assert_eq!(window.totals(), (2, 1, 1), "{window:?}");
    assert_near_now(
        Some(window.since + chrono::Duration::hours(1)),
        "the window's end",
    );
    // Everything finished just now: in the last bucket (or, on a minute's edge, the one
    // before it).
    let recent: u64 = window.buckets[58..]
        .iter()
        .map(|b| b.completed + b.failed + b.canceled)
        .sum();
    assert_eq!(recent, 4, "{window:?}");
    // A window of one second a few seconds from now still holds them; none from a while
    // ago is counted in a window that ended before they finished.
    let second = overview
        .finished_runs(FinishedWindow {
            span: Duration::from_secs(30),
            buckets: 3,
        })
        .await
        .unwrap();
    assert_eq!(second.buckets.len(), 3);
    assert_eq!(second.totals(), (2, 1, 1));
}

/// Every overview read refuses an unbounded request before it reaches the database.
pub async fn overview_reads_are_bounded(setup: impl Setup) {
    let store = setup.store().await;
    let overview = store.overview().unwrap();
    assert_err!(
        overview.queue_backlogs(0).await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        overview.queue_backlogs(MAX_OVERVIEW_ROWS + 1).await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        overview.list_workers(MAX_OVERVIEW_ROWS + 1).await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        overview
            .finished_runs(FinishedWindow {
                span: Duration::from_secs(7 * 24 * 3600),
                buckets: 60,
            })
            .await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        overview
            .finished_runs(FinishedWindow {
                span: Duration::from_secs(3600),
                buckets: 100_000,
            })
            .await,
        StoreError::InvalidArgument(_)
    );
}
