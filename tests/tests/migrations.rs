//! Schema migrations on a throwaway database that already belongs to an application: they
//! are idempotent, safe to run concurrently, and touch nothing outside the `tasks` schema.

use std::panic::AssertUnwindSafe;
use tasks::store::RunStore;

use futures::FutureExt;
use sqlx::{Executor, PgPool, Row};
use tasks::postgres::{MIGRATIONS, PgStore, migrate};
use tasks::store::CreateRun;
use tasks_tests::{connect_options, connect_pool};
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_are_idempotent_concurrent_and_confined_to_their_schema() {
    let admin = connect_pool(connect_options(), 1).await;
    // Database names cannot be bound as query parameters, so this is the one place where an
    // identifier is formatted into SQL: the name is built from a UUID's hex digits only, and
    // quoted as an identifier besides.
    let name = format!("tasks_migrations_{}", Uuid::new_v4().simple());
    assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    admin
        .execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .expect("CREATE DATABASE (the test user needs CREATEDB)");

    let outcome = AssertUnwindSafe(check_migrations(&name))
        .catch_unwind()
        .await;

    admin
        .execute(format!("DROP DATABASE \"{name}\" WITH (FORCE)").as_str())
        .await
        .expect("DROP DATABASE");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn check_migrations(database: &str) {
    let options = connect_options().database(database);
    let app = connect_pool(options.clone(), 2).await;

    // The application was there first, with its own sqlx migrations and tables.
    app.execute(
        "CREATE TABLE public._sqlx_migrations (
             version BIGINT PRIMARY KEY,
             description TEXT NOT NULL,
             installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
             success BOOLEAN NOT NULL,
             checksum BYTEA NOT NULL,
             execution_time BIGINT NOT NULL
         );
         INSERT INTO public._sqlx_migrations (version, description, success, checksum, execution_time)
              VALUES (20240101000000, 'app init', true, '\\x01', 1);
         CREATE TABLE public.app_table (id INT PRIMARY KEY, label TEXT NOT NULL);
         INSERT INTO public.app_table VALUES (1, 'kept');",
    )
    .await
    .expect("creating the application's tables");
    let app_before = app_snapshot(&app).await;

    // Several processes starting at once on an empty schema.
    let mut racers = Vec::new();
    for _ in 0..4 {
        let options = options.clone();
        racers.push(tokio::spawn(async move {
            let pool = connect_pool(options, 1).await;
            migrate(&pool).await
        }));
    }
    for racer in racers {
        racer
            .await
            .expect("migrator panicked")
            .expect("concurrent migrate");
    }
    // And again, twice, on an up-to-date schema.
    migrate(&app).await.expect("second migrate");
    migrate(&app).await.expect("third migrate");

    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'tasks' ORDER BY table_name",
    )
    .fetch_all(&app)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "concurrency_keys",
            "events",
            "queues",
            "retention_leases",
            "run_state",
            "schedules",
            "schema_migrations",
            "step_attempts",
            "workers",
            "workflow_runs"
        ],
        "tables of the tasks schema"
    );

    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM tasks.schema_migrations ORDER BY version")
            .fetch_all(&app)
            .await
            .unwrap();
    let known: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(applied, known, "one row per migration, each applied once");

    assert_eq!(
        app_snapshot(&app).await,
        app_before,
        "the application's tables changed"
    );

    // The migrated schema works.
    let store = PgStore::new(app.clone())
        .with_namespace("migrations-test")
        .unwrap();
    let run = store.create_run(CreateRun::new("wf")).await.unwrap();
    assert_eq!(store.get_run(run.id).await.unwrap(), Some(run));
    app.close().await;
}

/// Everything of the application's that migrations must leave alone: the tables of
/// `public`, and the contents of its migration table and app table.
async fn app_snapshot(pool: &PgPool) -> (Vec<String>, Vec<(i64, String)>, Vec<(i32, String)>) {
    let tables = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables
          WHERE table_schema = 'public' ORDER BY table_name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let migrations =
        sqlx::query("SELECT version, description FROM public._sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    let rows = sqlx::query("SELECT id, label FROM public.app_table ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    (tables, migrations, rows)
}

/// `migrate` can run on spawned tasks (its future is `Send`), which the concurrency check
/// above relies on; this keeps the property visible on its own.
#[allow(dead_code)]
fn migrate_future_is_send(pool: &PgPool) {
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&migrate(pool));
}
