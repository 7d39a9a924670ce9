//! Creating and fetching runs: fields, defaults and idempotency keys.

use std::sync::Arc;
use std::time::Duration;
use tasks_core::RunStore;

use chrono::Utc;
use serde_json::json;
use tasks_core::{CreateRun, ListRuns, RetryPolicy, RunStatus, Store, WorkflowRun};
use tokio::sync::Barrier;
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A run created with every field set reads back with exactly those values.
pub async fn create_run_with_all_fields(setup: impl Setup) {
    let store = setup.store().await;
    let in_a_year = Utc::now() + chrono::Duration::days(365);
    let params = CreateRun {
        workflow_name: unique_name(),
        version: Some(Uuid::new_v4().to_string()),
        input: Some(json!({ "key": "val" })),
        config: json!({ "key": "val" }),
        context: Some(json!({ "key": "val" })),
        available_at: Some(in_a_year),
        delay: None,
        deadline_at: Some(in_a_year),
        retry_policy: None,
        idempotency_key: Some(Uuid::new_v4().to_string()),
        idempotency_scope: tasks_core::IdempotencyScope::ForEver,
        priority: 3,
        concurrency: Some(tasks_core::Concurrency::new("all-fields", 2)),
        queue: Some("all-fields/queue".to_owned()),
        trace_context: Some(
            tasks_core::TraceContext::new(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Some("congo=t61rcWkgMzE".to_owned()),
            )
            .unwrap(),
        ),
    };
    let created = store.create_run(params.clone()).await.unwrap();

    assert_near_now(Some(created.created_at), "created_at");
    assert_near_now(Some(created.updated_at), "updated_at");
    let expected = WorkflowRun {
        namespace: store.namespace().to_owned(),
        id: created.id,
        workflow_name: params.workflow_name,
        version: params.version,
        status: RunStatus::Pending,
        idempotency_key: params.idempotency_key,
        config: json!({ "key": "val" }),
        context: Some(json!({ "key": "val" })),
        input: Some(json!({ "key": "val" })),
        output: None,
        error: None,
        attempts: 0,
        parent_step_attempt_namespace: None,
        parent_step_attempt_id: None,
        worker_id: None,
        claim_epoch: 0,
        available_at: Some(micros(in_a_year)),
        deadline_at: Some(micros(in_a_year)),
        started_at: None,
        finished_at: None,
        created_at: created.created_at,
        updated_at: created.updated_at,
        retried_at: None,
        forked_from_run_id: None,
        forked_from_step: None,
        parent_run_id: None,
        cancel_with_parent: true,
        trace_context: params.trace_context.clone(),
        queue: "all-fields/queue".to_owned(),
        lineage_root_id: None,
        continued_from_run_id: None,
        continued_as_run_id: None,
    };
    assert_eq!(created, expected);
    assert_ne!(created.id, Uuid::nil());
    assert_eq!(store.get_run(created.id).await.unwrap(), Some(expected));
    // Not available for a year: nothing to claim.
    assert_eq!(
        store.claim_run("w", Duration::from_secs(1)).await.unwrap(),
        None
    );
}

/// A run created with only a workflow name gets defaults, and is available at once.
pub async fn create_run_with_minimal_fields(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let created = store
        .create_run(CreateRun::new(name.clone()))
        .await
        .unwrap();

    assert_eq!(created.namespace, store.namespace());
    assert_eq!(created.workflow_name, name);
    assert_eq!(created.status, RunStatus::Pending);
    assert_eq!(created.version, None);
    assert_eq!(created.idempotency_key, None);
    assert_eq!(created.input, None);
    assert_eq!(created.context, None);
    assert_eq!(created.config, json!({}));
    assert_eq!(created.output, None);
    assert_eq!(created.error, None);
    assert_eq!(created.attempts, 0);
    assert_eq!(created.worker_id, None);
    assert_eq!(created.deadline_at, None);
    assert_eq!(created.started_at, None);
    assert_eq!(created.finished_at, None);
    assert_near_now(created.available_at, "available_at (defaults to now)");

    let claimed = store.claim_run("w", Duration::from_secs(60)).await.unwrap();
    assert_eq!(claimed.map(|run| run.id), Some(created.id));
}

/// The deadline is kept exactly (to the microsecond).
pub async fn create_run_keeps_deadline(setup: impl Setup) {
    let store = setup.store().await;
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    let created = store
        .create_run(CreateRun {
            deadline_at: Some(deadline),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_eq!(created.deadline_at, Some(micros(deadline)));
    let fetched = store.get_run(created.id).await.unwrap().unwrap();
    assert_eq!(fetched.deadline_at, Some(micros(deadline)));
}

/// The retry policy is stored in `config.retryPolicy`, next to the caller's config.
pub async fn create_run_stores_retry_policy_in_config(setup: impl Setup) {
    let store = setup.store().await;
    let policy = RetryPolicy::new(5)
        .with_initial_interval(Duration::from_millis(250))
        .with_backoff_coefficient(3.0)
        .with_max_interval(Duration::from_secs(7));
    let created = store
        .create_run(CreateRun {
            config: json!({ "key": "val" }),
            retry_policy: Some(policy),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_eq!(created.config["key"], json!("val"));
    let stored: RetryPolicy = serde_json::from_value(created.config["retryPolicy"].clone())
        .expect("config.retryPolicy should be a retry policy");
    assert_eq!(stored, policy);
    let fetched = store.get_run(created.id).await.unwrap().unwrap();
    assert_eq!(fetched.config, created.config);
}

/// Fetching an id that was never created yields `None`, not an error.
pub async fn get_run_of_unknown_id_is_none(setup: impl Setup) {
    let store = setup.store().await;
    create_pending(&store).await;
    assert_eq!(store.get_run(Uuid::new_v4()).await.unwrap(), None);
}

/// A second create with the same workflow name and key returns the first run unchanged.
pub async fn idempotency_key_returns_existing_run(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let key = Uuid::new_v4().to_string();
    let create = |n: i32| CreateRun {
        input: Some(json!({ "n": n })),
        idempotency_key: Some(key.clone()),
        ..CreateRun::new(name.clone())
    };
    let first = store.create_run(create(1)).await.unwrap();
    let second = store.create_run(create(2)).await.unwrap();

    assert_eq!(second.id, first.id);
    assert_eq!(second.input, Some(json!({ "n": 1 })));
    assert_eq!(second, first);
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&listed.data), vec![first.id]);
}

/// The key deduplicates per workflow name; runs without a key are never deduplicated.
pub async fn idempotency_key_is_scoped_to_workflow_name(setup: impl Setup) {
    let store = setup.store().await;
    let key = Some(Uuid::new_v4().to_string());
    let a = store
        .create_run(CreateRun {
            idempotency_key: key.clone(),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let b = store
        .create_run(CreateRun {
            idempotency_key: key.clone(),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(b.idempotency_key, key);

    let name = unique_name();
    let c = store
        .create_run(CreateRun::new(name.clone()))
        .await
        .unwrap();
    let d = store.create_run(CreateRun::new(name)).await.unwrap();
    assert_ne!(c.id, d.id);

    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&listed.data), vec![a.id, b.id, c.id, d.id]);
}

/// Many concurrent creates with one key all return the same run, and only one row exists.
pub async fn idempotency_race_creates_one_run(setup: impl Setup) {
    const CALLERS: usize = 24;
    let store = Arc::new(setup.store().await);
    let name = unique_name();
    let key = Uuid::new_v4().to_string();
    let barrier = Arc::new(Barrier::new(CALLERS));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            let params = CreateRun {
                input: Some(json!({ "caller": i })),
                idempotency_key: Some(key.clone()),
                ..CreateRun::new(name.clone())
            };
            tokio::spawn(async move {
                barrier.wait().await;
                store.create_or_get_run(params).await
            })
        })
        .collect();
    let mut created = Vec::new();
    let mut creators = 0;
    for task in tasks {
        let outcome = task.await.expect("task panicked").expect("create_run");
        creators += usize::from(outcome.created);
        created.push(outcome.run);
    }
    assert_eq!(creators, 1, "exactly one create says it created the run");

    let first = created[0].id;
    assert!(
        created.iter().all(|run| run.id == first),
        "concurrent creates returned different runs: {:?}",
        ids(&created)
    );
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&listed.data), vec![first]);
}

/// A delayed start is measured from the store's clock: `available_at` is `created_at` plus
/// the delay, and the run is not claimable before then.
pub async fn create_run_with_delay_starts_later(setup: impl Setup) {
    let store = setup.store().await;
    let run = store
        .create_run(CreateRun {
            delay: Some(std::time::Duration::from_secs(30)),
            ..CreateRun::new(unique_name())
        })
        .await
        .unwrap();
    let available_at = run.available_at.expect("available_at is set");
    let offset = ms_between(run.created_at, available_at);
    assert!(
        (29_990..=30_010).contains(&offset),
        "available {offset} ms after creation"
    );
    assert!(
        store
            .claim_run(&new_worker(), LONG_LEASE)
            .await
            .unwrap()
            .is_none()
    );
}

/// `create_or_get_run` says whether it created the run: `true` for a new run, `false` for
/// the run that holds the idempotency key, which it returns unchanged.
pub async fn create_or_get_run_says_whether_it_created(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let keyed = || CreateRun {
        idempotency_key: Some("k-1".into()),
        input: Some(json!({ "n": 1 })),
        ..CreateRun::new(name.clone())
    };
    let first = store.create_or_get_run(keyed()).await.unwrap();
    assert!(first.created);
    let again = store
        .create_or_get_run(CreateRun {
            input: Some(json!({ "n": 2 })),
            ..keyed()
        })
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.run.id, first.run.id);
    assert_eq!(again.run.input, Some(json!({ "n": 1 })));
    // Without a key, every create creates.
    let plain = store
        .create_or_get_run(CreateRun::new(name.clone()))
        .await
        .unwrap();
    assert!(plain.created);
    assert_ne!(plain.run.id, first.run.id);
    // `create_run` returns the same runs.
    assert_eq!(store.create_run(keyed()).await.unwrap().id, first.run.id);
}
