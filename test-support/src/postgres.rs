//! Postgres stores for tests, on the server of `DATABASE_URL`.
//!
//! [`store`] opens a migrated store on a fresh namespace, with a small pool of its own;
//! [`connect_pool`] and [`connect_options`] give a test its own connections for what it
//! checks behind the store's back.

use std::time::Duration;

use tasks_postgres::PgStore;
use tasks_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tasks_postgres::sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;

/// The database the tests use when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The connections of each test pool. Small: every test opens its own pools, and a few
/// tests run at once.
pub const TEST_POOL_SIZE: u32 = 4;

/// `DATABASE_URL`, or [`DEFAULT_DATABASE_URL`] when it is unset.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned())
}

/// Connection options for [`database_url`]; panics with instructions when the URL is invalid.
pub fn connect_options() -> PgConnectOptions {
    let url = database_url();
    url.parse()
        .unwrap_or_else(|error| panic!("DATABASE_URL {url:?} is not a Postgres URL: {error}"))
}

/// Opens a pool of at most `max_connections` on `options`, panicking with instructions for
/// starting Postgres when the database server cannot be reached.
pub async fn connect_pool(options: PgConnectOptions, max_connections: u32) -> PgPool {
    if let Err(error) = server_reachable().await {
        panic!(
            "cannot connect to Postgres at {}:{} (database {:?}): {error}\n\
             The integration tests need a running Postgres. Start the local cluster with\n\
             \x20   pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start\n\
             or point DATABASE_URL at a database in which this user may create schemas\n\
             (default: {DEFAULT_DATABASE_URL}); the project's `scripts/test.sh` does both.",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("<default>"),
        );
    }
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .unwrap_or_else(|error| panic!("cannot open a pool on the test database: {error}"))
}

/// Whether the server of [`database_url`] accepts a connection, checked once per process
/// with one plain connection: a pool would retry for its whole acquire timeout and hide the
/// cause, and every test would wait that long again.
async fn server_reachable() -> Result<(), String> {
    static REACHABLE: OnceCell<Result<(), String>> = OnceCell::const_new();
    REACHABLE
        .get_or_init(|| async {
            let options = connect_options();
            let attempt = PgConnection::connect_with(&options);
            match tokio::time::timeout(Duration::from_secs(10), attempt).await {
                Ok(Ok(connection)) => {
                    let _ = connection.close().await;
                    Ok(())
                }
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err("no answer within 10 s".to_owned()),
            }
        })
        .await
        .clone()
}

/// Set once the `tasks` schema of the test database is up to date in this process.
static MIGRATED: OnceCell<()> = OnceCell::const_new();

/// A Postgres store on a fresh, unique namespace of the test database.
///
/// Each call opens its own small pool, so a store never outlives the test (and Tokio runtime)
/// that created it. Migrations run once per process; they are idempotent and serialized in
/// the database, so other test processes may run them at the same time.
pub async fn store() -> PgStore {
    let pool = connect_pool(connect_options(), TEST_POOL_SIZE).await;
    MIGRATED
        .get_or_init(|| async {
            tasks_postgres::migrate(&pool)
                .await
                .unwrap_or_else(|error| panic!("migrating the test database failed: {error:?}"));
        })
        .await;
    PgStore::new(pool)
        .with_namespace(crate::unique_namespace("test"))
        .unwrap()
}

/// The PgBouncer of [`pgbouncer_store`], started on first use; the watchdog of
/// [`PgBouncer`](crate::pgbouncer::PgBouncer) stops it when the process ends.
static BOUNCER: std::sync::OnceLock<Option<crate::pgbouncer::PgBouncer>> =
    std::sync::OnceLock::new();

/// Server connections of the PgBouncer of [`pgbouncer_store`]: fewer than a store's pool,
/// so that its clients really share them.
pub const PGBOUNCER_POOL_SIZE: u32 = 2;

/// A Postgres store on a fresh, unique namespace of the test database, reaching it through a
/// PgBouncer in transaction mode (this process's own, with [`PGBOUNCER_POOL_SIZE`] server
/// connections) with [`Pooling::Transaction`](tasks_postgres::Pooling::Transaction), and
/// listening on a direct connection.
///
/// Where PgBouncer is not installed: in CI (`CI` set) a panic; elsewhere, after saying so, a
/// direct store ([`store`]).
pub async fn pgbouncer_store() -> PgStore {
    use tasks_postgres::{PgOptions, Pooling};
    let direct = connect_options();
    let bouncer = BOUNCER.get_or_init(|| {
        crate::pgbouncer::PgBouncer::start_or_skip(&crate::pgbouncer::Config::transaction(
            PGBOUNCER_POOL_SIZE,
            direct.get_host(),
            direct.get_port(),
        ))
    });
    let Some(bouncer) = bouncer else {
        return store().await;
    };
    // Migrated directly, as an operator would.
    let _ = store().await;
    let database = direct.get_database().unwrap_or("postgres");
    let url = bouncer.url(direct.get_username(), database);
    let options = PgOptions::new()
        .pooling(Pooling::Transaction)
        .listen_url(database_url());
    let connect = Pooling::Transaction.connect_options(
        url.parse()
            .unwrap_or_else(|error| panic!("PgBouncer URL {url:?}: {error}")),
    );
    let pool = PgStore::pool_options_for(Pooling::Transaction)
        .max_connections(TEST_POOL_SIZE)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(connect)
        .await
        .unwrap_or_else(|error| panic!("cannot open a pool through PgBouncer: {error}"));
    PgStore::new_with(pool, options)
        .with_namespace(crate::unique_namespace("test"))
        .unwrap()
}
