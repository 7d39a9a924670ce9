//! The LISTEN/NOTIFY hub survives losing its connection.

use std::time::Duration;
use tasks::store::RunStore;

use futures::StreamExt;
use tasks::store::{CreateRun, Notification, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listener_connection_reconnects() {
    let store = tasks_tests::pg_store().await;
    let mut wakeups = store.subscribe().await.unwrap();

    // Kill every listening backend: ours is among them.
    let killed: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE pid <> pg_backend_pid() AND query ILIKE 'LISTEN%tasks_events%'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert!(!killed.is_empty(), "found the listener connection");

    // Subscribers are told that notifications may have been missed...
    let first = tokio::time::timeout(Duration::from_secs(10), wakeups.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        Notification::Missed {
            namespace: store.namespace().to_owned()
        }
    );

    // ...and notifications flow again over the new connection.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        store
            .create_run(CreateRun::new("after-reconnect"))
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_millis(500), wakeups.next()).await {
            Ok(Some(Notification::RunAvailable { namespace })) => {
                assert_eq!(namespace, store.namespace());
                break;
            }
            Ok(Some(Notification::Missed { .. })) | Err(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no notification after reconnecting"
                );
            }
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }
}
