//! Property tests of replay, on both stores: for arbitrary typed inputs (floats of every
//! kind, NaN and infinities included; unicode strings, NUL included; nested options and
//! vectors), a start either is refused with a typed error and stores nothing, or its run
//! completes; then a replay of the completed run's history is forced, and it must take the
//! same path as the first execution: the same step calls in the same order, the same
//! outputs, the same result, and no step body executed again.
//!
//! Two replays per case: the run sleeps durably between its steps, so its execution after
//! the sleep replays the step before it from the store; then the completed run is forked
//! from its last step, which replays every step before it from the copied history.
//!
//! Each property runs few cases (they hit real databases); a failure prints the shrunk
//! input.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use support::{Backend, TestStore, bump, calls, client, worker};
use tasks::store::Store;
use tasks::{ClientError, ListRuns, RunStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

const CASES: u32 = 16;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Mixed {
    label: String,
    scale: f64,
    reading: Option<f64>,
    samples: Vec<Option<f64>>,
    nested: Option<Vec<Vec<String>>>,
    count: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Summary {
    label: String,
    scale: f64,
    reading: Option<f64>,
    present: Vec<f64>,
    words: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Outcome {
    summary: Summary,
    halves: Vec<Option<f64>>,
    count: u32,
    finished: String,
}

fn run_id() -> Uuid {
    WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default()
}

/// The steps one execution saw, in order: `(step, its output as JSON)`.
type Path = Vec<(String, Value)>;

/// What each execution of a run saw, one path per execution.
fn seen() -> &'static Mutex<HashMap<Uuid, Vec<Path>>> {
    static SEEN: OnceLock<Mutex<HashMap<Uuid, Vec<Path>>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
}

fn begin_execution(run: Uuid) {
    seen()
        .lock()
        .unwrap()
        .entry(run)
        .or_default()
        .push(Vec::new());
}

fn saw<T: Serialize>(run: Uuid, step: &str, output: &T) {
    let output = serde_json::to_value(output).unwrap();
    let mut seen = seen().lock().unwrap();
    let executions = seen.get_mut(&run).expect("an execution began");
    executions
        .last_mut()
        .unwrap()
        .push((step.to_owned(), output));
}

fn executions(run: Uuid) -> Vec<Path> {
    seen()
        .lock()
        .unwrap()
        .get(&run)
        .cloned()
        .unwrap_or_default()
}

#[step]
async fn summarize(input: Mixed) -> Result<Summary, std::io::Error> {
    bump(run_id(), "summarize");
    let words = input.nested.into_iter().flatten().flatten().collect();
    Ok(Summary {
        label: input.label.chars().rev().collect(),
        scale: input.scale,
        reading: input.reading.map(|reading| -reading),
        present: input.samples.into_iter().flatten().collect(),
        words,
    })
}

#[step]
async fn halve(samples: Vec<f64>) -> Result<Vec<Option<f64>>, std::io::Error> {
    bump(run_id(), "halve");
    Ok(samples
        .into_iter()
        .map(|sample| (sample != 0.0).then_some(sample / 2.0))
        .collect())
}

#[step]
async fn finish(count: u32) -> Result<String, std::io::Error> {
    bump(run_id(), "finish");
    Ok(format!("finished {count}"))
}

#[workflow(name = "props-replay")]
async fn replayed(ctx: WorkflowContext, input: Mixed) -> Result<Outcome, WorkflowError> {
    let run = ctx.run_id();
    begin_execution(run);
    let summary = summarize(input.clone()).await?;
    saw(run, "summarize", &summary);
    // Parks the run: the next execution replays `summarize` from the store.
    ctx.sleep("between", Duration::from_millis(1)).await?;
    let halves = halve(summary.present.clone()).await?;
    saw(run, "halve", &halves);
    let finished = finish(input.count).await?;
    saw(run, "finish", &finished);
    Ok(Outcome {
        summary,
        halves,
        count: input.count,
        finished,
    })
}

/// The outcome the workflow computes for `input`, outside any run.
fn expected(input: &Mixed) -> Outcome {
    let present: Vec<f64> = input.samples.iter().flatten().copied().collect();
    Outcome {
        summary: Summary {
            label: input.label.chars().rev().collect(),
            scale: input.scale,
            reading: input.reading.map(|reading| -reading),
            present: present.clone(),
            words: input.nested.iter().flatten().flatten().cloned().collect(),
        },
        halves: present
            .iter()
            .map(|sample| (*sample != 0.0).then_some(sample / 2.0))
            .collect(),
        count: input.count,
        finished: format!("finished {}", input.count),
    }
}

/// Floats of every kind: any finite class (normal, subnormal, zero, either sign, with
/// every significant digit), the extremes, and now and then a NaN or an infinity.
fn float() -> impl Strategy<Value = f64> {
    use proptest::num::f64 as class;
    prop_oneof![
        6 => class::NORMAL | class::SUBNORMAL | class::ZERO | class::POSITIVE | class::NEGATIVE,
        3 => -1e6..1e6f64,
        1 => prop_oneof![
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(5e-324),
            Just(-0.0),
        ],
        1 => prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)],
    ]
}

/// Short unicode strings, sometimes with NUL or escapes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => ".{0,8}",
        2 => "[\\x01-\\x1f\"\\\\é€😀]{0,4}",
        1 => Just("nul \u{0}".to_owned()),
    ]
}

fn mixed() -> impl Strategy<Value = Mixed> {
    (
        text(),
        float(),
        proptest::option::of(float()),
        prop::collection::vec(proptest::option::of(float()), 0..5),
        proptest::option::of(prop::collection::vec(
            prop::collection::vec(text(), 0..3),
            0..3,
        )),
        any::<u32>(),
    )
        .prop_map(|(label, scale, reading, samples, nested, count)| Mixed {
            label,
            scale,
            reading,
            samples,
            nested,
            count,
        })
}

fn has_non_finite(input: &Mixed) -> bool {
    std::iter::once(input.scale)
        .chain(input.reading)
        .chain(input.samples.iter().flatten().copied())
        .any(|value| !value.is_finite())
}

fn has_nul(input: &Mixed) -> bool {
    std::iter::once(&input.label)
        .chain(input.nested.iter().flatten().flatten())
        .any(|text| text.contains('\0'))
}

async fn count(store: &dyn Store) -> usize {
    store
        .list_runs(ListRuns::default())
        .await
        .expect("the namespace still lists")
        .data
        .len()
}

/// `(step name, output)` of the function steps of `run`, in order.
async fn recorded(store: &dyn Store, run: Uuid) -> Vec<(String, Option<Value>)> {
    store
        .step_history(run)
        .await
        .unwrap()
        .into_iter()
        .filter(|step| step.kind == tasks::StepKind::Function)
        .map(|step| (step.step_name, step.output))
        .collect()
}

/// Whether two step histories hold the same names and the same JSON, numbers compared as
/// the floats they decode to (`support::same_json`).
fn same_records(a: &[(String, Option<Value>)], b: &[(String, Option<Value>)]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((name_a, a), (name_b, b))| {
            name_a == name_b
                && match (a, b) {
                    (Some(a), Some(b)) => support::same_json(a, b),
                    (a, b) => a == b,
                }
        })
}

#[test]
fn integral_floats_read_back_as_integers_are_the_same_record() {
    let returned = vec![(
        "halve".to_owned(),
        Some(serde_json::json!([1.6681231895129702e18])),
    )];
    let stored: Vec<(String, Option<Value>)> = vec![(
        "halve".to_owned(),
        Some(serde_json::from_str("[1668123189512970200]").unwrap()),
    )];
    assert!(same_records(&stored, &returned));
    let other = vec![("halve".to_owned(), Some(serde_json::json!([1.5])))];
    assert!(!same_records(&other, &returned));
}

fn a_replay_takes_the_same_path_as_the_first_execution(backend: Backend) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store: TestStore = runtime.block_on(backend.store());
    let client = client(&store);
    let worker = runtime.block_on(async { worker(&store).build().unwrap().spawn() });
    let (completed, refused) = (
        std::sync::atomic::AtomicU32::new(0),
        std::sync::atomic::AtomicU32::new(0),
    );
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&mixed(), |input| {
            runtime.block_on(async {
                let before = count(&*store).await;
                let run = match replayed::start(&client, input.clone()).await {
                    Ok(run) => run,
                    Err(ClientError::InvalidInput(_)) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        assert!(has_non_finite(&input), "refused a finite input: {input:?}");
                        assert_eq!(count(&*store).await, before, "nothing stored");
                        return;
                    }
                    Err(ClientError::Limit(error)) => {
                        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        assert!(has_nul(&input), "{error}: {input:?}");
                        assert_eq!(count(&*store).await, before, "nothing stored");
                        return;
                    }
                    Err(other) => panic!("untyped error for {input:?}: {other:?}"),
                };
                assert!(!has_non_finite(&input) && !has_nul(&input), "{input:?}");
                let outcome = run
                    .result_within(Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|error| panic!("{input:?}: {error}"));
                assert_eq!(outcome, expected(&input), "the result read back");

                // The run's own replay, after its sleep: every execution saw a prefix of
                // the same path, the last one all of it.
                let first = run.id();
                let runs = executions(first);
                assert!(runs.len() >= 2, "the sleep made the run replay: {runs:?}");
                let path = runs.last().unwrap().clone();
                let names: Vec<&str> = path.iter().map(|(name, _)| name.as_str()).collect();
                assert_eq!(names, ["summarize", "halve", "finish"]);
                for execution in &runs {
                    assert_eq!(
                        execution[..],
                        path[..execution.len()],
                        "an execution took another path"
                    );
                }
                for step in ["summarize", "halve", "finish"] {
                    assert_eq!(calls(first, step), 1, "{step} ran once");
                }
                let history = recorded(&*store, first).await;
                let stored: Vec<(String, Option<Value>)> = path
                    .iter()
                    .map(|(name, output)| (name.clone(), Some(output.clone())))
                    .collect();
                assert!(
                    same_records(&history, &stored),
                    "the stored outputs are what the steps returned:\n{history:?}\n{stored:?}"
                );

                // A forced replay of the completed run's history: a fork from its last
                // step replays `summarize` and `halve` from the copied records.
                let fork = client.fork(first, "finish").await.unwrap();
                let forked = client.handle::<Outcome>(fork.id);
                let again = forked
                    .result_within(Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|error| panic!("{input:?}: {error}"));
                assert_eq!(again, outcome, "the replay gave the same result");
                let replay = executions(fork.id);
                assert_eq!(replay.last(), Some(&path), "the replay took the same path");
                for execution in &replay {
                    assert_eq!(execution[..], path[..execution.len()], "{replay:?}");
                }
                assert_eq!(calls(fork.id, "summarize"), 0, "replayed, not run");
                assert_eq!(calls(fork.id, "halve"), 0, "replayed, not run");
                assert_eq!(calls(fork.id, "finish"), 1);
                assert_eq!(recorded(&*store, fork.id).await, history);
                let fork_run = forked.run().await.unwrap();
                assert_eq!(fork_run.status, RunStatus::Completed);
                completed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
            Ok(())
        })
        .unwrap();
    runtime.block_on(worker.shutdown());
    let (completed, refused) = (completed.into_inner(), refused.into_inner());
    eprintln!("{completed} runs completed and replayed, {refused} starts refused");
    assert!(
        completed >= CASES / 4,
        "too few runs to replay: {completed}"
    );
    assert!(refused >= 1, "no hostile input was generated");
}

mod postgres {
    use super::*;

    #[test]
    fn a_replay_takes_the_same_path() {
        a_replay_takes_the_same_path_as_the_first_execution(Backend::Postgres);
    }
}

mod sqlite {
    use super::*;

    #[test]
    fn a_replay_takes_the_same_path() {
        a_replay_takes_the_same_path_as_the_first_execution(Backend::Sqlite);
    }
}
