//! What the figures were measured on: the machine, the database, and whether sqlx sets
//! TCP_NODELAY.

use serde::Serialize;
use sqlx::postgres::PgPool;
use tasks::postgres::PgStore;

use crate::Result;
use crate::db;

/// The machine and database the figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// When the benchmark started (UTC).
    pub date: String,
    /// Logical CPUs available to this process.
    pub nproc: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// `MemTotal` from /proc/meminfo, MiB.
    pub memory_mib: u64,
    /// Kernel release.
    pub kernel: String,
    /// `git rev-parse --short HEAD`, with `+changes` when tracked files were modified.
    pub git_commit: Option<String>,
    /// `SELECT version()`.
    pub postgres_version: String,
    /// `SHOW fsync`.
    pub fsync: String,
    /// `SHOW synchronous_commit`.
    pub synchronous_commit: String,
    /// `SHOW wal_sync_method`.
    pub wal_sync_method: String,
    /// `SHOW commit_delay` (µs).
    pub commit_delay: String,
    /// `SHOW shared_buffers`.
    pub shared_buffers: String,
    /// `SHOW max_connections`.
    pub max_connections: String,
    /// Other client sessions busy in the database when the benchmark started (they would
    /// disturb the figures).
    pub other_active_sessions: i64,
    /// Rows in `tasks.workflow_runs` outside the benchmark's namespaces at the start.
    pub other_runs: i64,
    /// How the database is reached.
    pub connection: String,
    /// /proc/loadavg (1, 5, 15 min) when the benchmark started: other work on this machine
    /// disturbs the figures.
    pub load_average_start: Option<String>,
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> Option<String> {
    let text = read("/proc/loadavg");
    let fields: Vec<&str> = text.split_whitespace().take(3).collect();
    (fields.len() == 3).then(|| fields.join(" "))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Collects [`Machine`].
pub async fn machine(admin: &PgPool, url: &str) -> Result<Machine> {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let memory_mib = read("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib / 1024);
    let git_commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .map(|commit| {
            let dirty = std::process::Command::new("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .output()
                .is_ok_and(|output| !output.stdout.is_empty());
            if dirty {
                format!("{commit}+changes")
            } else {
                commit
            }
        });
    let show = |setting: &'static str| async move {
        sqlx::query_scalar::<_, String>(&format!("SHOW {setting}"))
            .fetch_one(admin)
            .await
    };
    let (other_active_sessions, other_runs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_stat_activity
                  WHERE backend_type = 'client backend' AND state <> 'idle'
                    AND pid <> pg_backend_pid()),
                (SELECT count(*) FROM tasks.workflow_runs WHERE namespace NOT LIKE 'tasks-bench:%')",
    )
    .fetch_one(admin)
    .await?;
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    Ok(Machine {
        date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
        nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_mib,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        git_commit,
        postgres_version: sqlx::query_scalar("SELECT version()")
            .fetch_one(admin)
            .await?,
        fsync: show("fsync").await?,
        synchronous_commit: show("synchronous_commit").await?,
        wal_sync_method: show("wal_sync_method").await?,
        commit_delay: show("commit_delay").await?,
        shared_buffers: show("shared_buffers").await?,
        max_connections: show("max_connections").await?,
        other_active_sessions,
        other_runs,
        connection: if options.get_host().starts_with('/') {
            format!("Unix socket {}", options.get_host())
        } else {
            format!("TCP {}:{}", options.get_host(), options.get_port())
        },
        load_average_start: load_average(),
    })
}

/// Whether sqlx sets TCP_NODELAY, from its source and from the live sockets.
#[derive(Debug, Clone, Serialize)]
pub struct Nodelay {
    /// The `sqlx-core` version in Cargo.lock.
    pub sqlx_core_version: String,
    /// Where in the sqlx source TCP_NODELAY is set, when the source was found.
    pub source: Option<String>,
    /// Database sockets of a fresh engine pool that were checked.
    pub sockets_checked: usize,
    /// How many of them have TCP_NODELAY on (`getsockopt`).
    pub sockets_with_nodelay: usize,
}

/// The `sqlx-core` version this workspace locks.
fn sqlx_core_version() -> String {
    let lock = include_str!("../../Cargo.lock");
    lock.split("[[package]]")
        .find(|package| package.contains("name = \"sqlx-core\""))
        .and_then(|package| {
            package
                .lines()
                .find_map(|line| line.strip_prefix("version = "))
                .map(|version| version.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Finds `set_nodelay(true)` in the registry copy of sqlx-core, if the source is there.
fn find_in_source(version: &str) -> Option<String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".cargo"))
        })?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    for registry in registries.flatten() {
        let file = registry
            .path()
            .join(format!("sqlx-core-{version}/src/net/socket/mod.rs"));
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let lines: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| line.contains("set_nodelay(true)"))
            .map(|(index, _)| index + 1)
            .collect();
        return Some(if lines.is_empty() {
            format!("{}: no set_nodelay(true) found", file.display())
        } else {
            format!(
                "{} (connect_tcp) calls set_nodelay(true) on every TCP stream it opens, line(s) {:?}; Unix sockets have no Nagle algorithm",
                file.display(),
                lines
            )
        });
    }
    None
}

/// Checks TCP_NODELAY on the sockets of a fresh, warm engine pool.
pub async fn nodelay(url: &str) -> Result<Nodelay> {
    let version = sqlx_core_version();
    let before = db::pg_sockets(url)?;
    let store = PgStore::connect(url).await?;
    db::warm(store.pool(), db::ENGINE_POOL_SIZE).await?;
    let sockets = db::new_pg_sockets(url, &before)?;
    let on = db::nodelay(&sockets)?;
    store.pool().close().await;
    Ok(Nodelay {
        source: find_in_source(&version),
        sqlx_core_version: version,
        sockets_checked: on.len(),
        sockets_with_nodelay: on.iter().filter(|on| **on).count(),
    })
}
