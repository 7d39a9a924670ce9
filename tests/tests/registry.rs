//! Link-time registration, versions, schemas and input validation.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, client, worker};
use tasks::{
    ClientError, ListRuns, Registry, RegistryError, SourceLocation, Workflow, WorkflowContext,
    WorkflowDefinition, WorkflowError, workflow,
};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Address {
    street: String,
    /// Five digits.
    #[schemars(regex(pattern = r"^\d{5}$"))]
    zip: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Speed {
    Standard,
    Express,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Shipment {
    #[schemars(range(min = 1, max = 100))]
    quantity: u32,
    speed: Speed,
    address: Address,
}

/// Ships an order (first version).
#[workflow(name = "reg-ship", version = "1")]
async fn ship_v1(_ctx: WorkflowContext, input: Shipment) -> Result<String, WorkflowError> {
    Ok(format!("v1 shipped {}", input.quantity))
}

/// Ships an order (second version).
///
/// Now with more words.
#[workflow(
    name = "reg-ship",
    version = "2",
    retry(max_attempts = 7, initial_interval = "2s")
)]
async fn ship_v2(ctx: WorkflowContext, input: Shipment) -> Result<String, WorkflowError> {
    Ok(format!(
        "v2 shipped {} (version {:?})",
        input.quantity,
        ctx.version()
    ))
}

#[workflow]
async fn reg_unversioned(_ctx: WorkflowContext) -> Result<(), WorkflowError> {
    Ok(())
}

fn valid_shipment() -> serde_json::Value {
    json!({ "quantity": 3, "speed": "express", "address": { "street": "Main St 1", "zip": "12345" } })
}

#[test]
fn workflows_register_themselves_at_link_time() {
    let registry = Registry::from_inventory().unwrap();
    let v1 = registry.get("reg-ship", Some("1")).expect("v1 registered");
    let v2 = registry.get("reg-ship", Some("2")).expect("v2 registered");
    assert!(std::ptr::eq(v1, ship_v1::definition()));
    assert!(std::ptr::eq(v2, ship_v2::definition()));
    assert!(registry.get("reg-ship", None).is_none());
    assert!(std::ptr::eq(registry.latest("reg-ship").unwrap(), v2));

    // The name defaults to the function name; no version.
    let plain = registry.get("reg_unversioned", None).expect("default name");
    assert_eq!(plain.version, None);
    assert_eq!(plain.description, None);

    assert_eq!(v1.description, Some("Ships an order (first version)."));
    assert_eq!(
        v2.description,
        Some("Ships an order (second version).\n\nNow with more words.")
    );
    let policy = v2.retry_policy.unwrap();
    assert_eq!(policy.max_attempts, 7);
    assert_eq!(policy.initial_interval, Duration::from_secs(2));
    assert_eq!(v1.retry_policy, None);
    assert!(v1.location.file.ends_with("registry.rs"), "{}", v1.location);
    assert!(v1.location.line > 0);
}

#[test]
fn schemas_come_from_schemars() {
    let input = (ship_v1::definition().input_schema)();
    let properties = input["properties"].as_object().unwrap();
    assert_eq!(properties.len(), 3);
    assert_eq!(properties["quantity"]["maximum"], 100);
    let required: Vec<&str> = input["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, vec!["quantity", "speed", "address"]);
    let output = (ship_v1::definition().output_schema)();
    assert_eq!(output["type"], "string");
}

#[test]
fn validation_reports_every_violation_with_its_path() {
    let registry = Registry::from_inventory().unwrap();
    assert_eq!(
        registry.validate_input("reg-ship", Some("1"), &valid_shipment()),
        Ok(())
    );

    let bad =
        json!({ "quantity": 0, "speed": "teleport", "address": { "street": 5, "zip": "12" } });
    let error = registry
        .validate_input("reg-ship", Some("1"), &bad)
        .unwrap_err();
    let mut paths: Vec<&str> = error.violations.iter().map(|v| v.path.as_str()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["/address/street", "/address/zip", "/quantity", "/speed"],
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with("invalid input for workflow reg-ship@1: "),
        "{message}"
    );
    assert!(
        message.contains("at /quantity: 0 is less than the minimum of 1"),
        "{message}"
    );

    let missing = registry
        .validate_input("reg-ship", Some("1"), &json!({ "quantity": 2 }))
        .unwrap_err();
    assert_eq!(missing.violations.len(), 2, "{missing}");
    assert!(missing.violations.iter().all(|v| v.path.is_empty()));
    assert!(
        missing
            .to_string()
            .contains("\"speed\" is a required property"),
        "{missing}"
    );
}

#[test]
fn duplicate_name_and_version_are_rejected_with_both_locations() {
    let original = ship_v1::definition();
    let copy: &'static WorkflowDefinition = Box::leak(Box::new(WorkflowDefinition {
        location: SourceLocation {
            file: "elsewhere.rs",
            line: 99,
            column: 1,
            module_path: "other::module",
        },
        ..*original
    }));
    let mut registry = Registry::new();
    registry.register::<ship_v1>().unwrap();
    registry
        .register::<ship_v1>()
        .expect("registering the same definition twice is a no-op");
    let error = registry.add(copy).unwrap_err();
    let message = error.to_string();
    match error {
        RegistryError::DuplicateWorkflow { name, version, .. } => {
            assert_eq!((name, version), ("reg-ship", Some("1")));
        }
        other => panic!("expected a duplicate workflow, got {other:?}"),
    }
    assert!(message.contains("registry.rs"), "{message}");
    assert!(message.contains("elsewhere.rs:99:1"), "{message}");
}

#[test]
fn a_queue_outside_the_allowed_characters_is_rejected_by_hand() {
    let original = ship_v1::definition();
    let bad: &'static WorkflowDefinition = Box::leak(Box::new(WorkflowDefinition {
        queue: Some("e mails"),
        ..*original
    }));
    match Registry::new().add(bad).unwrap_err() {
        RegistryError::InvalidName { what, name, .. } => {
            assert_eq!((what, name), ("queue", "e mails"));
        }
        other => panic!("expected an invalid queue, got {other:?}"),
    }
    let good: &'static WorkflowDefinition = Box::leak(Box::new(WorkflowDefinition {
        queue: Some("emails/eu"),
        ..*original
    }));
    assert!(Registry::new().add(good).is_ok());
}

#[test]
fn names_longer_than_the_stores_hold_are_rejected_by_hand() {
    let original = ship_v1::definition();
    let long = "n".repeat(tasks::limits::MAX_WORKFLOW_NAME_BYTES + 1);
    let at_limit = "n".repeat(tasks::limits::MAX_WORKFLOW_NAME_BYTES);
    let version = "v".repeat(tasks::limits::MAX_VERSION_BYTES + 1);
    for (name, version, ok) in [
        (long.as_str(), Some("1"), false),
        ("reg-ship", Some(version.as_str()), false),
        (at_limit.as_str(), Some("1"), true),
    ] {
        let definition: &'static WorkflowDefinition = Box::leak(Box::new(WorkflowDefinition {
            name: Box::leak(name.to_owned().into_boxed_str()),
            version: version.map(|v| &*Box::leak(v.to_owned().into_boxed_str())),
            ..*original
        }));
        match Registry::new().add(definition) {
            Ok(_) => assert!(ok, "{} bytes were accepted", name.len()),
            Err(error) => {
                assert!(!ok, "{error}");
                assert!(
                    matches!(error, RegistryError::InvalidName { .. }),
                    "{error:?}"
                );
                assert!(error.to_string().contains("bytes; the limit is"), "{error}");
            }
        }
    }
}

#[test]
fn names_outside_the_allowed_characters_are_rejected_by_hand_too() {
    let original = ship_v1::definition();
    for (name, version) in [
        (" reg-ship", Some("1")),
        ("reg-ship", Some("1\n")),
        ("a:b", None),
    ] {
        let bad: &'static WorkflowDefinition = Box::leak(Box::new(WorkflowDefinition {
            name: Box::leak(name.to_owned().into_boxed_str()),
            version,
            ..*original
        }));
        let error = Registry::new().add(bad).unwrap_err();
        assert!(
            matches!(error, RegistryError::InvalidName { .. }),
            "{name:?} {version:?}: {error:?}"
        );
        assert!(error.to_string().contains("is not a valid name"), "{error}");
    }
}

async fn invalid_input_is_rejected_before_anything_is_stored(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);

    match client
        .start_by_name("reg-ship", json!({ "quantity": "many" }))
        .await
    {
        Err(ClientError::InvalidInput(error)) => {
            assert_eq!(error.workflow, "reg-ship@2", "the latest version validates");
            assert!(
                error.violations.iter().any(|v| v.path == "/quantity"),
                "{error}"
            );
        }
        other => panic!("expected invalid input, got {other:?}"),
    }
    match client.start_by_name("no-such-workflow", json!({})).await {
        Err(ClientError::UnknownWorkflow { name, version }) => {
            assert_eq!((name.as_str(), version), ("no-such-workflow", None));
        }
        other => panic!("expected an unknown workflow, got {other:?}"),
    }
    match client
        .start_by_name("reg-ship", valid_shipment())
        .version("9")
        .await
    {
        Err(ClientError::UnknownWorkflow { version, .. }) => {
            assert_eq!(version.as_deref(), Some("9"))
        }
        other => panic!("expected an unknown version, got {other:?}"),
    }
    let stored = store.list_runs(ListRuns::default()).await.unwrap();
    assert!(
        stored.data.is_empty(),
        "nothing was stored: {:?}",
        stored.data
    );
}

async fn each_run_executes_with_the_version_it_was_started_with(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();

    let latest = client
        .start_by_name("reg-ship", valid_shipment())
        .await
        .unwrap();
    let pinned = client
        .start_by_name("reg-ship", valid_shipment())
        .version("1")
        .await
        .unwrap();
    let typed = ship_v1::start(&client, serde_json::from_value(valid_shipment()).unwrap())
        .await
        .unwrap();

    assert_eq!(
        latest.result_within(Duration::from_secs(20)).await.unwrap(),
        json!("v2 shipped 3 (version Some(\"2\"))")
    );
    assert_eq!(
        pinned.result_within(Duration::from_secs(20)).await.unwrap(),
        json!("v1 shipped 3")
    );
    assert_eq!(
        typed.result_within(Duration::from_secs(20)).await.unwrap(),
        "v1 shipped 3"
    );
    assert_eq!(latest.run().await.unwrap().version.as_deref(), Some("2"));
    assert_eq!(pinned.run().await.unwrap().version.as_deref(), Some("1"));
    // The workflow's retry policy travels with the run.
    assert_eq!(
        latest.run().await.unwrap().config["retryPolicy"]["maxAttempts"],
        7
    );
    worker.shutdown().await;
}

async fn an_explicit_registry_is_the_fallback_to_link_time_registration(backend: Backend) {
    let store = backend.store().await;
    let mut registry = Registry::new();
    registry.register::<ship_v1>().unwrap();
    assert_eq!(registry.len(), 1);
    let worker = worker(&store).registry(registry).build().unwrap();
    assert!(worker.registry().get("reg-ship", Some("2")).is_none());
    let handle = worker.spawn();
    let client = client(&store);
    let run = ship_v1::start(&client, serde_json::from_value(valid_shipment()).unwrap())
        .await
        .unwrap();
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        "v1 shipped 3"
    );
    assert_eq!(store.namespace(), run.run().await.unwrap().namespace);
    handle.shutdown().await;
}

async fn a_workflow_without_input_takes_null_or_an_empty_object(backend: Backend) {
    let store = backend.store().await;
    let handle = worker(&store).build().unwrap().spawn();
    let client = client(&store);
    for input in [json!(null), json!({})] {
        let run = client
            .start_by_name("reg_unversioned", input.clone())
            .await
            .unwrap_or_else(|error| panic!("{input}: {error}"));
        run.result_within(Duration::from_secs(20)).await.unwrap();
    }
    // Anything else is still refused, with nothing stored.
    assert!(matches!(
        client
            .start_by_name("reg_unversioned", json!({ "a": 1 }))
            .await,
        Err(ClientError::InvalidInput(_))
    ));
    let typed = reg_unversioned::start(&client, ()).await.unwrap();
    typed.result_within(Duration::from_secs(20)).await.unwrap();
    handle.shutdown().await;
}

every_store!(
    a_workflow_without_input_takes_null_or_an_empty_object,
    invalid_input_is_rejected_before_anything_is_stored,
    each_run_executes_with_the_version_it_was_started_with,
    an_explicit_registry_is_the_fallback_to_link_time_registration,
);
