//! The limits every store enforces (`tasks_core::limits`): values past them are refused with
//! [`StoreError::Limit`] before anything is written, values at them are stored and read
//! back equal.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tasks_core::limits::{self, Field};
use tasks_core::{
    CreateRun, CreateStepAttempt, Cursor, FailRun, ListRuns, ListStepAttempts, RecordStepAttempt,
    RetryPolicy, RunStatus, StepKind, StepStatus, Store, StoreError,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// `1` wrapped in `depth` arrays: nested exactly `depth` levels deep.
pub(crate) fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// Asserts that `result` is a [`StoreError::Limit`] about `field`.
#[track_caller]
fn assert_limit<T: std::fmt::Debug>(result: Result<T, StoreError>, field: Field) {
    match result {
        Err(StoreError::Limit(error)) => assert_eq!(error.field(), field, "{error}"),
        other => panic!("expected a limit error about {field}, got {other:?}"),
    }
}

/// How many runs the store's namespace lists (and that listing still works).
async fn count_runs(store: &impl Store) -> usize {
    store
        .list_runs(ListRuns::default())
        .await
        .expect("the namespace still lists")
        .data
        .len()
}

/// A run of a fresh workflow with `edit` applied.
fn create(edit: impl FnOnce(&mut CreateRun)) -> CreateRun {
    let mut params = CreateRun::new(unique_name());
    edit(&mut params);
    params
}

/// Every value past a limit is refused with a typed error naming it, and nothing is stored.
pub async fn create_run_refuses_values_past_the_limits(setup: impl Setup) {
    let store = setup.store().await;
    let far = DateTime::<Utc>::MAX_UTC;
    let cases: Vec<(CreateRun, Field)> = vec![
        (
            create(|p| p.workflow_name = "w\0".into()),
            Field::WorkflowName,
        ),
        (
            create(|p| p.workflow_name = "w".repeat(limits::MAX_WORKFLOW_NAME_BYTES + 1)),
            Field::WorkflowName,
        ),
        (create(|p| p.version = Some("1\0".into())), Field::Version),
        (
            create(|p| p.idempotency_key = Some("k".repeat(1 << 20))),
            Field::IdempotencyKey,
        ),
        (
            create(|p| p.idempotency_key = Some("k\0".into())),
            Field::IdempotencyKey,
        ),
        (
            create(|p| p.input = Some(json!({ "text": "a\u{0}b" }))),
            Field::Input,
        ),
        (
            create(|p| p.input = Some(json!({ "k\u{0}": 1 }))),
            Field::Input,
        ),
        (
            create(|p| p.input = Some(nested(limits::MAX_JSON_DEPTH + 1))),
            Field::Input,
        ),
        (create(|p| p.input = Some(nested(128))), Field::Input),
        (
            create(|p| p.input = Some(json!("x".repeat(limits::MAX_PAYLOAD_BYTES)))),
            Field::Input,
        ),
        (
            create(|p| p.context = Some(nested(limits::MAX_JSON_DEPTH + 1))),
            Field::Context,
        ),
        (
            create(|p| p.context = Some(json!(["\u{0}"]))),
            Field::Context,
        ),
        (
            create(|p| p.config = json!({ "c": "\u{0}" })),
            Field::Config,
        ),
        (create(|p| p.available_at = Some(far)), Field::AvailableAt),
        (
            create(|p| p.deadline_at = Some(DateTime::<Utc>::MIN_UTC)),
            Field::Deadline,
        ),
        (
            create(|p| p.delay = Some(Duration::from_secs(u64::MAX))),
            Field::Delay,
        ),
        (
            create(|p| {
                p.retry_policy =
                    Some(RetryPolicy::new(3).with_max_interval(Duration::from_secs(u64::MAX)))
            }),
            Field::RetryInterval,
        ),
        (
            create(|p| {
                p.retry_policy = Some(RetryPolicy::new(3).with_backoff_coefficient(f64::NAN))
            }),
            Field::BackoffCoefficient,
        ),
    ];
    for (params, field) in cases {
        assert_limit(store.create_run(params).await, field);
    }
    assert_eq!(count_runs(&store).await, 0, "nothing was stored");

    // A value nested far deeper than the decoder could read: refused without recursing.
    let deep = nested(10_000);
    let params = create(|p| p.input = Some(deep));
    let result = store.create_run(params).await;
    assert_limit(result, Field::Input);
    assert_eq!(count_runs(&store).await, 0, "nothing was stored");
}

/// Values exactly at the limits are stored, and read back equal through every read.
pub async fn create_run_accepts_values_at_the_limits(setup: impl Setup) {
    let store = setup.store().await;
    let params = CreateRun {
        workflow_name: "w".repeat(limits::MAX_WORKFLOW_NAME_BYTES),
        version: Some("v".repeat(limits::MAX_VERSION_BYTES)),
        input: Some(nested(limits::MAX_JSON_DEPTH)),
        context: Some(json!({ "deep": nested(limits::MAX_JSON_DEPTH - 1) })),
        config: json!({ "deep": nested(limits::MAX_JSON_DEPTH - 1) }),
        idempotency_key: Some("k".repeat(limits::MAX_IDEMPOTENCY_KEY_BYTES)),
        available_at: Some(limits::EARLIEST),
        deadline_at: Some(limits::LATEST),
        ..CreateRun::default()
    };
    let created = store.create_run(params.clone()).await.unwrap();
    assert_eq!(created.input, params.input);
    assert_eq!(created.context, params.context);
    assert_eq!(created.idempotency_key, params.idempotency_key);
    assert_eq!(created.available_at, Some(limits::EARLIEST));
    assert_eq!(created.deadline_at, Some(limits::LATEST));
    let read = store.get_run(created.id).await.unwrap().unwrap();
    assert_eq!(read, created);
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(listed.data, vec![created.clone()]);
    // The deadline is far away; the run is claimable and its batch decodes.
    let claimed = store
        .claim_runs(&new_worker(), LONG_LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].run.input, params.input);
}

/// Listing filters and cursors past the limits are refused; the namespace still lists.
pub async fn list_runs_refuses_hostile_filters_and_cursors(setup: impl Setup) {
    let store = setup.store().await;
    store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    let far = DateTime::<Utc>::MAX_UTC;
    let early = DateTime::<Utc>::MIN_UTC;
    let cases: Vec<(ListRuns, Field)> = vec![
        (
            ListRuns {
                workflow_name: Some("a\0".into()),
                ..ListRuns::default()
            },
            Field::WorkflowNameFilter,
        ),
        (
            ListRuns {
                workflow_name: Some("a".repeat(limits::MAX_WORKFLOW_NAME_BYTES + 1)),
                ..ListRuns::default()
            },
            Field::WorkflowNameFilter,
        ),
        (
            ListRuns {
                created_after: Some(early),
                ..ListRuns::default()
            },
            Field::CreatedAfter,
        ),
        (
            ListRuns {
                created_before: Some(far),
                ..ListRuns::default()
            },
            Field::CreatedBefore,
        ),
        (
            ListRuns {
                after: Some(Cursor::new(far, Uuid::max())),
                ..ListRuns::default()
            },
            Field::Cursor,
        ),
        (
            ListRuns {
                before: Some(Cursor::new(early, Uuid::nil())),
                ..ListRuns::default()
            },
            Field::Cursor,
        ),
    ];
    for (params, field) in cases {
        assert_limit(store.list_runs(params).await, field);
    }
    let steps = ListStepAttempts {
        after: Some(Cursor::new(far, Uuid::nil())),
        ..ListStepAttempts::new(Uuid::new_v4())
    };
    assert_limit(store.list_step_attempts(steps).await, Field::Cursor);
    // Filters at the edges of the accepted range are fine.
    let edges = ListRuns {
        created_after: Some(limits::EARLIEST),
        created_before: Some(limits::LATEST),
        after: Some(Cursor::new(limits::EARLIEST, Uuid::nil())),
        ..ListRuns::default()
    };
    assert_eq!(store.list_runs(edges).await.unwrap().data.len(), 1);
    assert_eq!(count_runs(&store).await, 1);
}

/// A namespace with NUL, or too long, is refused when the store is scoped to it, so that no
/// call (by id or not) ever hands it to the database; the longest accepted one works.
pub async fn hostile_namespaces_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    for namespace in [
        format!("{}\0", store.namespace()),
        "\0".to_owned(),
        "n".repeat(limits::MAX_NAMESPACE_BYTES + 1),
    ] {
        match store.scoped(&namespace) {
            Err(error) => assert_eq!(error.field(), Field::Namespace, "{error}"),
            Ok(scoped) => panic!(
                "a store was scoped to the namespace {:?}",
                scoped.namespace()
            ),
        }
    }
    let longest = format!(
        "{}{}",
        store.namespace(),
        "n".repeat(limits::MAX_NAMESPACE_BYTES - store.namespace().len())
    );
    let scoped = store.scoped(&longest).unwrap();
    assert_eq!(scoped.namespace(), longest);
    let run = scoped
        .contract()
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    assert_eq!(
        scoped
            .contract()
            .get_run(run.id)
            .await
            .unwrap()
            .unwrap()
            .namespace,
        longest
    );
    assert_eq!(
        scoped
            .contract()
            .lifecycle()
            .unwrap()
            .cancel_run(run.id)
            .await
            .unwrap()
            .status,
        RunStatus::Canceled
    );
    assert_eq!(
        count_runs(&store).await,
        0,
        "nothing in the store's own namespace"
    );
}

/// Worker-side writes past the limits are refused before anything is written: the run
/// keeps running, with no attempt recorded, and stays readable.
pub async fn worker_writes_past_the_limits_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    let worker = new_worker();
    let created = store
        .create_run(CreateRun::new(unique_name()))
        .await
        .unwrap();
    let huge = Duration::from_secs(u64::MAX);

    assert_limit(store.claim_runs(&worker, huge, 1).await, Field::Lease);
    assert_limit(
        store.claim_runs("w\0", LONG_LEASE, 1).await,
        Field::WorkerId,
    );
    let run = store.claim_run(&worker, LONG_LEASE).await.unwrap().unwrap();
    assert_eq!(run.id, created.id);
    let held = holder(&run);

    let record = |edit: fn(&mut RecordStepAttempt)| {
        let mut params = RecordStepAttempt {
            id: Uuid::now_v7(),
            run_id: run.id,
            holder: held.clone(),
            step_name: "step".into(),
            kind: StepKind::Function,
            config: json!({}),
            status: StepStatus::Completed,
            output: Some(json!(1)),
            error: None,
            args: None,
            elapsed: Duration::from_millis(1),
        };
        edit(&mut params);
        params
    };
    let cases: Vec<(RecordStepAttempt, Field)> = vec![
        (
            record(|p| p.output = Some(json!("\u{0}"))),
            Field::StepOutput,
        ),
        (
            record(|p| p.output = Some(nested(limits::MAX_JSON_DEPTH + 1))),
            Field::StepOutput,
        ),
        (record(|p| p.step_name = "s\0".into()), Field::StepName),
        (
            record(|p| p.step_name = "s".repeat(limits::MAX_STEP_NAME_BYTES + 1)),
            Field::StepName,
        ),
        (
            record(|p| p.elapsed = Duration::from_secs(u64::MAX)),
            Field::Elapsed,
        ),
        (
            record(|p| {
                p.status = StepStatus::Failed;
                p.output = None;
                p.error = Some(json!({ "message": "\u{0}" }));
            }),
            Field::Error,
        ),
    ];
    for (params, field) in cases {
        assert_limit(store.record_step_attempt(params).await, field);
    }
    let create_step = CreateStepAttempt {
        id: Uuid::now_v7(),
        run_id: run.id,
        holder: held.clone(),
        step_name: "s\0".into(),
        kind: StepKind::Sleep,
        config: json!({}),
        context: None,
    };
    assert_limit(
        store.create_step_attempt(create_step).await,
        Field::StepName,
    );
    assert_limit(store.extend_lease(run.id, &held, huge).await, Field::Lease);
    assert_limit(
        store
            .sleep_run(run.id, &held, DateTime::<Utc>::MAX_UTC)
            .await,
        Field::Sleep,
    );
    assert_limit(
        store
            .release_run(run.id, &held, huge, json!({ "message": "x" }))
            .await,
        Field::Delay,
    );
    let fail = FailRun {
        run_id: run.id,
        holder: held.clone(),
        error: json!({ "message": "a\u{0}" }),
        force: false,
    };
    assert_limit(store.fail_run(fail).await, Field::Error);
    assert_limit(
        store
            .complete_run(run.id, &held, nested(limits::MAX_JSON_DEPTH + 1))
            .await,
        Field::WorkflowOutput,
    );
    assert_limit(
        store
            .complete_run_with_steps(run.id, &held, json!("\u{0}"), Vec::new())
            .await,
        Field::WorkflowOutput,
    );
    assert_limit(
        store
            .complete_run_with_steps(
                run.id,
                &held,
                json!(1),
                vec![record(|p| p.output = Some(json!("\u{0}")))],
            )
            .await,
        Field::StepOutput,
    );

    assert!(store.step_history(run.id).await.unwrap().is_empty());
    let unchanged = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(unchanged.status, RunStatus::Running);
    assert_eq!(unchanged.worker_id.as_deref(), Some(worker.as_str()));

    // At the limits, the writes go through and read back equal.
    let at_limit = record(|p| {
        p.step_name = "s".repeat(limits::MAX_STEP_NAME_BYTES);
        p.output = Some(nested(limits::MAX_JSON_DEPTH));
    });
    store.record_step_attempt(at_limit.clone()).await.unwrap();
    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].output, at_limit.output);
    assert_eq!(history[0].step_name, at_limit.step_name);
    let output = nested(limits::MAX_JSON_DEPTH);
    let done = store
        .complete_run(run.id, &held, output.clone())
        .await
        .unwrap();
    assert_eq!(done.output, Some(output.clone()));
    let read = store.get_run(run.id).await.unwrap().unwrap();
    assert_eq!(read.output, Some(output));
}

/// Cursor strings whose instant is outside the accepted range are invalid cursors.
pub async fn cursors_outside_the_time_range_are_invalid(setup: impl Setup) {
    let _store = setup.store().await;
    use base64::Engine as _;
    for micros in [
        i64::MAX,
        i64::MIN,
        -62_135_596_800_000_001,
        253_402_300_800_000_000,
    ] {
        let raw = format!("{micros}|{}", Uuid::nil());
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
        let parsed = text.parse::<Cursor>();
        assert!(
            matches!(parsed, Err(StoreError::InvalidCursor { .. })),
            "{micros}: {parsed:?}"
        );
    }
    let edge = Cursor::new(limits::LATEST, Uuid::max());
    assert_eq!(edge.to_string().parse::<Cursor>().unwrap(), edge);
    let edge = Cursor::new(limits::EARLIEST, Uuid::nil());
    assert_eq!(edge.to_string().parse::<Cursor>().unwrap(), edge);
}
