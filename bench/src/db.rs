//! Database helpers shared by the scenarios: namespaces and clean-up, engine stores, counters
//! read from Postgres, completion polling, and the TCP sockets of a pool.

use std::collections::BTreeSet;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tasks::postgres::PgStore;
use tasks_test_support::wait::{self, PollError};

use crate::Result;

/// Connections in the pool of [`PgStore::connect`]; the ceiling uses the same number.
pub const ENGINE_POOL_SIZE: u32 = tasks::postgres::MAX_CONNECTIONS;

/// The `application_name` of every connection the benchmark opens, so that other sessions
/// on the database can be told apart.
pub const APP_NAME: &str = "tasks-bench";

/// `url` with `application_name` set to [`APP_NAME`] (unless it sets one already).
pub fn tagged_url(url: &str) -> String {
    if url.contains("application_name=") {
        url.to_owned()
    } else if url.contains('?') {
        format!("{url}&application_name={APP_NAME}")
    } else {
        format!("{url}?application_name={APP_NAME}")
    }
}

/// How busy the database was with sessions other than the benchmark's, sampled every
/// 100 ms for the whole run: other work on the same database disturbs every figure.
#[derive(Debug, Default)]
pub struct Activity {
    samples: AtomicU64,
    busy: AtomicU64,
    sessions: AtomicU64,
}

/// [`Activity`] as reported.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ActivityReport {
    /// Samples taken.
    pub samples: u64,
    /// Percentage of samples in which another client session was running a statement.
    pub busy_pct: f64,
    /// Mean number of other sessions running a statement.
    pub mean_sessions: f64,
}

impl Activity {
    /// Samples `pg_stat_activity` every 100 ms until the returned task is aborted.
    pub fn sample(admin: PgPool) -> (Arc<Activity>, tokio::task::JoinHandle<()>) {
        let activity = Arc::new(Activity::default());
        let task = tokio::spawn({
            let activity = activity.clone();
            async move {
                loop {
                    let others: std::result::Result<i64, _> = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_stat_activity
                          WHERE backend_type = 'client backend' AND state = 'active'
                            AND application_name <> $1 AND pid <> pg_backend_pid()",
                    )
                    .bind(APP_NAME)
                    .fetch_one(&admin)
                    .await;
                    if let Ok(others) = others {
                        activity.samples.fetch_add(1, Ordering::Relaxed);
                        activity
                            .sessions
                            .fetch_add(others as u64, Ordering::Relaxed);
                        if others > 0 {
                            activity.busy.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        (activity, task)
    }

    /// What was sampled so far.
    pub fn report(&self) -> ActivityReport {
        let samples = self.samples.load(Ordering::Relaxed);
        let per = |n: u64| {
            if samples == 0 {
                0.0
            } else {
                n as f64 / samples as f64
            }
        };
        ActivityReport {
            samples,
            busy_pct: per(self.busy.load(Ordering::Relaxed)) * 100.0,
            mean_sessions: per(self.sessions.load(Ordering::Relaxed)),
        }
    }
}

/// A fresh namespace for one scenario, unique to this process and moment.
pub fn namespace(scenario: &str) -> String {
    tasks_test_support::unique_namespace(&format!("tasks-bench:{scenario}"))
}

/// Deletes every run of `namespace` (its step attempts and events go by the cascading
/// foreign keys), then vacuums the tables so the next scenario starts on the same footing.
///
/// The cascade used to be slow: `workflow_runs_parent_step_fk` (`ON DELETE SET NULL`) had no
/// index on its referencing columns, so every deleted step attempt scanned `workflow_runs`,
/// and the benchmark turned foreign-key triggers off to delete. The schema fixes the cause:
/// migration 2 indexes the parent-step columns and migration 9 the events' run, so every
/// foreign-key action of the cascade is an index lookup and the plain delete is enough.
pub async fn cleanup(admin: &PgPool, namespace: &str) -> Result<u64> {
    let deleted = sqlx::query("DELETE FROM tasks.workflow_runs WHERE namespace = $1")
        .bind(namespace)
        .execute(admin)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM tasks.workers WHERE namespace = $1")
        .bind(namespace)
        .execute(admin)
        .await?;
    sqlx::query("DELETE FROM tasks.concurrency_keys WHERE namespace = $1")
        .bind(namespace)
        .execute(admin)
        .await?;
    if let Err(error) =
        sqlx::query("VACUUM ANALYZE tasks.workflow_runs, tasks.step_attempts, tasks.events")
            .execute(admin)
            .await
    {
        eprintln!("note: VACUUM after clean-up failed ({error}); continuing");
    }
    Ok(deleted)
}

/// Refreshes the planner's statistics of both tables, after a scenario's runs are enqueued
/// and before its clock starts. A scenario's namespace is new and the tables were last
/// analyzed when it was empty (after the previous scenario's clean-up); a database that has
/// been running has statistics that know its namespaces, because autovacuum keeps analyzing
/// tables as they change. Without this, the first second of every drain is planned for an
/// empty namespace, which no long-running deployment sees.
pub async fn analyze(admin: &PgPool) -> Result<()> {
    sqlx::query("ANALYZE tasks.workflow_runs, tasks.step_attempts")
        .execute(admin)
        .await?;
    Ok(())
}

/// Removes leftovers of earlier benchmark runs that were interrupted (older than an hour,
/// so a benchmark running concurrently elsewhere is left alone).
pub async fn remove_stale(admin: &PgPool) -> Result<u64> {
    let stale: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT namespace FROM tasks.workflow_runs
          WHERE namespace LIKE 'tasks-bench:%' AND created_at < now() - INTERVAL '1 hour'",
    )
    .fetch_all(admin)
    .await?;
    let mut removed = 0;
    for namespace in stale {
        removed += cleanup(admin, &namespace).await?;
    }
    Ok(removed)
}

/// A store exactly as an application gets it from [`PgStore::connect`] (a pool of
/// [`ENGINE_POOL_SIZE`] connections, [`PgStore::pool_options`]), with every connection opened
/// up front so that the measurement sees a warm pool. With `nodelay_off`, TCP_NODELAY is
/// cleared on the pool's sockets afterwards.
pub async fn engine_store(url: &str, namespace: &str, nodelay_off: bool) -> Result<PgStore> {
    sized_engine_store(url, namespace, nodelay_off, ENGINE_POOL_SIZE).await
}

/// [`engine_store`] with a pool of `connections` instead (the same pool options otherwise);
/// [`ENGINE_POOL_SIZE`] is exactly `PgStore::connect`.
pub async fn sized_engine_store(
    url: &str,
    namespace: &str,
    nodelay_off: bool,
    connections: u32,
) -> Result<PgStore> {
    let before = pg_sockets(url)?;
    let store = if connections == ENGINE_POOL_SIZE {
        PgStore::connect(url).await?
    } else {
        let options: PgConnectOptions = url.parse()?;
        PgStore::new(
            PgStore::pool_options()
                .max_connections(connections)
                .connect_with(options)
                .await?,
        )
    };
    warm(store.pool(), connections).await?;
    if nodelay_off {
        let changed = set_nodelay(&new_pg_sockets(url, &before)?, false)?;
        if changed < connections as usize {
            eprintln!("note: cleared TCP_NODELAY on {changed} sockets only");
        }
    }
    Ok(store.with_namespace(namespace)?)
}

/// Closes an engine pool. Drop every store, client, worker and run handle on it first: the
/// store's notification listener holds one of the pool's connections until the store is
/// gone, and would log a reconnection failure if the pool closed under it.
pub async fn close(pool: PgPool) {
    // Give the listener task a moment to see that its store is gone.
    tokio::time::sleep(Duration::from_millis(50)).await;
    pool.close().await;
}

/// Opens `connections` connections of `pool` at once and gives them back.
pub async fn warm(pool: &PgPool, connections: u32) -> Result<()> {
    let acquired = futures::future::try_join_all((0..connections).map(|_| pool.acquire())).await?;
    drop(acquired);
    Ok(())
}

/// A pool like the engine's, for the ceiling: `ENGINE_POOL_SIZE` connections, warm.
pub async fn raw_pool(url: &str, connections: u32, test_before_acquire: bool) -> Result<PgPool> {
    let options: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .test_before_acquire(test_before_acquire)
        .connect_with(options)
        .await?;
    warm(&pool, connections).await?;
    Ok(pool)
}

/// The database clock, for measuring against timestamps the engine writes.
pub async fn db_clock(admin: &PgPool) -> Result<DateTime<Utc>> {
    Ok(sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(admin)
        .await?)
}

/// Cluster-wide counters whose difference over a scenario says what it cost the database.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counters {
    /// Next transaction id: the difference counts transactions that wrote (each needs a
    /// commit record, and a WAL flush with `synchronous_commit = on`). Exact.
    pub next_xid: i64,
    /// WAL position in bytes. Exact.
    pub wal_bytes: i64,
    /// `pg_stat_wal.wal_sync`: WAL fsyncs. Statistics reach this view with a delay, so it
    /// is only read after the scenario's connections closed (a backend flushes its
    /// statistics on exit); approximate.
    pub wal_syncs: i64,
}

impl Counters {
    /// Reads the counters now.
    pub async fn read(admin: &PgPool) -> Result<Counters> {
        let (next_xid, wal_bytes, wal_syncs): (i64, i64, i64) = sqlx::query_as(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
                    (SELECT wal_sync FROM pg_stat_wal)",
        )
        .fetch_one(admin)
        .await?;
        Ok(Counters {
            next_xid,
            wal_bytes,
            wal_syncs,
        })
    }

    /// Reads the counters after a short pause, so that backends that just exited have
    /// flushed their statistics.
    pub async fn read_settled(admin: &PgPool) -> Result<Counters> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Counters::read(admin).await
    }

    /// `later - self`, per `unit` (steps, runs...).
    pub fn per(&self, later: &Counters, unit: f64) -> Costs {
        Costs {
            write_txns: (later.next_xid - self.next_xid) as f64 / unit,
            wal_bytes: (later.wal_bytes - self.wal_bytes) as f64 / unit,
            wal_syncs: (later.wal_syncs - self.wal_syncs) as f64 / unit,
        }
    }
}

/// What a unit of work (a step, a run) cost the database, from [`Counters`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Costs {
    /// Transactions that wrote (commits that flush WAL).
    pub write_txns: f64,
    /// WAL bytes written.
    pub wal_bytes: f64,
    /// WAL fsyncs (approximate, see [`Counters::wal_syncs`]).
    pub wal_syncs: f64,
}

/// CPU time used so far by the benchmark's processes (this one and its worker processes)
/// and by every Postgres process, from /proc. A backend that exits between two snapshots
/// takes its CPU time with it, so snapshots are taken while the scenario's connections are
/// still open.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    /// Seconds of CPU used by processes named `tasks-bench`.
    pub client: f64,
    /// Seconds of CPU used by processes named `postgres`.
    pub postgres: f64,
    /// When the snapshot was taken.
    pub at: Option<Instant>,
}

/// CPU used per unit of work between two [`Cpu`] snapshots.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuUse {
    /// Milliseconds of CPU in the benchmark's processes (the engine: worker, client).
    pub client_ms: f64,
    /// Milliseconds of CPU in Postgres.
    pub postgres_ms: f64,
    /// Share of all CPUs of the machine busy with either, in percent, over the interval.
    pub busy_pct: f64,
}

impl Cpu {
    /// Reads every process's CPU time (clock ticks of 1/100 s, Linux's `USER_HZ`).
    pub fn read() -> Cpu {
        const TICKS_PER_SECOND: f64 = 100.0;
        let mut cpu = Cpu {
            at: Some(Instant::now()),
            ..Cpu::default()
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return cpu;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ... utime stime: fields 14 and 15, counted after `)`.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = &stat[open + 1..close];
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let seconds = (ticks(11) + ticks(12)) / TICKS_PER_SECOND;
            if comm == "tasks-bench" {
                cpu.client += seconds;
            } else if comm == "postgres" {
                cpu.postgres += seconds;
            }
        }
        cpu
    }

    /// CPU used from `self` to `later`, per `unit`.
    pub fn per(&self, later: &Cpu, unit: f64) -> CpuUse {
        let wall = match (self.at, later.at) {
            (Some(from), Some(to)) => to.duration_since(from).as_secs_f64(),
            _ => 0.0,
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let client = later.client - self.client;
        let postgres = later.postgres - self.postgres;
        CpuUse {
            client_ms: client * 1000.0 / unit,
            postgres_ms: postgres * 1000.0 / unit,
            busy_pct: if wall > 0.0 {
                (client + postgres) / (wall * cpus) * 100.0
            } else {
                0.0
            },
        }
    }
}

/// Waits until every one of `expected` runs of `namespace` completed; fails when one failed
/// or was canceled, or after `timeout`. Polls every 20 ms on the admin pool (the engine's
/// pool is left alone).
pub async fn wait_completed(
    admin: &PgPool,
    namespace: &str,
    expected: i64,
    timeout: Duration,
) -> Result<()> {
    let mut completed = 0;
    let probe = async || -> Result<Option<()>> {
        let (done, broken): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'completed'),
                    count(*) FILTER (WHERE status IN ('failed', 'canceled'))
               FROM tasks.workflow_runs WHERE namespace = $1",
        )
        .bind(namespace)
        .fetch_one(admin)
        .await?;
        if broken > 0 {
            return Err(format!("{broken} runs of {namespace} failed or were canceled").into());
        }
        completed = done;
        Ok((done >= expected).then_some(()))
    };
    match wait::poll(timeout, Duration::from_millis(20), probe).await {
        Ok(()) => Ok(()),
        Err(PollError::Failed(error)) => Err(error),
        Err(PollError::TimedOut { .. }) => Err(format!(
            "only {completed} of {expected} runs of {namespace} completed within {timeout:?}"
        )
        .into()),
    }
}

/// When the first run of `namespace` was claimed and the last one finished (database clock).
pub async fn run_span(admin: &PgPool, namespace: &str) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
    let (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = sqlx::query_as(
        "SELECT min(started_at), max(finished_at) FROM tasks.workflow_runs WHERE namespace = $1",
    )
    .bind(namespace)
    .fetch_one(admin)
    .await?;
    match (first, last) {
        (Some(first), Some(last)) => Ok((first, last)),
        _ => Err(format!("no finished runs in {namespace}").into()),
    }
}

/// Seconds from `from` to `to`.
pub fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// Host and port of the database URL (`None` host for a Unix socket).
fn endpoint(url: &str) -> Result<(Option<String>, u16)> {
    let options: PgConnectOptions = url.parse()?;
    let host = options.get_host();
    let host = (!host.starts_with('/')).then(|| host.to_owned());
    Ok((host, options.get_port()))
}

/// This process's TCP sockets connected to the database port.
#[allow(unsafe_code)] // Borrows this process's own open sockets by descriptor.
pub fn pg_sockets(url: &str) -> Result<BTreeSet<RawFd>> {
    let (host, port) = endpoint(url)?;
    let mut found = BTreeSet::new();
    if host.is_none() {
        return Ok(found);
    }
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .map(|target| target.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        // SAFETY: the fd was open a moment ago and this process closes sockets only when a
        // pool drops a connection, which the benchmark does not do while it inspects them;
        // the borrow ends within this iteration.
        let fd_ref = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd_ref);
        let peer_port = socket
            .peer_addr()
            .ok()
            .and_then(|address| address.as_socket())
            .map(|address| address.port());
        if peer_port == Some(port) {
            found.insert(fd);
        }
    }
    Ok(found)
}

/// The database sockets opened since `before` was taken.
pub fn new_pg_sockets(url: &str, before: &BTreeSet<RawFd>) -> Result<Vec<RawFd>> {
    Ok(pg_sockets(url)?.difference(before).copied().collect())
}

/// TCP_NODELAY of each socket in `fds`.
#[allow(unsafe_code)] // Borrows this process's own open sockets by descriptor.
pub fn nodelay(fds: &[RawFd]) -> Result<Vec<bool>> {
    fds.iter()
        .map(|&fd| {
            // SAFETY: see `pg_sockets`; the borrow does not outlive this call.
            let fd_ref = unsafe { BorrowedFd::borrow_raw(fd) };
            Ok(socket2::SockRef::from(&fd_ref).tcp_nodelay()?)
        })
        .collect()
}

/// Sets TCP_NODELAY on each socket in `fds`; returns how many were set.
#[allow(unsafe_code)] // Borrows this process's own open sockets by descriptor.
pub fn set_nodelay(fds: &[RawFd], on: bool) -> Result<usize> {
    for &fd in fds {
        // SAFETY: see `pg_sockets`; the borrow does not outlive this call.
        let fd_ref = unsafe { BorrowedFd::borrow_raw(fd) };
        socket2::SockRef::from(&fd_ref).set_tcp_nodelay(on)?;
    }
    Ok(fds.len())
}
