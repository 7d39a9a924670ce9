//! The LISTEN/NOTIFY hub: it survives losing its connection, and a store's own
//! announcements reach the subscribers of its process without the server.

use std::time::Duration;
use tasks::store::RunStore;

use futures::StreamExt;
use tasks::postgres::{PgOptions, PgStore};
use tasks::store::{CreateRun, Holder, LeaseStore, Notification, NotificationStream, Store};

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

    // ...and notifications flow again over the new connection: sent by another store on
    // the same database, whose announcements travel only through the server.
    let sender = PgStore::new(store.pool().clone())
        .with_namespace(store.namespace())
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        sender
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

/// The next notification of `wakeups` within `within`, if any.
async fn next_within(wakeups: &mut NotificationStream, within: Duration) -> Option<Notification> {
    tokio::time::timeout(within, wakeups.next())
        .await
        .ok()
        .flatten()
}

/// What a store announces after its write committed reaches the subscribers of its own
/// process at once, without a round trip through the server: here the store listens on
/// another database, which never hears this database's `NOTIFY`, and the wake-ups of a
/// start, a claim and a finish still arrive. A start by another store (another process, as
/// far as the hub knows) is not heard, which shows that the listener hears nothing here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_hears_its_own_announcements_without_the_server() {
    let other = tasks_tests::pg_store().await;
    let mut elsewhere = tasks_tests::connect_options();
    elsewhere = elsewhere.database("postgres");
    let listen_url = format!(
        "postgres://{}@{}:{}/postgres",
        elsewhere.get_username(),
        elsewhere.get_host(),
        elsewhere.get_port()
    );
    let store = PgStore::new_with(
        other.pool().clone(),
        PgOptions::new().listen_url(listen_url),
    )
    .with_namespace(other.namespace())
    .unwrap();
    let mut wakeups = store.subscribe().await.unwrap();

    other.create_run(CreateRun::new("elsewhere")).await.unwrap();
    assert_eq!(
        next_within(&mut wakeups, Duration::from_millis(500)).await,
        None,
        "the listener is on another database and hears nothing of this one"
    );

    let run = store.create_run(CreateRun::new("here")).await.unwrap();
    assert_eq!(
        next_within(&mut wakeups, Duration::from_secs(5)).await,
        Some(Notification::RunAvailable {
            namespace: store.namespace().to_owned()
        })
    );
    let claimed = store
        .claim_runs("local-delivery", Duration::from_secs(60), 10)
        .await
        .unwrap();
    let claimed: Vec<_> = claimed.into_iter().filter(|c| c.run.id == run.id).collect();
    assert_eq!(claimed.len(), 1, "claimed the run started here");
    let holder = Holder::of(&claimed[0].run).unwrap();
    store
        .complete_run(run.id, &holder, serde_json::json!("done"))
        .await
        .unwrap();
    let mut heard = Vec::new();
    while let Some(notification) = next_within(&mut wakeups, Duration::from_secs(2)).await {
        let finished = matches!(notification, Notification::RunFinished { .. });
        heard.push(notification);
        if finished {
            break;
        }
    }
    assert!(
        heard.contains(&Notification::RunFinished {
            namespace: store.namespace().to_owned(),
            run_id: run.id
        }),
        "the finish was heard here: {heard:?}"
    );
}
