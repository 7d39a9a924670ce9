//! End to end, concurrency keys derived from the input by the workflow definition (issue
//! #12), on both stores: `#[workflow(concurrency(key = ..., limit = ...))]` gives every run
//! its key however it starts (typed, JSON, as a child, from a schedule), the claim enforces
//! the derived limit, a key given with the start replaces it, and a key function that fails
//! or makes a key past the limits is a typed error with nothing stored.

use crate::support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, TestStore, client, worker};
use tasks::limits::Field;
use tasks::store::schedule::{CatchUp, NewSchedule};
use tasks::{
    ClientError, DeriveKeyError, LimitError, ListRuns, RunStatus, SharedStore, WorkflowContext,
    WorkflowError,
};
use tasks::{step, workflow};
use uuid::Uuid;

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
struct Export {
    probe: String,
    customer: String,
    millis: u64,
}

/// The key: the customer, borrowed from the input.
fn customer_of(export: &Export) -> &str {
    &export.customer
}

/// The stores of the running tests, by probe id (tests run in parallel in one process).
fn stores() -> &'static Mutex<HashMap<Uuid, SharedStore>> {
    static STORES: OnceLock<Mutex<HashMap<Uuid, SharedStore>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

/// What the runs of a test saw in the database when they started, by probe id: per
/// customer, the most running exports of that customer, and for each customer whether
/// another customer's export was running at the same time.
fn observed() -> &'static Mutex<HashMap<Uuid, Observed>> {
    static OBSERVED: OnceLock<Mutex<HashMap<Uuid, Observed>>> = OnceLock::new();
    OBSERVED.get_or_init(Default::default)
}

#[derive(Debug, Default, Clone)]
struct Observed {
    most_running: HashMap<String, usize>,
    alongside_others: HashMap<String, bool>,
}

#[step(name = "observe_export")]
async fn observe(export: &Export) -> Result<(), std::io::Error> {
    let Ok(probe) = export.probe.parse::<Uuid>() else {
        return Ok(()); // started by a schedule or a parent that observes nothing
    };
    let store = stores().lock().unwrap()[&probe].clone();
    let running = store
        .contract()
        .list_runs(ListRuns {
            statuses: vec![RunStatus::Running],
            workflow_name: Some("e2e-derived-export".into()),
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .map_err(std::io::Error::other)?;
    let customers: Vec<String> = running
        .data
        .iter()
        .filter_map(|run| run.input.as_ref()?["customer"].as_str().map(str::to_owned))
        .collect();
    let mine = customers.iter().filter(|c| **c == export.customer).count();
    let others = customers.len() > mine;
    let mut observed = observed().lock().unwrap();
    let entry = observed.entry(probe).or_default();
    let most = entry
        .most_running
        .entry(export.customer.clone())
        .or_default();
    *most = (*most).max(mine);
    *entry
        .alongside_others
        .entry(export.customer.clone())
        .or_default() |= others;
    Ok(())
}

#[step]
async fn build(export: &Export) -> Result<(), std::io::Error> {
    tokio::time::sleep(Duration::from_millis(export.millis)).await;
    Ok(())
}

/// At most one export per customer at once, however it was started.
#[workflow(
    name = "e2e-derived-export",
    concurrency(key = customer_of, limit = 1)
)]
async fn export(_ctx: WorkflowContext, input: Export) -> Result<(), WorkflowError> {
    observe(&input).await?;
    build(&input).await?;
    Ok(())
}

/// Starts an export as its child and returns the child's run id.
#[workflow(name = "e2e-derived-parent")]
async fn parent(ctx: WorkflowContext, input: Export) -> Result<String, WorkflowError> {
    let child = ctx.spawn_child::<export>(input).await?;
    ctx.join(&child).await?;
    Ok(child.run_id().to_string())
}

/// A key made of characters by code, repeated: a test can make it hold NUL, or be too
/// long, from an input that is neither; and a key function that panics.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Raw {
    codes: Vec<u32>,
    times: usize,
    panic: bool,
}

fn raw_key(raw: &Raw) -> String {
    assert!(!raw.panic, "no key for this input");
    raw.codes
        .iter()
        .filter_map(|code| char::from_u32(*code))
        .collect::<String>()
        .repeat(raw.times)
}

#[workflow(name = "e2e-derived-raw", concurrency(key = raw_key, limit = 2))]
async fn raw(_ctx: WorkflowContext, input: Raw) -> Result<(), WorkflowError> {
    let _ = input;
    Ok(())
}

fn probe(store: &TestStore) -> Uuid {
    let probe = Uuid::new_v4();
    stores().lock().unwrap().insert(probe, store.shared());
    probe
}

fn export_of(probe: Option<Uuid>, customer: &str, millis: u64) -> Export {
    Export {
        probe: probe.map(|p| p.to_string()).unwrap_or_default(),
        customer: customer.into(),
        millis,
    }
}

async fn runs_of(store: &TestStore, workflow: &str) -> Vec<tasks::WorkflowRun> {
    store
        .list_runs(ListRuns {
            workflow_name: Some(workflow.into()),
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
}

/// A typed start and a JSON start (as the CLI and the dashboard start runs) both store the
/// key the workflow derives, with its limit; a key given with the start replaces it, and
/// `without_concurrency_key` starts a run with none.
async fn every_start_gets_the_derived_key(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let typed = client
        .start::<export>(export_of(None, "acme", 0))
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(typed.id()).await,
        Some(("acme".into(), 1))
    );
    let generated = export::start(&client, export_of(None, "initech", 0))
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(generated.id()).await,
        Some(("initech".into(), 1))
    );
    let by_json = client
        .start_by_name(
            "e2e-derived-export",
            json!({ "probe": "", "customer": "globex", "millis": 0 }),
        )
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(by_json.id()).await,
        Some(("globex".into(), 1))
    );
    let overridden = client
        .start::<export>(export_of(None, "acme", 0))
        .concurrency_key("bulk-exports", 3)
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(overridden.id()).await,
        Some(("bulk-exports".into(), 3))
    );
    let json_overridden = client
        .start_by_name(
            "e2e-derived-export",
            json!({ "probe": "", "customer": "acme", "millis": 0 }),
        )
        .concurrency_key("bulk-exports", 3)
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(json_overridden.id()).await,
        Some(("bulk-exports".into(), 3))
    );
    let without = client
        .start::<export>(export_of(None, "acme", 0))
        .without_concurrency_key()
        .await
        .unwrap();
    assert_eq!(store.concurrency_of(without.id()).await, None);
    // And a workflow that derives nothing stores nothing.
    let plain = client
        .start::<parent>(export_of(None, "acme", 0))
        .await
        .unwrap();
    assert_eq!(store.concurrency_of(plain.id()).await, None);
}

/// With the derived limit of 1, two exports of one customer never run at once (checked from
/// the database at the start of each), while the other customer's exports run alongside.
async fn derived_limit_is_enforced(backend: Backend) {
    let store = backend.store().await;
    let probe = probe(&store);
    let client = client(&store);
    let mut ids = Vec::new();
    for _ in 0..6 {
        let handle = client
            .start::<export>(export_of(Some(probe), "acme", 150))
            .await
            .unwrap();
        ids.push(handle.id());
    }
    for _ in 0..2 {
        let handle = client
            .start_by_name(
                "e2e-derived-export",
                serde_json::to_value(export_of(Some(probe), "globex", 150)).unwrap(),
            )
            .await
            .unwrap();
        ids.push(handle.id());
    }
    let workers: Vec<_> = (0..2)
        .map(|_| worker(&store).concurrency(4).build().unwrap().spawn())
        .collect();
    for id in &ids {
        client
            .handle::<()>(*id)
            .result_within(Duration::from_secs(120))
            .await
            .unwrap();
    }
    for handle in workers {
        handle.shutdown().await;
    }
    let observed = observed().lock().unwrap()[&probe].clone();
    assert_eq!(observed.most_running["acme"], 1, "{observed:?}");
    assert_eq!(observed.most_running["globex"], 1, "{observed:?}");
    // acme is busy for at least 900 ms, one export after the other: globex's exports ran
    // while one of acme's was running, not after acme's backlog.
    assert!(observed.alongside_others["globex"], "{observed:?}");
}

/// A key function that makes a key with NUL, or one past the limit's bytes, is the limit
/// error a key given with the start would be; a key function that panics is a
/// `ClientError::ConcurrencyKey`, and the client goes on. Typed or JSON, nothing is stored.
async fn invalid_derived_keys_are_typed_errors(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let nul = Raw {
        codes: vec![97, 0, 98],
        times: 1,
        panic: false,
    };
    match client.start::<raw>(nul.clone()).await {
        Err(ClientError::Limit(LimitError::Nul { field, .. })) => {
            assert_eq!(field, Field::ConcurrencyKey)
        }
        other => panic!("expected a NUL limit error, got {other:?}"),
    }
    let too_long = Raw {
        codes: vec![107],
        times: tasks::limits::MAX_CONCURRENCY_KEY_BYTES + 1,
        panic: false,
    };
    match client
        .start_by_name("e2e-derived-raw", serde_json::to_value(&too_long).unwrap())
        .await
    {
        Err(ClientError::Limit(LimitError::TooLong { field, .. })) => {
            assert_eq!(field, Field::ConcurrencyKey)
        }
        other => panic!("expected a too-long limit error, got {other:?}"),
    }
    let panicking = Raw {
        codes: vec![97],
        times: 1,
        panic: true,
    };
    for attempt in [
        client.start::<raw>(panicking.clone()).await.map(|h| h.id()),
        client
            .start_by_name("e2e-derived-raw", serde_json::to_value(&panicking).unwrap())
            .await
            .map(|h| h.id()),
    ] {
        match attempt {
            Err(ClientError::ConcurrencyKey(error)) => {
                assert_eq!(error.workflow, "e2e-derived-raw");
                assert_eq!(error.expression, "raw_key");
                assert_eq!(
                    error.source,
                    DeriveKeyError::Panicked("no key for this input".into())
                );
                let message = error.to_string();
                assert!(message.contains("raw_key"), "{message}");
            }
            other => panic!("expected a concurrency key error, got {other:?}"),
        }
    }
    assert!(runs_of(&store, "e2e-derived-raw").await.is_empty());
    // An explicit key replaces the derivation, so the panicking one is never called.
    let given = client
        .start::<raw>(panicking)
        .concurrency_key("given", 1)
        .await
        .unwrap();
    assert_eq!(
        store.concurrency_of(given.id()).await,
        Some(("given".into(), 1))
    );
    // The client still starts runs with valid keys.
    let fine = Raw {
        codes: vec![107],
        times: 3,
        panic: false,
    };
    let handle = client.start::<raw>(fine).await.unwrap();
    assert_eq!(
        store.concurrency_of(handle.id()).await,
        Some(("kkk".into(), 2))
    );
}

/// A child started by a parent that derives nothing gets the key its own workflow derives.
async fn a_child_gets_its_derived_key(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let handle = client
        .start::<parent>(export_of(None, "umbrella", 0))
        .await
        .unwrap();
    let worker = worker(&store).build().unwrap().spawn();
    let child_id: String = handle.result_within(Duration::from_secs(60)).await.unwrap();
    worker.shutdown().await;
    let child_id: Uuid = child_id.parse().unwrap();
    assert_eq!(
        store.concurrency_of(child_id).await,
        Some(("umbrella".into(), 1))
    );
    assert_eq!(store.concurrency_of(handle.id()).await, None);
}

/// The runs a schedule fires get the key their workflow derives from the schedule's input;
/// a schedule whose input the key function fails on is refused when it is created.
async fn scheduled_runs_get_the_derived_key(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let refused = client
        .create_schedule(NewSchedule {
            name: "raw-every-second".into(),
            workflow_name: "e2e-derived-raw".into(),
            version: None,
            cron: "* * * * * *".into(),
            timezone: "UTC".into(),
            input: json!({ "codes": [97], "times": 1, "panic": true }),
            catch_up: CatchUp::Latest,
        })
        .await;
    assert!(
        matches!(refused, Err(ClientError::ConcurrencyKey(_))),
        "{refused:?}"
    );
    assert!(
        client
            .get_schedule("raw-every-second")
            .await
            .unwrap()
            .is_none()
    );
    client
        .create_schedule(NewSchedule {
            name: "export-every-second".into(),
            workflow_name: "e2e-derived-export".into(),
            version: None,
            cron: "* * * * * *".into(),
            timezone: "UTC".into(),
            input: serde_json::to_value(export_of(None, "nightly", 0)).unwrap(),
            catch_up: CatchUp::Latest,
        })
        .await
        .unwrap();
    let worker = worker(&store)
        .schedule_tick(Some(Duration::from_millis(50)))
        .build()
        .unwrap()
        .spawn();
    let fired = eventually!(Duration::from_secs(60), {
        runs_of(&store, "e2e-derived-export")
            .await
            .into_iter()
            .next()
    });
    worker.shutdown().await;
    assert_eq!(
        store.concurrency_of(fired.id).await,
        Some(("nightly".into(), 1))
    );
}

every_store! {
    derived_limit_is_enforced,
    ;
    sql:
    a_child_gets_its_derived_key,
    every_start_gets_the_derived_key,
    invalid_derived_keys_are_typed_errors,
    scheduled_runs_get_the_derived_key,
}
