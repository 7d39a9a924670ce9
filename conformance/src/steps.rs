//! Step attempts: creation, fetching, listing and the step history.

use std::time::Duration;
use tasks_core::StepStore;

use serde_json::json;
use tasks_core::{
    CreateStepAttempt, Cursor, ListStepAttempts, Order, StepAttempt, StepKind, StepStatus, Store,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// A step attempt starts running, with exactly the given fields.
pub async fn create_step_attempt_returns_running_attempt(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let name = Uuid::new_v4().to_string();
    let created = store
        .create_step_attempt(CreateStepAttempt {
            id: Uuid::now_v7(),
            config: json!({ "key": "val" }),
            ..step_params(&run, &name)
        })
        .await
        .unwrap();

    assert_near_now(created.started_at, "started_at");
    assert_near_now(Some(created.created_at), "created_at");
    assert_near_now(Some(created.updated_at), "updated_at");
    let expected = StepAttempt {
        namespace: store.namespace().to_owned(),
        id: created.id,
        workflow_run_id: run.id,
        step_name: name,
        kind: StepKind::Function,
        status: StepStatus::Running,
        config: json!({ "key": "val" }),
        context: None,
        output: None,
        error: None,
        args: None,
        child_workflow_run_namespace: None,
        child_workflow_run_id: None,
        started_at: created.started_at,
        finished_at: None,
        created_at: created.created_at,
        updated_at: created.updated_at,
    };
    assert_eq!(created, expected);
    assert_ne!(created.id, Uuid::nil());

    let sleep = store
        .create_step_attempt(CreateStepAttempt {
            id: Uuid::now_v7(),
            kind: StepKind::Sleep,
            context: Some(json!({ "trace": "abc" })),
            ..step_params(&run, "nap")
        })
        .await
        .unwrap();
    assert_eq!(sleep.kind, StepKind::Sleep);
    assert_eq!(sleep.context, Some(json!({ "trace": "abc" })));
    assert_ne!(sleep.id, created.id);
}

/// A created attempt reads back unchanged; unknown ids read back as `None`.
pub async fn get_step_attempt_returns_persisted_attempt(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let created = start_step(&store, &run, "fetch-me").await;
    assert_eq!(
        store.get_step_attempt(created.id).await.unwrap(),
        Some(created)
    );
    assert_eq!(store.get_step_attempt(Uuid::new_v4()).await.unwrap(), None);
}

/// Attempts list oldest first.
pub async fn list_step_attempts_ordered_by_creation_time(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let first = start_step(&store, &run, &Uuid::new_v4().to_string()).await;
    recorded(
        complete_step(&store, &run, &first, json!({ "ok": true }))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = start_step(&store, &run, &Uuid::new_v4().to_string()).await;

    let listed = store
        .list_step_attempts(ListStepAttempts::new(run.id))
        .await
        .unwrap();
    assert_eq!(
        names(&listed.data),
        vec![first.step_name.as_str(), second.step_name.as_str()]
    );
    assert_eq!(listed.data[0].status, StepStatus::Completed);
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// Attempts page forward with `next` and back with `prev` to the same pages and cursors.
pub async fn list_step_attempts_paginates_forward_and_back(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    start_spaced(&store, &run, 5, Duration::from_millis(10)).await;

    let page1 = store.list_step_attempts(steps_page(&run, 2)).await.unwrap();
    assert_eq!(names(&page1.data), ["step-0", "step-1"]);
    assert!(page1.next.is_some());
    assert_eq!(page1.prev, None);

    let after = |cursor: Option<Cursor>| ListStepAttempts {
        after: cursor,
        ..steps_page(&run, 2)
    };
    let before = |cursor: Option<Cursor>| ListStepAttempts {
        before: cursor,
        ..steps_page(&run, 2)
    };
    let page2 = store.list_step_attempts(after(page1.next)).await.unwrap();
    assert_eq!(names(&page2.data), ["step-2", "step-3"]);
    assert!(page2.next.is_some());
    assert!(page2.prev.is_some());

    let page3 = store.list_step_attempts(after(page2.next)).await.unwrap();
    assert_eq!(names(&page3.data), ["step-4"]);
    assert_eq!(page3.next, None);
    assert!(page3.prev.is_some());

    let page2_back = store.list_step_attempts(before(page3.prev)).await.unwrap();
    assert_eq!(names(&page2_back.data), ["step-2", "step-3"]);
    assert_eq!(page2_back.next, page2.next);
    assert_eq!(page2_back.prev, page2.prev);

    let page1_back = store.list_step_attempts(before(page2.prev)).await.unwrap();
    assert_eq!(page1_back, page1);
}

/// A run without attempts lists nothing, with no cursors.
pub async fn list_step_attempts_empty(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let listed = store
        .list_step_attempts(ListStepAttempts::new(run.id))
        .await
        .unwrap();
    assert!(listed.data.is_empty());
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// A page that holds exactly everything has no next page.
pub async fn list_step_attempts_exact_limit(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let only = start_step(&store, &run, "step-1").await;
    let listed = store.list_step_attempts(steps_page(&run, 1)).await.unwrap();
    assert_eq!(listed.data, vec![only]);
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// Newest first, with `after` going to older attempts and `before` back to newer ones.
pub async fn list_step_attempts_descending_with_cursors(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    start_spaced(&store, &run, 5, Duration::from_millis(10)).await;
    let desc = |after: Option<Cursor>, before: Option<Cursor>| ListStepAttempts {
        order: Order::Desc,
        after,
        before,
        ..steps_page(&run, 2)
    };

    let page1 = store.list_step_attempts(desc(None, None)).await.unwrap();
    assert_eq!(names(&page1.data), ["step-4", "step-3"]);
    assert!(page1.next.is_some());
    assert_eq!(page1.prev, None);
    let page2 = store
        .list_step_attempts(desc(page1.next, None))
        .await
        .unwrap();
    assert_eq!(names(&page2.data), ["step-2", "step-1"]);
    let page3 = store
        .list_step_attempts(desc(page2.next, None))
        .await
        .unwrap();
    assert_eq!(names(&page3.data), ["step-0"]);
    assert_eq!(page3.next, None);
    assert!(page3.prev.is_some());
    let page2_back = store
        .list_step_attempts(desc(None, page3.prev))
        .await
        .unwrap();
    assert_eq!(page2_back, page2);
    let page1_back = store
        .list_step_attempts(desc(None, page2.prev))
        .await
        .unwrap();
    assert_eq!(page1_back, page1);
}

/// A listing holds only the attempts of its run.
pub async fn list_step_attempts_only_lists_the_run(setup: impl Setup) {
    let store = setup.store().await;
    let a = create_claimed(&store).await;
    let b = create_claimed(&store).await;
    let a0 = start_step(&store, &a, "a-0").await;
    let b0 = start_step(&store, &b, "b-0").await;
    let a1 = start_step(&store, &a, "a-1").await;

    let listed = store
        .list_step_attempts(ListStepAttempts::new(a.id))
        .await
        .unwrap();
    assert_eq!(listed.data, vec![a0, a1]);
    let listed = store
        .list_step_attempts(ListStepAttempts::new(b.id))
        .await
        .unwrap();
    assert_eq!(listed.data, vec![b0]);
    let listed = store
        .list_step_attempts(ListStepAttempts::new(Uuid::new_v4()))
        .await
        .unwrap();
    assert!(listed.data.is_empty());
}

/// The step history holds every attempt of the run in creation order, even when created
/// back to back, and nothing of other runs.
pub async fn step_history_lists_attempts_oldest_first(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let other = create_claimed(&store).await;
    start_step(&store, &other, "other").await;
    let steps = start_spaced(&store, &run, 6, Duration::ZERO).await;
    recorded(
        complete_step(&store, &run, &steps[1], json!(1))
            .await
            .unwrap(),
    );

    let history = store.step_history(run.id).await.unwrap();
    assert_eq!(
        names(&history),
        ["step-0", "step-1", "step-2", "step-3", "step-4", "step-5"]
    );
    assert_eq!(history[1].status, StepStatus::Completed);
    assert_eq!(history[1].output, Some(json!(1)));
    assert_eq!(history[2].status, StepStatus::Running);
    let listed = store
        .list_step_attempts(ListStepAttempts::new(run.id))
        .await
        .unwrap();
    assert_eq!(listed.data, history);
    assert!(store.step_history(Uuid::new_v4()).await.unwrap().is_empty());
}
