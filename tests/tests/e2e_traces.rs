//! End to end: traces, against each store (Postgres and SQLite), with the
//! `opentelemetry` feature and the OpenTelemetry SDK's in-memory exporter behind a
//! `tracing-opentelemetry` layer.
//!
//! A run started under a span stores that span's W3C trace context. Worker A executes its
//! first step and is stopped inside its second (its execution abandoned, as in a crash);
//! worker B takes the run over and replays it. Both executions' `run` spans are children of
//! the caller's span in the caller's trace, and so are their `replay` and `step` spans.
//! A child run joins its parent's trace; an explicit trace context wins over the current
//! span's.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use support::{Backend, bump, calls, client, worker};
use tasks::{RunStatus, TraceContext, WorkflowContext, WorkflowError, step, workflow};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use uuid::Uuid;

/// The spans exported so far, by every test of this binary (each test keeps to its own
/// trace id). Installs the global subscriber on first use.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("e2e-traces")));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        exporter
    })
}

fn spans_of(trace_id: TraceId) -> Vec<SpanData> {
    exporter()
        .get_finished_spans()
        .expect("read the exported spans")
        .into_iter()
        .filter(|span| span.span_context.trace_id() == trace_id)
        .collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The runs whose held step may finish.
fn released() -> &'static Mutex<HashSet<Uuid>> {
    static RELEASED: OnceLock<Mutex<HashSet<Uuid>>> = OnceLock::new();
    RELEASED.get_or_init(Default::default)
}

#[step]
async fn traced_first(run_id: Uuid) -> Result<u32, std::io::Error> {
    bump(run_id, "first");
    Ok(1)
}

/// Does not return until its run is released: a worker stopped meanwhile abandons it.
#[step]
async fn traced_held(run_id: Uuid) -> Result<u32, std::io::Error> {
    bump(run_id, "held");
    while !released().lock().unwrap().contains(&run_id) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(2)
}

#[workflow(name = "e2e-traced")]
async fn traced(ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    let first = traced_first(ctx.run_id()).await?;
    let held = traced_held(ctx.run_id()).await?;
    Ok(first + held)
}

#[workflow(name = "e2e-traced-child")]
async fn traced_child(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(n + 1)
}

#[workflow(name = "e2e-traced-parent")]
async fn traced_parent(ctx: WorkflowContext, _input: ()) -> Result<u32, WorkflowError> {
    Ok(ctx.child::<traced_child>(1).await?)
}

/// A span of the caller, with its OpenTelemetry trace and span ids.
fn caller_span(name: &'static str) -> (tracing::Span, TraceId, SpanId) {
    exporter();
    let span = tracing::info_span!("caller", test = name);
    let cx = span.context();
    let ids = cx.span().span_context().clone();
    assert!(
        ids.is_valid(),
        "the caller's span has an OpenTelemetry context"
    );
    (span, ids.trace_id(), ids.span_id())
}

async fn the_parent_link_survives_a_replay_on_another_worker(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let (caller, trace_id, caller_id) = caller_span("replay");
    let handle = traced::start(&client, ())
        .into_future()
        .instrument(caller.clone())
        .await
        .unwrap();
    let run_id = handle.id();
    drop(caller);

    let stored = store.get_run(run_id).await.unwrap().unwrap();
    let trace = stored
        .trace_context
        .expect("the start stored a trace context");
    assert_eq!(trace.trace_id(), trace_id.to_string());
    assert_eq!(trace.parent_id(), caller_id.to_string());

    // Worker A runs the first step and is stopped inside the second.
    let worker_a = worker(&store)
        .worker_id("traces-a")
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .spawn();
    eventually!(Duration::from_secs(20), {
        (calls(run_id, "held") == 1).then_some(())
    });
    worker_a.shutdown().await;
    let abandoned = store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(
        abandoned.status,
        RunStatus::Running,
        "A left the run running"
    );

    // Worker B takes it over once A's lease runs out, and replays it.
    released().lock().unwrap().insert(run_id);
    let worker_b = worker(&store)
        .worker_id("traces-b")
        .build()
        .unwrap()
        .spawn();
    let output = handle.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, 3);
    worker_b.shutdown().await;
    assert_eq!(calls(run_id, "first"), 1, "B replayed the first step");
    assert_eq!(calls(run_id, "held"), 2, "B ran the abandoned step again");

    let spans = spans_of(trace_id);
    let of_run = |name: &str| -> Vec<&SpanData> {
        spans
            .iter()
            .filter(|span| {
                span.name == name && attribute(span, "run.id") == Some(run_id.to_string())
            })
            .collect()
    };
    let executions = of_run("run");
    let workers: HashMap<String, &SpanData> = executions
        .iter()
        .map(|span| (attribute(span, "worker.id").unwrap_or_default(), *span))
        .collect();
    assert_eq!(
        executions.len(),
        2,
        "one execution span per worker: {executions:#?}"
    );
    for execution in &executions {
        assert_eq!(execution.span_context.trace_id(), trace_id);
        assert_eq!(
            execution.parent_span_id, caller_id,
            "an execution's parent is the caller's span"
        );
        assert_eq!(
            attribute(execution, "trace.parent").as_deref(),
            Some(trace.traceparent())
        );
    }
    let on_a = workers.get("traces-a").expect("an execution on A");
    let on_b = workers.get("traces-b").expect("an execution on B");
    assert_eq!(attribute(on_a, "replay").as_deref(), Some("false"));
    assert_eq!(attribute(on_b, "replay").as_deref(), Some("true"));

    // B's replay and steps are inside B's execution; A's steps inside A's.
    let replays = of_run("replay");
    assert_eq!(replays.len(), 1, "{replays:#?}");
    assert_eq!(replays[0].parent_span_id, on_b.span_context.span_id());
    // The first step's record; the held one was never recorded.
    assert_eq!(attribute(replays[0], "steps").as_deref(), Some("1"));
    let steps = of_run("step");
    let step_parents: Vec<(String, SpanId)> = steps
        .iter()
        .map(|span| {
            (
                attribute(span, "step.name").unwrap_or_default(),
                span.parent_span_id,
            )
        })
        .collect();
    let a = on_a.span_context.span_id();
    let b = on_b.span_context.span_id();
    // A's attempt at `traced_held` was dropped unfinished; its span still ended.
    let mut expected = vec![
        ("traced_first".to_owned(), a),
        ("traced_held".to_owned(), a),
        ("traced_held".to_owned(), b),
    ];
    let mut step_parents = step_parents;
    step_parents.sort_by_key(|(name, parent)| (name.clone(), *parent == b));
    expected.sort_by_key(|(name, parent)| (name.clone(), *parent == b));
    assert_eq!(step_parents, expected);
}

async fn a_child_run_joins_its_parents_trace(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let (caller, trace_id, caller_id) = caller_span("child");
    let handle = traced_parent::start(&client, ())
        .into_future()
        .instrument(caller.clone())
        .await
        .unwrap();
    drop(caller);
    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        handle.result_within(Duration::from_secs(30)).await.unwrap(),
        2
    );
    worker.shutdown().await;

    let parent = store.get_run(handle.id()).await.unwrap().unwrap();
    let children = client
        .list_runs(tasks::ListRuns {
            parent_run_id: Some(parent.id),
            ..Default::default()
        })
        .await
        .unwrap()
        .data;
    assert_eq!(children.len(), 1);
    let child = &children[0];
    let child_trace = child.trace_context.as_ref().expect("the child has a trace");
    assert_eq!(child_trace.trace_id(), trace_id.to_string());

    let spans = spans_of(trace_id);
    let executions_of = |id: Uuid| -> Vec<&SpanData> {
        spans
            .iter()
            .filter(|span| span.name == "run" && attribute(span, "run.id") == Some(id.to_string()))
            .collect()
    };
    let parent_executions = executions_of(parent.id);
    assert!(!parent_executions.is_empty());
    assert!(
        parent_executions
            .iter()
            .all(|span| span.parent_span_id == caller_id)
    );
    let parent_spans: HashSet<SpanId> = parent_executions
        .iter()
        .map(|span| span.span_context.span_id())
        .collect();
    let child_executions = executions_of(child.id);
    assert_eq!(child_executions.len(), 1, "{child_executions:#?}");
    assert!(
        parent_spans.contains(&child_executions[0].parent_span_id),
        "the child's execution is a child of the parent's execution that started it"
    );
}

async fn an_explicit_trace_context_wins_over_the_current_span(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let explicit = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        Some("congo=t61rcWkgMzE".to_owned()),
    )
    .unwrap();
    let (caller, _, _) = caller_span("explicit");
    let handle = client
        .start::<traced_child>(1)
        .trace_context(explicit.clone())
        .into_future()
        .instrument(caller)
        .await
        .unwrap();
    let stored = store.get_run(handle.id()).await.unwrap().unwrap();
    assert_eq!(stored.trace_context, Some(explicit.clone()));

    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        handle.result_within(Duration::from_secs(30)).await.unwrap(),
        2
    );
    worker.shutdown().await;
    let trace_id = TraceId::from_hex(explicit.trace_id()).unwrap();
    let execution = spans_of(trace_id)
        .into_iter()
        .find(|span| span.name == "run")
        .expect("the execution joined the explicit trace");
    assert_eq!(
        execution.parent_span_id,
        SpanId::from_hex(explicit.parent_id()).unwrap()
    );
    assert_eq!(
        execution.span_context.trace_state().header(),
        "congo=t61rcWkgMzE"
    );
}

every_store!(
    the_parent_link_survives_a_replay_on_another_worker,
    a_child_run_joins_its_parents_trace,
    an_explicit_trace_context_wins_over_the_current_span,
);
