//! Listing runs: order, cursor pagination in both directions, filters, and cursor parsing.

use std::time::Duration;
use tasks_core::{LeaseStore, RunStore, StepStore};

use base64::Engine as _;
use serde_json::json;
use tasks_core::{
    CreateRun, Cursor, ListRuns, ListStepAttempts, Order, RunStatus, Store, StoreError,
};
use uuid::Uuid;

use super::Setup;
use super::support::*;

/// Listings are oldest first by default.
pub async fn list_runs_ordered_by_creation_time(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 2, Duration::from_millis(10)).await;
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&listed.data), ids(&runs));
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// Pages forward with `next`, and back with `prev` to the very same pages and cursors.
pub async fn list_runs_paginates_forward_and_back(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 5, Duration::from_millis(10)).await;
    let all = ids(&runs);

    let page1 = store.list_runs(runs_page(2)).await.unwrap();
    assert_eq!(ids(&page1.data), all[0..2]);
    assert!(page1.next.is_some());
    assert_eq!(page1.prev, None);

    let page2 = store
        .list_runs(ListRuns {
            after: page1.next,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page2.data), all[2..4]);
    assert!(page2.next.is_some());
    assert!(page2.prev.is_some());

    let page3 = store
        .list_runs(ListRuns {
            after: page2.next,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page3.data), all[4..5]);
    assert_eq!(page3.next, None);
    assert!(page3.prev.is_some());

    let page2_back = store
        .list_runs(ListRuns {
            before: page3.prev,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page2_back.data), all[2..4]);
    assert_eq!(page2_back.next, page2.next);
    assert_eq!(page2_back.prev, page2.prev);

    let page1_back = store
        .list_runs(ListRuns {
            before: page2_back.prev,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(page1_back, page1);
}

/// Runs created back to back (possibly within one clock tick) page in `(created_at, id)`
/// order without loss or repetition.
pub async fn list_runs_paginates_runs_created_back_to_back(setup: impl Setup) {
    let store = setup.store().await;
    let mut runs = create_spaced(&store, 5, Duration::ZERO).await;
    runs.sort_by_key(|run| (run.created_at, run.id));
    let all = ids(&runs);

    let page1 = store.list_runs(runs_page(2)).await.unwrap();
    assert_eq!(ids(&page1.data), all[0..2]);
    assert!(page1.next.is_some());
    let page2 = store
        .list_runs(ListRuns {
            after: page1.next,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page2.data), all[2..4]);
    assert!(page2.next.is_some());
    let page3 = store
        .list_runs(ListRuns {
            after: page2.next,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page3.data), all[4..5]);
    assert_eq!(page3.next, None);
    let page2_back = store
        .list_runs(ListRuns {
            before: page3.prev,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page2_back.data), all[2..4]);
}

/// A cursor compares `(created_at, id)` as a pair: items with the cursor's timestamp are
/// ordered by id, which breaks timestamp ties.
pub async fn list_runs_cursor_breaks_timestamp_ties_by_id(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 3, Duration::from_millis(5)).await;
    let (r0, r1, r2) = (runs[0].id, runs[1].id, runs[2].id);
    let t1 = runs[1].created_at;
    let lowest = Cursor::new(t1, Uuid::nil());
    let highest = Cursor::new(t1, Uuid::from_u128(u128::MAX));
    let page = |order: Order, after: Option<Cursor>, before: Option<Cursor>| {
        let store = &store;
        async move {
            let page = store
                .list_runs(ListRuns {
                    order,
                    after,
                    before,
                    ..runs_page(1)
                })
                .await
                .unwrap();
            ids(&page.data)
        }
    };

    assert_eq!(page(Order::Asc, Some(lowest), None).await, vec![r1]);
    assert_eq!(page(Order::Asc, Some(highest), None).await, vec![r2]);
    assert_eq!(page(Order::Asc, None, Some(highest)).await, vec![r1]);
    assert_eq!(page(Order::Asc, None, Some(lowest)).await, vec![r0]);
    assert_eq!(page(Order::Desc, Some(highest), None).await, vec![r1]);
    assert_eq!(page(Order::Desc, Some(lowest), None).await, vec![r0]);
    assert_eq!(page(Order::Desc, None, Some(lowest)).await, vec![r1]);
    assert_eq!(page(Order::Desc, None, Some(highest)).await, vec![r2]);
}

/// An empty namespace lists nothing, with no cursors.
pub async fn list_runs_empty(setup: impl Setup) {
    let store = setup.store().await;
    let listed = store.list_runs(ListRuns::default()).await.unwrap();
    assert!(listed.data.is_empty());
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// A page that holds exactly everything has no next page.
pub async fn list_runs_exact_limit(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 2, Duration::ZERO).await;
    let listed = store.list_runs(runs_page(2)).await.unwrap();
    assert_eq!(listed.data.len(), 2);
    assert_eq!(listed.data, runs);
    assert_eq!(listed.next, None);
    assert_eq!(listed.prev, None);
}

/// Newest first, with `after` going to older runs and `before` back to newer ones.
pub async fn list_runs_descending_with_cursors(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 5, Duration::from_millis(10)).await;
    let all: Vec<Uuid> = ids(&runs).into_iter().rev().collect();
    let desc = |after: Option<Cursor>, before: Option<Cursor>| ListRuns {
        order: Order::Desc,
        after,
        before,
        ..runs_page(2)
    };

    let page1 = store.list_runs(desc(None, None)).await.unwrap();
    assert_eq!(ids(&page1.data), all[0..2]);
    assert!(page1.next.is_some());
    assert_eq!(page1.prev, None);

    let page2 = store.list_runs(desc(page1.next, None)).await.unwrap();
    assert_eq!(ids(&page2.data), all[2..4]);
    assert!(page2.next.is_some());
    assert!(page2.prev.is_some());

    let page3 = store.list_runs(desc(page2.next, None)).await.unwrap();
    assert_eq!(ids(&page3.data), all[4..5]);
    assert_eq!(page3.next, None);
    assert!(page3.prev.is_some());

    let page2_back = store.list_runs(desc(None, page3.prev)).await.unwrap();
    assert_eq!(page2_back, page2);

    let page1_back = store.list_runs(desc(None, page2.prev)).await.unwrap();
    assert_eq!(page1_back, page1);
}

/// `statuses` keeps runs in any of the given statuses; empty keeps all.
pub async fn list_runs_filters_by_status(setup: impl Setup) {
    let store = setup.store().await;
    // Claimed runs first: claiming takes the oldest available run.
    let running = create_claimed(&store).await;
    let completed = create_claimed(&store).await;
    let completed = store
        .complete_run(completed.id, &holder(&completed), json!(1))
        .await
        .unwrap();
    let paused = create_pending(&store).await;
    let paused = store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    let canceled = create_canceled(&store).await;
    let pending = create_pending(&store).await;

    let by = |statuses: Vec<RunStatus>, order: Order| {
        let store = &store;
        async move {
            let listed = store
                .list_runs(ListRuns {
                    statuses,
                    order,
                    ..ListRuns::default()
                })
                .await
                .unwrap();
            ids(&listed.data)
        }
    };
    use RunStatus::*;
    assert_eq!(
        by(vec![Pending, Canceled], Order::Asc).await,
        vec![canceled.id, pending.id]
    );
    assert_eq!(
        by(vec![Pending, Canceled], Order::Desc).await,
        vec![pending.id, canceled.id]
    );
    assert_eq!(by(vec![Running], Order::Asc).await, vec![running.id]);
    assert_eq!(
        by(vec![Completed, Paused], Order::Asc).await,
        vec![completed.id, paused.id]
    );
    assert_eq!(
        by(vec![Failed, Sleeping], Order::Asc).await,
        Vec::<Uuid>::new()
    );
    assert_eq!(
        by(vec![], Order::Asc).await,
        vec![running.id, completed.id, paused.id, canceled.id, pending.id]
    );

    // Filters and cursors combine.
    let first = store
        .list_runs(ListRuns {
            statuses: vec![Running, Paused, Pending],
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&first.data), vec![running.id, paused.id]);
    let rest = store
        .list_runs(ListRuns {
            statuses: vec![Running, Paused, Pending],
            after: first.next,
            ..runs_page(2)
        })
        .await
        .unwrap();
    assert_eq!(ids(&rest.data), vec![pending.id]);
    assert_eq!(rest.next, None);
}

/// `workflow_name` keeps runs of that workflow, and combines with other filters.
pub async fn list_runs_filters_by_workflow_name(setup: impl Setup) {
    let store = setup.store().await;
    let (a, b) = (unique_name(), unique_name());
    let a1 = store.create_run(CreateRun::new(a.clone())).await.unwrap();
    let b1 = store.create_run(CreateRun::new(b.clone())).await.unwrap();
    let a2 = store.create_run(CreateRun::new(a.clone())).await.unwrap();
    store.lifecycle().unwrap().pause_run(a2.id).await.unwrap();

    let by = |name: String, statuses: Vec<RunStatus>| {
        let store = &store;
        async move {
            let listed = store
                .list_runs(ListRuns {
                    workflow_name: Some(name),
                    statuses,
                    ..ListRuns::default()
                })
                .await
                .unwrap();
            ids(&listed.data)
        }
    };
    assert_eq!(by(a.clone(), vec![]).await, vec![a1.id, a2.id]);
    assert_eq!(by(b, vec![]).await, vec![b1.id]);
    assert_eq!(by(unique_name(), vec![]).await, Vec::<Uuid>::new());
    assert_eq!(by(a, vec![RunStatus::Pending]).await, vec![a1.id]);
}

/// `created_after` and `created_before` are inclusive bounds on the creation time.
pub async fn list_runs_filters_by_creation_time(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 3, Duration::from_millis(20)).await;
    let (r0, r1, r2) = (&runs[0], &runs[1], &runs[2]);
    let between = |after: Option<_>, before: Option<_>| {
        let store = &store;
        async move {
            let listed = store
                .list_runs(ListRuns {
                    created_after: after,
                    created_before: before,
                    ..ListRuns::default()
                })
                .await
                .unwrap();
            ids(&listed.data)
        }
    };
    let tick = chrono::Duration::microseconds(1);

    assert_eq!(between(Some(r1.created_at), None).await, vec![r1.id, r2.id]);
    assert_eq!(between(None, Some(r1.created_at)).await, vec![r0.id, r1.id]);
    assert_eq!(
        between(Some(r1.created_at), Some(r1.created_at)).await,
        vec![r1.id]
    );
    assert_eq!(
        between(Some(r0.created_at + tick), Some(r2.created_at - tick)).await,
        vec![r1.id]
    );
    assert_eq!(
        between(Some(r2.created_at + tick), None).await,
        Vec::<Uuid>::new()
    );
}

/// Cursors print as URL-safe strings that parse back to the same cursor.
pub async fn cursors_round_trip_through_strings(setup: impl Setup) {
    let store = setup.store().await;
    let runs = create_spaced(&store, 3, Duration::ZERO).await;
    let page1 = store.list_runs(runs_page(1)).await.unwrap();
    let next = page1.next.expect("a next page");
    assert_eq!(next.id(), runs[0].id);
    assert_eq!(next.created_at(), runs[0].created_at);

    let text = next.to_string();
    assert!(
        text.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "cursor {text:?} is not URL-safe"
    );
    let parsed: Cursor = text.parse().expect("a printed cursor parses");
    assert_eq!(parsed, next);

    let page2 = store
        .list_runs(ListRuns {
            after: Some(parsed),
            ..runs_page(1)
        })
        .await
        .unwrap();
    assert_eq!(ids(&page2.data), vec![runs[1].id]);
}

/// Strings that are not cursors fail to parse with `InvalidCursor`.
pub async fn invalid_cursor_is_rejected(setup: impl Setup) {
    // No store needed: parsing is the contract's, but keep the signature uniform.
    let _ = &setup;
    for text in [
        "garbage".to_owned(),
        String::new(),
        "not base64 !".to_owned(),
        encode_url_safe(b"no separator"),
        encode_url_safe(b"notanumber|00000000-0000-0000-0000-000000000000"),
        encode_url_safe(b"1700000000000000|not-a-uuid"),
    ] {
        assert_err!(text.parse::<Cursor>(), StoreError::InvalidCursor { .. });
    }
}

/// Both `after` and `before`, or a zero page size, are refused as invalid arguments.
pub async fn invalid_page_arguments_are_rejected(setup: impl Setup) {
    let store = setup.store().await;
    let run = create_claimed(&store).await;
    let cursor = Cursor::new(run.created_at, run.id);

    assert_err!(
        store
            .list_runs(ListRuns {
                after: Some(cursor),
                before: Some(cursor),
                ..ListRuns::default()
            })
            .await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        store.list_runs(runs_page(0)).await,
        StoreError::InvalidArgument(_)
    );

    let steps = |after, before, limit| ListStepAttempts {
        after,
        before,
        limit,
        ..ListStepAttempts::new(run.id)
    };
    assert_err!(
        store
            .list_step_attempts(steps(Some(cursor), Some(cursor), None))
            .await,
        StoreError::InvalidArgument(_)
    );
    assert_err!(
        store.list_step_attempts(steps(None, None, Some(0))).await,
        StoreError::InvalidArgument(_)
    );
}

/// URL-safe unpadded base64, the alphabet cursors print in.
fn encode_url_safe(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `count_runs` counts the namespace's runs in each status asked for, in the order asked,
/// zeros included and a repeated status once; other namespaces are not counted.
pub async fn count_runs_by_status(setup: impl Setup) {
    let store = setup.store().await;
    use RunStatus::*;
    assert_eq!(store.count_runs(&[]).await.unwrap(), []);
    assert_eq!(
        store.count_runs(&[Pending, Running]).await.unwrap(),
        [(Pending, 0), (Running, 0)]
    );

    let running = create_claimed(&store).await;
    let completed = create_claimed(&store).await;
    store
        .complete_run(completed.id, &holder(&completed), json!(1))
        .await
        .unwrap();
    let paused = create_pending(&store).await;
    store
        .lifecycle()
        .unwrap()
        .pause_run(paused.id)
        .await
        .unwrap();
    create_canceled(&store).await;
    create_pending(&store).await;
    create_pending(&store).await;
    let elsewhere = store.scoped(&unique_namespace()).unwrap();
    create_pending(elsewhere.contract()).await;

    assert_eq!(
        store
            .count_runs(&[
                Sleeping, Pending, Running, Paused, Pending, Completed, Canceled, Failed
            ])
            .await
            .unwrap(),
        [
            (Sleeping, 0),
            (Pending, 2),
            (Running, 1),
            (Paused, 1),
            (Completed, 1),
            (Canceled, 1),
            (Failed, 0),
        ]
    );
    assert_eq!(
        elsewhere.contract().count_runs(&[Pending]).await.unwrap(),
        [(Pending, 1)]
    );
    assert_eq!(running.status, Running);
}

/// `version`, `queue` and `concurrency_key` each keep only the runs that have it, and
/// combine with the other filters.
pub async fn list_runs_filters_by_version_queue_and_key(setup: impl Setup) {
    let store = setup.store().await;
    let name = unique_name();
    let v1 = store
        .create_run(CreateRun {
            version: Some("1".into()),
            ..CreateRun::new(name.clone())
        })
        .await
        .unwrap();
    let v2_mail = store
        .create_run(CreateRun {
            version: Some("2".into()),
            queue: Some("mail".into()),
            concurrency: Some(tasks_core::Concurrency::new("tenant-7", 3)),
            ..CreateRun::new(name.clone())
        })
        .await
        .unwrap();
    let mail = store
        .create_run(CreateRun {
            queue: Some("mail".into()),
            ..CreateRun::new(name.clone())
        })
        .await
        .unwrap();
    let list = |params: ListRuns| {
        let store = &store;
        async move { ids(&store.list_runs(params).await.unwrap().data) }
    };
    let version = |v: &str| ListRuns {
        version: Some(v.into()),
        ..ListRuns::default()
    };
    assert_eq!(list(version("1")).await, vec![v1.id]);
    assert_eq!(list(version("2")).await, vec![v2_mail.id]);
    assert_eq!(list(version("3")).await, Vec::<Uuid>::new());
    let queue = |q: &str| ListRuns {
        queue: Some(q.into()),
        ..ListRuns::default()
    };
    assert_eq!(list(queue("mail")).await, vec![v2_mail.id, mail.id]);
    assert_eq!(list(queue("default")).await, vec![v1.id]);
    let key = ListRuns {
        concurrency_key: Some("tenant-7".into()),
        ..ListRuns::default()
    };
    assert_eq!(list(key).await, vec![v2_mail.id]);
    let other_key = ListRuns {
        concurrency_key: Some("tenant-8".into()),
        ..ListRuns::default()
    };
    assert_eq!(list(other_key).await, Vec::<Uuid>::new());
    let both = ListRuns {
        queue: Some("mail".into()),
        version: Some("2".into()),
        workflow_name: Some(name),
        ..ListRuns::default()
    };
    assert_eq!(list(both).await, vec![v2_mail.id]);
    let too_long = ListRuns {
        version: Some("v".repeat(tasks_core::limits::MAX_VERSION_BYTES + 1)),
        ..ListRuns::default()
    };
    assert_err!(store.list_runs(too_long).await, StoreError::Limit(_));
}

/// `search` finds a run by its id, or the runs started with an idempotency key (of any
/// workflow), exactly; it combines with the other filters.
pub async fn list_runs_searches_by_id_or_idempotency_key(setup: impl Setup) {
    let store = setup.store().await;
    let (a, b) = (unique_name(), unique_name());
    let keyed_a = store
        .create_run(CreateRun {
            idempotency_key: Some("order-42".into()),
            ..CreateRun::new(a.clone())
        })
        .await
        .unwrap();
    let keyed_b = store
        .create_run(CreateRun {
            idempotency_key: Some("order-42".into()),
            ..CreateRun::new(b.clone())
        })
        .await
        .unwrap();
    let plain = store.create_run(CreateRun::new(a.clone())).await.unwrap();
    let search = |text: String, workflow: Option<String>| {
        let store = &store;
        async move {
            let params = ListRuns {
                search: Some(text),
                workflow_name: workflow,
                ..ListRuns::default()
            };
            ids(&store.list_runs(params).await.unwrap().data)
        }
    };
    assert_eq!(
        search("order-42".into(), None).await,
        vec![keyed_a.id, keyed_b.id]
    );
    assert_eq!(search("order-42".into(), Some(b)).await, vec![keyed_b.id]);
    assert_eq!(search("order-4".into(), None).await, Vec::<Uuid>::new());
    assert_eq!(search(plain.id.to_string(), None).await, vec![plain.id]);
    assert_eq!(
        search(format!(" {} ", plain.id), None).await,
        vec![plain.id]
    );
    assert_eq!(
        search(Uuid::new_v4().to_string(), None).await,
        Vec::<Uuid>::new()
    );
    // Another namespace's run is not found by its id.
    let other = store.scoped(&unique_namespace()).unwrap();
    let elsewhere = other
        .contract()
        .create_run(CreateRun::new(a))
        .await
        .unwrap();
    assert_eq!(
        search(elsewhere.id.to_string(), None).await,
        Vec::<Uuid>::new()
    );
}
