//! Traces: a run joins the trace of whoever started it, on every execution. The run here
//! sleeps between its two steps, so it is executed twice (the second time by replay, which
//! could be on another worker); both executions are children of the caller's span.
//!
//! A real service installs its own OpenTelemetry pipeline (an OTLP exporter, say); this
//! example keeps the spans in memory and prints them as a tree.
//!
//! ```sh
//! cargo run --example traces
//! ```

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[step]
async fn charge(order: u64) -> Result<String, std::io::Error> {
    Ok(format!("charged order {order}"))
}

#[step]
async fn ship(order: u64) -> Result<String, std::io::Error> {
    Ok(format!("shipped order {order}"))
}

#[workflow(name = "traced-order")]
async fn order(ctx: WorkflowContext, order: u64) -> Result<String, WorkflowError> {
    charge(order).await?;
    ctx.sleep("cool-off", Duration::from_millis(500)).await?;
    Ok(ship(order).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your pipeline goes here: any `opentelemetry_sdk` tracer provider and exporter.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("example")))
        .init();

    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-traces")?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;

    // The run started inside this span joins its trace.
    let run = order::start(&client, 7)
        .into_future()
        .instrument(tracing::info_span!("POST /orders"))
        .await?;
    println!("result: {}", run.result().await?);
    worker.shutdown().await;
    let stored = client.get_run(run.id()).await?.expect("the run exists");
    if let Some(trace) = &stored.trace_context {
        println!("stored with the run: traceparent {}", trace.traceparent());
    }

    // Print the caller's trace as a tree.
    let spans = exporter.get_finished_spans()?;
    let Some(root) = spans.iter().find(|span| span.name == "POST /orders") else {
        return Err("the caller's span was not exported".into());
    };
    let trace_id = root.span_context.trace_id();
    let mut children: HashMap<SpanId, Vec<&SpanData>> = HashMap::new();
    for span in spans
        .iter()
        .filter(|s| s.span_context.trace_id() == trace_id)
    {
        children.entry(span.parent_span_id).or_default().push(span);
    }
    println!("trace {trace_id}:");
    print_tree(root, &children, 1);
    Ok(())
}

fn print_tree(span: &SpanData, children: &HashMap<SpanId, Vec<&SpanData>>, depth: usize) {
    let fields: Vec<String> = span
        .attributes
        .iter()
        .filter(|kv| ["worker.id", "replay", "step.name", "steps"].contains(&kv.key.as_str()))
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect();
    println!("{}{} {}", "  ".repeat(depth), span.name, fields.join(" "));
    let mut below = children
        .get(&span.span_context.span_id())
        .cloned()
        .unwrap_or_default();
    below.sort_by_key(|child| child.start_time);
    for child in below {
        print_tree(child, children, depth + 1);
    }
}
