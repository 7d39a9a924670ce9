//! Property tests of hostile input, on both stores: for arbitrary JSON inputs, names, keys,
//! namespaces and cursors, either the value is refused with a typed error and nothing is
//! stored, or it is stored and reads back equal.
//!
//! Each property runs few cases (they hit real databases); a failure prints the shrunk
//! input.

use crate::support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Backend, TestStore, client};
use tasks::store::{CreateRun, Store};
use tasks::{
    ClientError, Cursor, ListRuns, StoreError, WorkflowContext, WorkflowError, limits, workflow,
};
use uuid::Uuid;

const CASES: u32 = 32;

#[workflow(name = "props-echo")]
async fn echo(_ctx: WorkflowContext, input: Value) -> Result<Value, WorkflowError> {
    Ok(input)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Reading {
    label: String,
    value: f64,
    count: u32,
}

#[workflow(name = "props-reading")]
async fn reading(_ctx: WorkflowContext, input: Reading) -> Result<f64, WorkflowError> {
    Ok(input.value)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Runs `test` for `backend` on a runtime of its own, with a fresh store.
fn with_store(backend: Backend, test: impl FnOnce(&tokio::runtime::Runtime, TestStore)) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(backend.store());
    test(&runtime, store);
}

/// Short strings, sometimes with NUL or control characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,6}",
        ".{0,6}",
        "[\\x00-\\x1f\"\\\\]{0,4}",
        Just("\u{0}".to_owned()),
    ]
}

/// Arbitrary JSON: scalars, arrays and objects a few levels deep, and sometimes a value
/// nested right around the depth limit.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        text().prop_map(Value::from),
    ];
    let tree = leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|map: BTreeMap<String, Value>| Value::Object(map.into_iter().collect())),
        ]
    });
    let deep = (limits::MAX_JSON_DEPTH - 2..limits::MAX_JSON_DEPTH + 3).prop_map(|depth| {
        let mut value = json!("leaf");
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    });
    prop_oneof![8 => tree, 1 => deep]
}

/// A reading, sometimes with fields of the wrong type or range.
fn reading_input() -> impl Strategy<Value = Value> {
    (text(), json_value(), json_value(), any::<bool>()).prop_map(|(label, value, count, typed)| {
        if typed {
            json!({ "label": label, "value": value, "count": count })
        } else {
            json!({ "label": label, "value": 1.5, "count": 3 })
        }
    })
}

async fn count(store: &dyn Store) -> usize {
    store
        .list_runs(ListRuns::default())
        .await
        .expect("the namespace still lists")
        .data
        .len()
}

fn json_inputs_are_refused_typed_or_stored_equal(backend: Backend) {
    with_store(backend, |runtime, store| {
        let client = client(&store);
        let inputs = (json_value(), reading_input(), any::<bool>());
        runner()
            .run(&inputs, |(any_input, reading_input, use_reading)| {
                runtime.block_on(async {
                    let (name, input) = if use_reading {
                        ("props-reading", reading_input)
                    } else {
                        ("props-echo", any_input)
                    };
                    let before = count(&*store).await;
                    match client.start_by_name(name, input.clone()).await {
                        Ok(run) => {
                            let stored = run.run().await.unwrap();
                            // Both stores read a JSON `null` input back as no input, and
                            // Postgres may write an integral float as an integer.
                            let stored = stored.input.unwrap_or(Value::Null);
                            assert!(support::same_json(&stored, &input), "{stored} != {input}");
                            assert_eq!(count(&*store).await, before + 1);
                        }
                        Err(ClientError::Limit(_) | ClientError::InvalidInput(_)) => {
                            assert_eq!(count(&*store).await, before, "nothing stored");
                        }
                        Err(other) => panic!("untyped error for {input}: {other:?}"),
                    }
                });
                Ok(())
            })
            .unwrap();
    });
}

/// Names and keys of every length around the limits, sometimes with NUL.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{1,12}",
        "[a-z\\x00]{1,4}",
        (250usize..260).prop_map(|n| "n".repeat(n)),
        (500usize..520).prop_map(|n| "k".repeat(n)),
    ]
}

fn names_keys_and_namespaces_are_refused_typed_or_stored_equal(backend: Backend) {
    with_store(backend, |runtime, store| {
        let strategy = (name(), name(), proptest::option::of(name()), any::<bool>());
        runner()
            .run(&strategy, |(workflow, key, namespace, scoped)| {
                runtime.block_on(async {
                    let namespace = match (&namespace, scoped) {
                        (Some(namespace), true) => format!("{}{namespace}", Uuid::new_v4()),
                        _ => store.namespace().to_owned(),
                    };
                    let valid_namespace = limits::check_namespace(&namespace).is_ok();
                    let target = match store.scoped(&namespace) {
                        Ok(target) => target,
                        Err(error) => {
                            // No store is made that could hand it to the database.
                            assert!(!valid_namespace, "{error}");
                            assert_eq!(error.field(), limits::Field::Namespace);
                            return;
                        }
                    };
                    assert!(valid_namespace);
                    let before = count(target.contract()).await;
                    let params = CreateRun {
                        idempotency_key: Some(key.clone()),
                        ..CreateRun::new(workflow.clone())
                    };
                    match target.contract().create_run(params).await {
                        Ok(run) => {
                            assert_eq!(run.workflow_name, workflow);
                            assert_eq!(run.idempotency_key.as_deref(), Some(key.as_str()));
                            assert_eq!(run.namespace, namespace);
                            let read = target.contract().get_run(run.id).await.unwrap();
                            assert_eq!(read, Some(run.clone()));
                            let filtered = ListRuns {
                                workflow_name: Some(workflow.clone()),
                                ..ListRuns::default()
                            };
                            let listed = target.contract().list_runs(filtered).await.unwrap();
                            assert!(listed.data.contains(&run));
                        }
                        Err(StoreError::Limit(_)) => {
                            assert_eq!(count(target.contract()).await, before, "nothing stored");
                        }
                        Err(other) => panic!("untyped error: {other:?}"),
                    }
                });
                Ok(())
            })
            .unwrap();
    });
}

fn cursors_round_trip_or_are_refused_typed(backend: Backend) {
    with_store(backend, |runtime, store| {
        let strategy = (any::<i64>(), any::<u128>(), ".{0,40}");
        runner()
            .run(&strategy, |(micros, id, garbage)| {
                runtime.block_on(async {
                    if let Ok(parsed) = garbage.parse::<Cursor>() {
                        assert_eq!(parsed.to_string().parse::<Cursor>().unwrap(), parsed);
                    }
                    let Some(at) = chrono::DateTime::from_timestamp_micros(micros) else {
                        return;
                    };
                    let cursor = Cursor::new(at, Uuid::from_u128(id));
                    let in_range = limits::check_time(limits::Field::Cursor, at).is_ok();
                    match cursor.to_string().parse::<Cursor>() {
                        Ok(parsed) => {
                            assert!(in_range);
                            assert_eq!(parsed, cursor);
                        }
                        Err(StoreError::InvalidCursor { .. }) => assert!(!in_range),
                        Err(other) => panic!("untyped error: {other:?}"),
                    }
                    let page = ListRuns {
                        after: Some(cursor),
                        ..ListRuns::default()
                    };
                    match store.list_runs(page).await {
                        Ok(_) => assert!(in_range),
                        Err(StoreError::Limit(_)) => assert!(!in_range),
                        Err(other) => panic!("untyped error: {other:?}"),
                    }
                });
                Ok(())
            })
            .unwrap();
    });
}

/// The shrunk input of a case that once failed: Postgres keeps JSON numbers as `jsonb`
/// numerics and writes an integral float past 2^53 back as an integer, which decodes to the
/// same `f64`; SQLite keeps the text as written.
fn an_integral_float_past_2_53_reads_back_as_the_same_float(backend: Backend) {
    with_store(backend, |runtime, store| {
        runtime.block_on(async {
            let client = client(&store);
            let input = json!([{ "": [1.0640865737778498e17] }]);
            let run = client
                .start_by_name("props-echo", input.clone())
                .await
                .unwrap();
            let stored = run.run().await.unwrap().input.unwrap();
            assert!(support::same_json(&stored, &input), "{stored} != {input}");
            let float = |value: &Value| value[0][""][0].as_f64().unwrap();
            assert_eq!(float(&stored).to_bits(), float(&input).to_bits());
            match backend {
                Backend::Postgres => assert_eq!(stored, json!([{ "": [106408657377784980u64] }])),
                _ => assert_eq!(stored, input),
            }
        });
    });
}

mod postgres {
    use super::*;

    #[test]
    fn json_inputs() {
        json_inputs_are_refused_typed_or_stored_equal(Backend::Postgres);
    }

    #[test]
    fn an_integral_float_past_2_53() {
        an_integral_float_past_2_53_reads_back_as_the_same_float(Backend::Postgres);
    }

    #[test]
    fn names_keys_and_namespaces() {
        names_keys_and_namespaces_are_refused_typed_or_stored_equal(Backend::Postgres);
    }

    #[test]
    fn cursors() {
        cursors_round_trip_or_are_refused_typed(Backend::Postgres);
    }
}

mod sqlite {
    use super::*;

    #[test]
    fn json_inputs() {
        json_inputs_are_refused_typed_or_stored_equal(Backend::Sqlite);
    }

    #[test]
    fn an_integral_float_past_2_53() {
        an_integral_float_past_2_53_reads_back_as_the_same_float(Backend::Sqlite);
    }

    #[test]
    fn names_keys_and_namespaces() {
        names_keys_and_namespaces_are_refused_typed_or_stored_equal(Backend::Sqlite);
    }

    #[test]
    fn cursors() {
        cursors_round_trip_or_are_refused_typed(Backend::Sqlite);
    }
}
