//! Hostile input end to end, on both stores: the client refuses what a store could not
//! hold or a run could not read back (typed errors, nothing stored); steps and workflows
//! whose output would not round-trip fail that attempt for good; a panicking step is a
//! failed attempt of that step, retried by its own policy; absurd durations are errors,
//! not panics.

use crate::support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Backend, bump, calls, client, worker};
use tasks::limits::{self, Field};
use tasks::{
    ClientError, ListRuns, RunError, RunStatus, StartOptions, StepStatus, WorkflowContext,
    WorkflowError, step, workflow,
};
use uuid::Uuid;

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// `1` wrapped in `depth` arrays.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

async fn count_runs(client: &tasks::Client) -> usize {
    client
        .list_runs(ListRuns::default())
        .await
        .expect("the namespace still lists")
        .data
        .len()
}

#[track_caller]
fn assert_limit<T: std::fmt::Debug>(result: Result<T, ClientError>, field: Field) {
    match result {
        Err(ClientError::Limit(error)) => assert_eq!(error.field(), field, "{error}"),
        other => panic!("expected a limit error about {field}, got {other:?}"),
    }
}

#[track_caller]
fn assert_invalid_input<T: std::fmt::Debug>(result: Result<T, ClientError>) {
    assert!(
        matches!(result, Err(ClientError::InvalidInput(_))),
        "expected invalid input, got {result:?}"
    );
}

/// Takes any JSON, returns it.
#[workflow(name = "limits-echo")]
async fn echo(_ctx: WorkflowContext, input: Value) -> Result<Value, WorkflowError> {
    Ok(input)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Measure {
    value: f64,
    count: u64,
}

#[workflow(name = "limits-measure")]
async fn measure(_ctx: WorkflowContext, input: Measure) -> Result<f64, WorkflowError> {
    Ok(input.value)
}

/// A workflow whose name is as long as a store holds (255 bytes) compiles and registers.
#[workflow(
    name = "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"
)]
async fn longest_name(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

/// `#[workflow]` and `#[step]` refuse at compile time a name or version longer than a store
/// holds. A proc-macro crate cannot read `tasks::limits`, so the macros keep their own copy
/// of the figures; this test holds the two together: the limits are the macros' figures, a
/// name of exactly the limit compiles and registers (`longest_name`), and the compile-fail
/// case `name_length` is one byte over each.
#[test]
fn the_macros_refuse_names_the_stores_cannot_hold() {
    use tasks::limits::{
        MAX_QUEUE_NAME_BYTES, MAX_STEP_NAME_BYTES, MAX_VERSION_BYTES, MAX_WORKFLOW_NAME_BYTES,
    };
    assert_eq!(
        (
            MAX_WORKFLOW_NAME_BYTES,
            MAX_STEP_NAME_BYTES,
            MAX_QUEUE_NAME_BYTES
        ),
        (255, 255, 255)
    );
    assert_eq!(MAX_VERSION_BYTES, 64);
    let registry = tasks::Registry::from_inventory().expect("the registry builds");
    assert!(registry.get(&"n".repeat(255), None).is_some());
    let case = include_str!("../../ui-tests/tests/ui/fail/name_length.rs");
    let literals: Vec<usize> = case
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|text| text.len() > 8)
        .map(str::len)
        .collect();
    assert_eq!(
        literals,
        vec![MAX_WORKFLOW_NAME_BYTES + 1, MAX_VERSION_BYTES + 1]
    );
}

async fn hostile_json_inputs_are_refused_and_nothing_is_stored(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let start = |input: Value, options: StartOptions| {
        let client = client.clone();
        async move {
            client
                .start_by_name("limits-echo", input)
                .options(options)
                .await
        }
    };
    let refused = [
        (json!({ "a": "x\u{0}y" }), Field::Input),
        (json!({ "k\u{0}": 1 }), Field::Input),
        (nested(limits::MAX_JSON_DEPTH + 1), Field::Input),
        (nested(128), Field::Input),
        (json!("x".repeat(limits::MAX_PAYLOAD_BYTES)), Field::Input),
    ];
    for (input, field) in refused {
        assert_limit(start(input, StartOptions::new()).await, field);
    }
    for context in [nested(limits::MAX_JSON_DEPTH + 1), json!(["\u{0}"])] {
        let options = StartOptions::new().context(context);
        assert_limit(start(json!(1), options).await, Field::Context);
    }
    // Built in code, far deeper than any decoder reads: refused without recursing.
    assert_limit(
        start(nested(10_000), StartOptions::new()).await,
        Field::Input,
    );
    assert_limit(
        start(json!(1), StartOptions::new().context(nested(10_000))).await,
        Field::Context,
    );
    assert_eq!(count_runs(&client).await, 0, "nothing was stored");

    // At the limit: stored, executed, and read back equal.
    let worker = worker(&store).build().unwrap().spawn();
    let deepest = nested(limits::MAX_JSON_DEPTH);
    let options = StartOptions::new().context(deepest.clone());
    let run = start(deepest.clone(), options).await.unwrap();
    let stored = run.run().await.unwrap();
    assert_eq!(stored.input.as_ref(), Some(&deepest));
    assert_eq!(stored.context.as_ref(), Some(&deepest));
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, deepest);
    assert_eq!(count_runs(&client).await, 1);
    worker.shutdown().await;
}

async fn hostile_options_are_refused_and_nothing_is_stored(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let start = |options: StartOptions| {
        let client = client.clone();
        async move { client.start::<echo>(json!(1)).options(options).await }
    };
    let key = "k".repeat(1 << 20);
    match start(StartOptions::new().idempotency_key(key)).await {
        Err(ClientError::Limit(error)) => assert_eq!(
            error.to_string(),
            "the idempotency key is 1048576 bytes; the limit is 512"
        ),
        other => panic!("expected a limit error, got {other:?}"),
    }
    assert_limit(
        start(StartOptions::new().idempotency_key("a\0b")).await,
        Field::IdempotencyKey,
    );
    assert_limit(
        start(StartOptions::new().delay(Duration::from_secs(u64::MAX))).await,
        Field::Delay,
    );
    assert_limit(
        start(StartOptions::new().deadline(DateTime::<Utc>::MAX_UTC)).await,
        Field::Deadline,
    );
    assert_limit(
        start(StartOptions::new().start_at(DateTime::<Utc>::MIN_UTC)).await,
        Field::AvailableAt,
    );
    let unknown = client.start_by_name("limits-\0echo", json!(1)).await;
    assert!(matches!(unknown, Err(ClientError::UnknownWorkflow { .. })));
    let filter = ListRuns {
        workflow_name: Some("limits-\0echo".into()),
        ..ListRuns::default()
    };
    assert!(matches!(
        client.list_runs(filter).await,
        Err(tasks::StoreError::Limit(_))
    ));
    assert_eq!(count_runs(&client).await, 0, "nothing was stored");
}

async fn inputs_that_would_not_decode_are_refused(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_invalid_input(measure::start(&client, Measure { value, count: 1 }).await);
    }
    // Passes the schema (an integer) but not the type's range.
    for input in [
        json!({ "value": 1.0, "count": 1.8e19 }),
        json!({ "value": 1.0, "count": -1 }),
    ] {
        assert_invalid_input(client.start_by_name("limits-measure", input).await);
    }
    assert_eq!(count_runs(&client).await, 0, "nothing was stored");
    let fine = measure::start(
        &client,
        Measure {
            value: 1.5,
            count: u64::MAX,
        },
    )
    .await
    .unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        fine.result_within(Duration::from_secs(20)).await.unwrap(),
        1.5
    );
    worker.shutdown().await;
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Produce {
    what: String,
}

#[step(retry(max_attempts = 3, initial_interval = "10ms"))]
async fn produce(what: String) -> Result<Value, std::io::Error> {
    bump(run_id(), "produce");
    Ok(match what.as_str() {
        "deep" => nested(200),
        "limit" => nested(limits::MAX_JSON_DEPTH),
        _ => json!("nul \u{0}"),
    })
}

#[step(retry(max_attempts = 3, initial_interval = "10ms"))]
async fn not_a_number() -> Result<f64, std::io::Error> {
    bump(run_id(), "nan");
    Ok(f64::NAN)
}

#[workflow(
    name = "limits-outputs",
    retry(max_attempts = 3, initial_interval = "10ms")
)]
async fn outputs(ctx: WorkflowContext, input: Produce) -> Result<Value, WorkflowError> {
    if input.what == "nan" {
        let value = not_a_number().await?;
        return Ok(json!(value));
    }
    if input.what == "workflow-deep" {
        return Ok(nested(200));
    }
    let value = produce(input.what).await?;
    // Forces a replay, which must read the stored output back as it was produced.
    ctx.sleep("replay", Duration::from_millis(50)).await?;
    Ok(value)
}

#[workflow(name = "limits-nan-output")]
async fn nan_output(_ctx: WorkflowContext, _input: ()) -> Result<f64, WorkflowError> {
    Ok(f64::NAN)
}

async fn outputs_that_would_not_round_trip_fail_the_attempt_for_good(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    for what in ["deep", "nul", "nan"] {
        let run = outputs::start(&client, Produce { what: what.into() })
            .await
            .unwrap();
        match run.result_within(Duration::from_secs(20)).await {
            Err(RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("output"), "{what}: {error}");
                assert!(!error.retryable, "{what}: {error}");
            }
            other => panic!("{what}: expected a failed run, got {other:?}"),
        }
        let steps = run.steps().await.unwrap();
        assert_eq!(
            steps.len(),
            1,
            "{what}: one attempt, not retried: {steps:?}"
        );
        assert_eq!(steps[0].status, StepStatus::Failed, "{what}");
        assert_eq!(steps[0].output, None, "{what}: never recorded as completed");
        let stored = run.run().await.unwrap();
        assert_eq!(stored.attempts, 1, "{what}: the run is not retried");
    }
    for (name, input) in [
        ("limits-outputs", json!({ "what": "workflow-deep" })),
        ("limits-nan-output", json!(null)),
    ] {
        let run = client.start_by_name(name, input).await.unwrap();
        match run.result_within(Duration::from_secs(20)).await {
            Err(RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("output"), "{name}: {error}");
            }
            other => panic!("{name}: expected a failed run, got {other:?}"),
        }
        assert_eq!(run.run().await.unwrap().attempts, 1, "{name}");
    }

    // At the limit, the output is stored, replayed and returned equal.
    let run = outputs::start(
        &client,
        Produce {
            what: "limit".into(),
        },
    )
    .await
    .unwrap();
    let output = run.result_within(Duration::from_secs(20)).await.unwrap();
    assert_eq!(output, nested(limits::MAX_JSON_DEPTH));
    assert_eq!(calls(run.id(), "produce"), 1, "replayed, not run again");
    worker.shutdown().await;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Sensor {
    label: String,
    reading: Option<f64>,
    history: Vec<f64>,
}

impl tasks::Event for Sensor {
    const TOPIC: &'static str = "limits-sensor";
}

#[step]
async fn read_sensor(what: String) -> Result<Option<f64>, std::io::Error> {
    bump(run_id(), "read_sensor");
    Ok(match what.as_str() {
        "inf" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => Some(2.5),
    })
}

/// Reads a sensor (a step whose output may hold a non-finite float inside an `Option`),
/// publishes the reading, sleeps (so the run replays), and returns what it read.
#[workflow(name = "limits-sensor", events(Sensor))]
async fn sensor(ctx: WorkflowContext, input: Sensor) -> Result<Option<f64>, WorkflowError> {
    let reading = read_sensor(input.label.clone()).await?;
    if input.label == "publish-nan" {
        ctx.set_state("reading", &Some(f64::NAN)).await?;
    }
    ctx.sleep("replay", Duration::from_millis(50)).await?;
    Ok(reading)
}

fn sensor_input(label: &str, reading: Option<f64>, history: Vec<f64>) -> Sensor {
    Sensor {
        label: label.into(),
        reading,
        history,
    }
}

/// A NaN or infinite float nested where `null` would decode (`Some(f64::NAN)` as an
/// `Option<f64>`, an infinity in a `Vec<f64>`) is refused before anything is stored: a
/// typed start with an invalid-input error naming its path, a typed event with a JSON
/// error; a step output holding one fails its attempt for good with kind `output` (never
/// recorded as completed, so no replay reads it as `None`); a published state value holding
/// one fails the run without publishing.
async fn nested_non_finite_floats_are_refused_before_they_are_stored(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    for (input, path) in [
        (sensor_input("a", Some(f64::NAN), vec![]), "/reading"),
        (
            sensor_input("a", None, vec![1.0, f64::INFINITY]),
            "/history/1",
        ),
        (
            sensor_input("a", Some(1.0), vec![f64::NEG_INFINITY]),
            "/history/0",
        ),
    ] {
        match sensor::start(&client, input.clone()).await {
            Err(ClientError::InvalidInput(invalid)) => {
                assert_eq!(invalid.violations.len(), 1, "{invalid:?}");
                assert_eq!(invalid.violations[0].path, path, "{invalid:?}");
                assert!(
                    invalid.violations[0].message.contains("JSON cannot hold"),
                    "{invalid:?}"
                );
            }
            other => panic!("expected invalid input for {input:?}, got {other:?}"),
        }
    }
    assert_eq!(count_runs(&client).await, 0, "nothing was stored");

    // A typed event holding one is refused; nothing is stored.
    let target = sensor::start(&client, sensor_input("fine", Some(1.0), vec![0.5]))
        .await
        .unwrap();
    let sent = client
        .send_event(target.id(), &sensor_input("x", Some(f64::NAN), vec![]))
        .await;
    match sent {
        Err(ClientError::Json(error)) => {
            assert!(error.to_string().contains("/reading"), "{error}");
        }
        other => panic!("expected a JSON error, got {other:?}"),
    }
    assert!(
        store
            .events()
            .unwrap()
            .list_events(target.id())
            .await
            .unwrap()
            .is_empty()
    );

    let worker = worker(&store).build().unwrap().spawn();
    assert_eq!(
        target.result_within(Duration::from_secs(20)).await.unwrap(),
        Some(2.5)
    );
    for what in ["inf", "nan"] {
        let run = sensor::start(&client, sensor_input(what, None, vec![]))
            .await
            .unwrap();
        match run.result_within(Duration::from_secs(20)).await {
            Err(RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("output"), "{what}: {error}");
                assert!(!error.retryable, "{what}: {error}");
                assert!(error.message.contains("read_sensor"), "{what}: {error}");
            }
            other => panic!("{what}: expected a failed run, got {other:?}"),
        }
        let steps = run.steps().await.unwrap();
        assert_eq!(steps.len(), 1, "{what}: one attempt: {steps:?}");
        assert_eq!(steps[0].status, StepStatus::Failed, "{what}");
        assert_eq!(steps[0].output, None, "{what}: never recorded as completed");
        assert_eq!(run.run().await.unwrap().attempts, 1, "{what}: not retried");
        assert_eq!(calls(run.id(), "read_sensor"), 1, "{what}");
        // Run again by hand: the step runs again (it never completed) and fails the same
        // way; no execution ever reads a stored `null` back as `None`.
        client.retry(run.id()).await.unwrap();
        match run.result_within(Duration::from_secs(20)).await {
            Err(RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("output"), "{what}: {error}");
            }
            other => panic!("{what}: expected the retry to fail the same way, got {other:?}"),
        }
        assert_eq!(calls(run.id(), "read_sensor"), 2, "{what}");
        let steps = run.steps().await.unwrap();
        assert!(
            steps
                .iter()
                .all(|s| s.status == StepStatus::Failed && s.output.is_none()),
            "{what}: {steps:?}"
        );
    }
    let run = sensor::start(&client, sensor_input("publish-nan", None, vec![]))
        .await
        .unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert!(!error.retryable, "{error}");
            assert!(error.message.contains("JSON cannot hold"), "{error}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert!(
        client.list_state(run.id()).await.unwrap().is_empty(),
        "nothing was published"
    );
    worker.shutdown().await;
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Panics {
    times: u32,
}

#[step(retry(max_attempts = 3, initial_interval = "10ms"))]
async fn touchy(times: u32) -> Result<u32, std::io::Error> {
    let call = bump(run_id(), "touchy");
    if call <= times {
        panic!("touchy call {call}");
    }
    Ok(call)
}

#[workflow(
    name = "limits-panics",
    retry(max_attempts = 5, initial_interval = "10ms")
)]
async fn panics(_ctx: WorkflowContext, input: Panics) -> Result<u32, WorkflowError> {
    Ok(touchy(input.times).await?)
}

async fn a_panicking_step_is_a_failed_attempt_retried_by_the_step_policy(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let client = client(&store);

    let run = panics::start(&client, Panics { times: 2 }).await.unwrap();
    assert_eq!(run.result_within(Duration::from_secs(20)).await.unwrap(), 3);
    let steps = run.steps().await.unwrap();
    let statuses: Vec<_> = steps.iter().map(|step| step.status).collect();
    assert_eq!(
        statuses,
        [
            StepStatus::Failed,
            StepStatus::Failed,
            StepStatus::Completed
        ]
    );
    let first = tasks::ErrorRecord::from_json(steps[0].error.as_ref().unwrap());
    assert_eq!(first.kind.as_deref(), Some("panic"));
    assert!(first.message.contains("touchy call 1"), "{first}");
    assert_eq!(
        run.run().await.unwrap().attempts,
        1,
        "the run is not retried"
    );

    // Out of step attempts: the run fails for good, the workflow policy does not apply.
    let run = panics::start(&client, Panics { times: 100 }).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert_eq!(error.kind.as_deref(), Some("panic"));
            assert!(error.message.contains("touchy call 3"), "{error}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    assert_eq!(calls(run.id(), "touchy"), 3, "the step's max_attempts");
    let stored = run.run().await.unwrap();
    assert_eq!((stored.status, stored.attempts), (RunStatus::Failed, 1));
    worker.shutdown().await;
}

#[workflow(name = "limits-long-sleep")]
async fn long_sleep(ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    ctx.sleep("forever", Duration::from_secs(u64::MAX)).await
}

async fn an_absurd_sleep_is_an_error_not_a_panic(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let run = long_sleep::start(&client(&store), ()).await.unwrap();
    match run.result_within(Duration::from_secs(20)).await {
        Err(RunError::Failed { error, .. }) => {
            assert!(error.message.contains("the sleep is"), "{error}");
            assert!(!error.retryable, "{error}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    let stored = run.run().await.unwrap();
    assert_eq!(stored.attempts, 1);
    assert!(run.steps().await.unwrap().is_empty(), "nothing recorded");
    worker.shutdown().await;
}

async fn a_worker_lease_past_the_limit_is_refused_at_build(backend: Backend) {
    let store = backend.store().await;
    let built = worker(&store).lease(Duration::from_secs(u64::MAX)).build();
    assert!(
        matches!(built, Err(tasks::WorkerError::InvalidSetting(ref message)) if message.contains("the lease")),
        "{built:?}"
    );
}

/// A namespace with NUL or past its length limit is refused where a store, a worker or a
/// client is scoped to it, with a typed error naming the namespace: no store ever holds it,
/// so no call by id can hand it to the database and come back with an untyped error.
async fn a_namespace_past_the_limits_is_refused_where_it_is_set(backend: Backend) {
    let store = backend.store().await;
    let long = "n".repeat(limits::MAX_NAMESPACE_BYTES + 1);
    for namespace in ["a\0b", "\0", long.as_str()] {
        match store.with_namespace(namespace) {
            Err(error) => assert_eq!(error.field(), Field::Namespace, "{error}"),
            Ok(_) => panic!("with_namespace accepted {namespace:?}"),
        }
        match store.scoped(namespace) {
            Err(error) => assert_eq!(error.field(), Field::Namespace, "{error}"),
            Ok(_) => panic!("scoped accepted {namespace:?}"),
        }
        match worker(&store).namespace(namespace).build() {
            Err(tasks::WorkerError::Limit(error)) => {
                assert_eq!(error.field(), Field::Namespace, "{error}");
            }
            other => panic!("expected a limit error, got {other:?}"),
        }
    }
    // The longest accepted namespace works for every call, by id or not.
    let unique = Uuid::new_v4().to_string();
    let longest = format!(
        "{unique}{}",
        "n".repeat(limits::MAX_NAMESPACE_BYTES - unique.len())
    );
    let scoped = store.with_namespace(&longest).unwrap();
    let unknown = Uuid::new_v4();
    assert_eq!(scoped.contract().get_run(unknown).await.unwrap(), None);
    assert!(matches!(
        scoped
            .contract()
            .lifecycle()
            .unwrap()
            .cancel_run(unknown)
            .await,
        Err(tasks::StoreError::RunNotFound { .. })
    ));
    let client = tasks::Client::new(scoped.clone()).unwrap();
    let run = measure::start(
        &client,
        Measure {
            value: 1.0,
            count: 1,
        },
    )
    .await
    .unwrap();
    assert_eq!(run.run().await.unwrap().namespace, longest);
    scoped
        .contract()
        .lifecycle()
        .unwrap()
        .cancel_run(run.id())
        .await
        .unwrap();
    assert_eq!(count_runs(&client).await, 1);
}

every_store!(
    a_namespace_past_the_limits_is_refused_where_it_is_set,
    a_worker_lease_past_the_limit_is_refused_at_build,
    hostile_json_inputs_are_refused_and_nothing_is_stored,
    hostile_options_are_refused_and_nothing_is_stored,
    inputs_that_would_not_decode_are_refused,
    outputs_that_would_not_round_trip_fail_the_attempt_for_good,
    nested_non_finite_floats_are_refused_before_they_are_stored,
    a_panicking_step_is_a_failed_attempt_retried_by_the_step_policy,
    an_absurd_sleep_is_an_error_not_a_panic,
);
