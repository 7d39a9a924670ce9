//! A Postgres cluster of a test's own, which the test may stop, start and restart: never
//! the tests' shared server. Made the way `scripts/chaos.sh` makes its own (the Debian
//! cluster tools, trust authentication, a free port), and dropped when the guard is
//! (on a panic too).

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A Postgres cluster this process created; [`Drop`] stops and removes it.
#[derive(Debug)]
pub struct Cluster {
    version: String,
    name: String,
    port: u16,
}

/// Clusters made by this process so far, for unique names.
static MADE: AtomicU32 = AtomicU32::new(0);

impl Cluster {
    /// Creates and starts a cluster of the newest installed Postgres on a free port.
    ///
    /// `Err(reason)` when this machine cannot: the cluster tools are not installed, or the
    /// process is not root (they run `initdb` as the `postgres` user). A test skips then,
    /// printing the reason. Panics when the tools are there but fail.
    pub fn create() -> Result<Cluster, String> {
        if !on_path("pg_createcluster") {
            return Err("pg_createcluster is not installed (Debian's postgresql-common)".into());
        }
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("creating a Postgres cluster needs root".into());
        }
        let version = newest_version()?;
        // A few tries: a test of another process may take the port between the check and
        // the start.
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            let name = format!(
                "tasks_test_{}_{}",
                std::process::id(),
                MADE.fetch_add(1, Ordering::Relaxed)
            );
            let created = output(
                "pg_createcluster",
                &[
                    "--start-conf=manual",
                    "--port",
                    &port.to_string(),
                    "-o",
                    "fsync=off",
                    &version,
                    &name,
                    "--",
                    "--auth=trust",
                    "--no-sync",
                ],
            );
            if !created.status.success() {
                last_error = describe("pg_createcluster", &created);
                continue;
            }
            let cluster = Cluster {
                version: version.clone(),
                name,
                port,
            };
            match cluster.ctl("start") {
                Ok(()) => return Ok(cluster),
                // Dropped here, and another port tried.
                Err(error) => last_error = error,
            }
        }
        panic!("could not create a Postgres cluster: {last_error}");
    }

    /// The URL of the cluster's `postgres` database, as its superuser.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Restarts the server (fast shutdown: every session is ended, as a real restart
    /// does); returns once it accepts connections again.
    pub fn restart(&self) {
        self.ctl("restart")
            .unwrap_or_else(|error| panic!("{error}"));
    }

    /// Stops the server (fast shutdown).
    pub fn stop(&self) {
        self.ctl("stop").unwrap_or_else(|error| panic!("{error}"));
    }

    /// Starts the stopped server; returns once it accepts connections.
    pub fn start(&self) {
        self.ctl("start").unwrap_or_else(|error| panic!("{error}"));
    }

    fn ctl(&self, action: &str) -> Result<(), String> {
        let done = output(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &self.version,
                &self.name,
                action,
            ],
        );
        if done.status.success() {
            Ok(())
        } else {
            Err(describe(
                &format!("pg_ctlcluster {} {} {action}", self.version, self.name),
                &done,
            ))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let dropped = output("pg_dropcluster", &["--stop", &self.version, &self.name]);
        if !dropped.status.success() {
            eprintln!(
                "{}",
                describe(
                    &format!("pg_dropcluster --stop {} {}", self.version, self.name),
                    &dropped
                )
            );
        }
    }
}

/// The newest Postgres version whose server is installed.
fn newest_version() -> Result<String, String> {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|error| format!("no Postgres server installed: {error}"))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    versions
        .pop()
        .map(|version| version.to_string())
        .ok_or_else(|| "no Postgres server installed in /usr/lib/postgresql".into())
}

/// A port in 5500-6499 that no cluster is configured on and nothing listens on, drawn at
/// random so that tests of several processes rarely meet.
fn free_port() -> Result<u16, String> {
    let listed = output("pg_lsclusters", &["-h"]);
    let configured: Vec<u16> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2)?.parse().ok())
        .collect();
    let start = uuid::Uuid::new_v4().as_u128() % 1000;
    (0..1000)
        .map(|offset| 5500 + ((start + offset) % 1000) as u16)
        .find(|port| {
            !configured.contains(port)
                && std::net::TcpStream::connect(("127.0.0.1", *port)).is_err()
        })
        .ok_or_else(|| "no free port in 5500-6499".into())
}

fn output(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error}"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
