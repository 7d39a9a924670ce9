//! The metrics: what workers and clients record, the backlog read from the
//! store, and the Prometheus endpoint, on both stores.
//!
//! The recorder is global to a process. cargo-nextest (the test command) runs each
//! test in a process of its own; the counters are compared before and after, so they also
//! hold when tests share a process, but the gauges of worker slots assume a process of
//! their own.

use crate::support;

use std::time::Duration;

use support::{Backend, bump, client, worker};
use tasks::metrics::Prometheus;
use tasks::{RunError, RunStatus, StartOptions, WorkflowContext, WorkflowError, step, workflow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// Fails on its first attempt in a run, succeeds on the second.
#[step(retry(max_attempts = 2, initial_interval = "10ms"))]
async fn metrics_flaky() -> Result<u32, WorkflowError> {
    let call = bump(run_id(), "flaky");
    if call == 1 {
        return Err(WorkflowError::msg("first attempt fails"));
    }
    Ok(call)
}

#[workflow(name = "metrics-ok")]
async fn succeeding(_ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    metrics_flaky().await
}

#[workflow(name = "metrics-fail", retry(max_attempts = 1))]
async fn failing(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    Err(WorkflowError::msg("this workflow fails"))
}

#[step]
async fn metrics_slow() -> Result<(), WorkflowError> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}

#[workflow(name = "metrics-slow")]
async fn slow(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    metrics_slow().await
}

/// The value of the series `name{labels}` in `text` (Prometheus's text format), 0 when the
/// series is absent. Every label given must match; the series may have no others.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, number)) = line.rsplit_once(' ') else {
            continue;
        };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((series_name, rest)) => (series_name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let found: Vec<(&str, &str)> = series_labels
            .split(',')
            .filter(|pair| !pair.is_empty())
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key, value.trim_matches('"')))
            .collect();
        if found.len() == labels.len() && labels.iter().all(|label| found.contains(label)) {
            return number.parse().unwrap();
        }
    }
    0.0
}

/// `GET /metrics` over HTTP from a live server of `prometheus.router(store)`.
async fn scrape_http(prometheus: &Prometheus, store: tasks::SharedStore) -> (String, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = prometheus.router(store);
    let server = tokio::spawn(async move { tasks::metrics::axum::serve(listener, router).await });
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    server.abort();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

async fn runs_steps_and_cancels_are_counted(backend: Backend) {
    let prometheus = Prometheus::install().unwrap();
    let store = backend.store().await;
    let before = prometheus.render(&store.shared()).await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);

    let ok = [
        succeeding::start(&client, ()).await.unwrap(),
        succeeding::start(&client, ()).await.unwrap(),
    ];
    for run in &ok {
        assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 2);
    }
    let failed = failing::start(&client, ()).await.unwrap();
    match failed.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { .. }) => {}
        other => panic!("expected a failed run, got {other:?}"),
    }
    let later = client
        .start_by_name("metrics-ok", serde_json::Value::Null)
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    client.cancel(later.id()).await.unwrap();
    worker.shutdown().await;

    let after = prometheus.render(&store.shared()).await;
    let delta = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    let ok_runs = [("workflow", "metrics-ok")];
    assert_eq!(delta("tasks_runs_started_total", &ok_runs), 3.0);
    assert_eq!(
        delta("tasks_runs_started_total", &[("workflow", "metrics-fail")]),
        1.0
    );
    let finished = |workflow, status| {
        delta(
            "tasks_runs_finished_total",
            &[("workflow", workflow), ("status", status)],
        )
    };
    assert_eq!(finished("metrics-ok", "completed"), 2.0);
    assert_eq!(finished("metrics-fail", "failed"), 1.0);
    assert_eq!(finished("metrics-ok", "canceled"), 1.0);
    assert_eq!(
        delta(
            "tasks_executions_total",
            &[("workflow", "metrics-ok"), ("outcome", "completed")]
        ),
        2.0
    );
    let attempts = |outcome| {
        delta(
            "tasks_step_attempts_total",
            &[
                ("workflow", "metrics-ok"),
                ("step", "metrics_flaky"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(attempts("failed"), 2.0, "{after}");
    assert_eq!(attempts("completed"), 2.0, "{after}");
    let step = [("workflow", "metrics-ok"), ("step", "metrics_flaky")];
    assert_eq!(delta("tasks_step_duration_seconds_count", &step), 4.0);
    assert!(
        delta(
            "tasks_step_duration_seconds_bucket",
            &[
                ("workflow", "metrics-ok"),
                ("step", "metrics_flaky"),
                ("le", "+Inf")
            ]
        ) == 4.0,
        "the step histogram has buckets: {after}"
    );
    assert!(delta("tasks_claim_duration_seconds_count", &[]) >= 1.0);
    assert!(delta("tasks_claimed_runs_total", &[]) >= 3.0);
    assert!(after.contains("# HELP tasks_runs_started_total"), "{after}");
}

async fn the_backlog_is_read_from_the_store(backend: Backend) {
    let prometheus = Prometheus::install().unwrap();
    let store = backend.store().await;
    let client = client(&store);
    let later = StartOptions::new().delay(Duration::from_secs(3600));
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(
            client
                .start_by_name("metrics-ok", serde_json::Value::Null)
                .options(later.clone())
                .await
                .unwrap(),
        );
    }
    client.pause(runs[0].id()).await.unwrap();
    let namespace = store.shared().namespace().to_owned();
    let backlog = |text: &str, status| {
        value(
            text,
            "tasks_runs",
            &[("namespace", namespace.as_str()), ("status", status)],
        )
    };

    let (head, body) = scrape_http(&prometheus, store.shared()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(backlog(&body, "pending"), 2.0, "{body}");
    assert_eq!(backlog(&body, "paused"), 1.0, "{body}");
    assert_eq!(backlog(&body, "running"), 0.0, "{body}");
    assert_eq!(backlog(&body, "sleeping"), 0.0, "{body}");

    // Read again at every scrape.
    client.cancel(runs[1].id()).await.unwrap();
    let text = prometheus.render(&store.shared()).await;
    assert_eq!(backlog(&text, "pending"), 1.0, "{text}");

    // The store's count itself, zeros and order included.
    let counts = store
        .shared()
        .contract()
        .count_runs(&[
            RunStatus::Canceled,
            RunStatus::Pending,
            RunStatus::Completed,
            RunStatus::Canceled,
        ])
        .await
        .unwrap();
    assert_eq!(
        counts,
        [
            (RunStatus::Canceled, 1),
            (RunStatus::Pending, 1),
            (RunStatus::Completed, 0)
        ]
    );
}

async fn worker_slots_in_use_are_a_gauge(backend: Backend) {
    let prometheus = Prometheus::install().unwrap();
    let store = backend.store().await;
    let worker = worker(&store).concurrency(4).build().unwrap().spawn();
    let client = client(&store);
    let run = slow::start(&client, ()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = prometheus.render(&store.shared()).await;
        if value(&text, "tasks_worker_slots_in_use", &[]) >= 1.0 {
            assert_eq!(value(&text, "tasks_worker_slots", &[]), 4.0, "{text}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no slot in use: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    run.result_within(Duration::from_secs(20)).await.unwrap();
    worker.shutdown().await;
    let text = prometheus.render(&store.shared()).await;
    assert_eq!(
        value(&text, "tasks_worker_slots_in_use", &[]),
        0.0,
        "{text}"
    );
    assert_eq!(value(&text, "tasks_worker_slots", &[]), 0.0, "{text}");
}

every_store!(
    runs_steps_and_cancels_are_counted,
    the_backlog_is_read_from_the_store,
    worker_slots_in_use_are_a_gauge,
);
