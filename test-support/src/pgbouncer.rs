//! A PgBouncer of a test's own, in front of the test server: its own configuration in a
//! temporary directory, its own free port, trust authentication, stopped when the guard is
//! dropped (and, should the test process die first, by a watchdog within a second).
//!
//! PgBouncer is Debian's `pgbouncer` package (`scripts/test.sh` installs it). Where it is
//! missing, [`PgBouncer::start`] says so: a test then skips, except in CI (`CI` set), where
//! [`PgBouncer::start_or_skip`] fails it instead, so that a CI machine without PgBouncer
//! does not pass the tests silently.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How a [`PgBouncer`] pools.
#[derive(Debug, Clone)]
pub struct Config {
    /// `pool_mode`: `transaction`, `session` or `statement`.
    pub pool_mode: &'static str,
    /// `default_pool_size`: server connections per database and user.
    pub default_pool_size: u32,
    /// `ignore_startup_parameters`: startup parameters PgBouncer accepts and drops (sqlx
    /// sends `extra_float_digits` unless told not to).
    pub ignore_startup_parameters: &'static str,
    /// The server PgBouncer forwards to.
    pub server_host: String,
    /// Its port.
    pub server_port: u16,
}

impl Config {
    /// Transaction pooling with `default_pool_size` server connections, in front of
    /// `host:port`.
    pub fn transaction(default_pool_size: u32, host: &str, port: u16) -> Self {
        Config {
            pool_mode: "transaction",
            default_pool_size,
            ignore_startup_parameters: "",
            server_host: host.to_owned(),
            server_port: port,
        }
    }
}

/// A running PgBouncer; [`Drop`] stops it and removes its directory.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

/// PgBouncers started by this process so far, for unique directories.
static STARTED: AtomicU32 = AtomicU32::new(0);

impl PgBouncer {
    /// Starts a PgBouncer with `config` on a free port of 127.0.0.1; returns once it
    /// accepts connections. `Err(reason)` when PgBouncer is not installed or does not start.
    pub fn start(config: &Config) -> Result<PgBouncer, String> {
        let program =
            find_program().ok_or("pgbouncer is not installed (Debian's `pgbouncer` package)")?;
        let dir = std::env::temp_dir().join(format!(
            "tasks-pgbouncer-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let mut last_error = String::new();
        // A few tries: another process may take the port between the check and the start.
        for _ in 0..5 {
            std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
            let port = free_port()?;
            write_config(&dir, port, config)?;
            let child = spawn(&program, &dir)?;
            let mut bouncer = PgBouncer {
                child,
                port,
                dir: dir.clone(),
            };
            match bouncer.wait_until_listening(Duration::from_secs(10)) {
                Ok(()) => return Ok(bouncer),
                Err(error) => {
                    last_error = error;
                    // Not dropped: that would remove the directory the next try writes to.
                    bouncer.stop();
                    std::mem::forget(bouncer);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(format!("pgbouncer did not start: {last_error}"))
    }

    /// [`PgBouncer::start`]; where it cannot, `None` after printing why (the test skips),
    /// but in CI (`CI` set to anything but `false` or empty) a panic.
    pub fn start_or_skip(config: &Config) -> Option<PgBouncer> {
        match PgBouncer::start(config) {
            Ok(bouncer) => Some(bouncer),
            Err(reason) if in_ci() => panic!(
                "{reason}; CI must run the PgBouncer tests (scripts/test.sh installs pgbouncer)"
            ),
            Err(reason) => {
                eprintln!("skipped: {reason}");
                None
            }
        }
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `postgres://` URL of `database` through this PgBouncer, as `user`.
    pub fn url(&self, user: &str, database: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{database}", self.port)
    }

    /// What PgBouncer logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Stops the watchdog, which stops PgBouncer (a `SIGTERM`: the watchdog's trap must run).
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }

    fn wait_until_listening(&mut self, within: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("pgbouncer exited ({status}): {}", self.log()));
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if started.elapsed() > within {
                return Err(format!("pgbouncer did not listen within {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| !value.is_empty() && value != "false")
}

fn find_program() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("pgbouncer"))
            .find(|program| program.is_file())
    });
    // Debian installs it in /usr/sbin, which is not on every user's PATH.
    on_path.or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/pgbouncer");
        sbin.is_file().then_some(sbin)
    })
}

/// A port of 127.0.0.1 that nothing listens on now.
fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|error| format!("no free port: {error}"))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| format!("no free port: {error}"))
}

fn write_config(dir: &Path, port: u16, config: &Config) -> Result<(), String> {
    let auth_file = dir.join("userlist.txt");
    // Trust: PgBouncer checks no password, but takes only the users of its auth file.
    std::fs::write(&auth_file, "\"postgres\" \"\"\n")
        .map_err(|error| format!("{}: {error}", auth_file.display()))?;
    let ini = format!(
        "[databases]\n\
         * = host={host} port={server_port}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {auth_file}\n\
         pool_mode = {pool_mode}\n\
         default_pool_size = {pool_size}\n\
         min_pool_size = 0\n\
         reserve_pool_size = 0\n\
         max_client_conn = 1000\n\
         ignore_startup_parameters = {ignore}\n\
         logfile = {log}\n\
         log_connections = 0\n\
         log_disconnections = 0\n",
        host = config.server_host,
        server_port = config.server_port,
        auth_file = auth_file.display(),
        pool_mode = config.pool_mode,
        pool_size = config.default_pool_size,
        ignore = config.ignore_startup_parameters,
        log = dir.join("pgbouncer.log").display(),
    );
    let path = dir.join("pgbouncer.ini");
    std::fs::write(&path, ini).map_err(|error| format!("{}: {error}", path.display()))
}

/// Starts PgBouncer on the configuration in `dir` under a watchdog shell that stops it when
/// this process is gone (a test killed by its harness drops no guard).
fn spawn(program: &Path, dir: &Path) -> Result<Child, String> {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    if is_root {
        // PgBouncer refuses to run as root; `-u` makes it switch to the `postgres` user,
        // which must be able to write its log there.
        let chowned = Command::new("chown")
            .args(["-R", "postgres"])
            .arg(dir)
            .status()
            .map_err(|error| format!("chown: {error}"))?;
        if !chowned.success() {
            return Err(format!("chown -R postgres {} failed", dir.display()));
        }
    }
    let script = "\"$1\" $2 \"$3/pgbouncer.ini\" & bouncer=$!
trap 'kill $bouncer 2>/dev/null' TERM INT
while kill -0 \"$4\" 2>/dev/null && kill -0 $bouncer 2>/dev/null; do sleep 0.5; done
kill $bouncer 2>/dev/null; wait $bouncer; rm -rf \"$3\"";
    Command::new("sh")
        .args(["-c", script, "pgbouncer-watchdog"])
        .arg(program)
        .arg(if is_root { "-u postgres" } else { "" })
        .arg(dir)
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("cannot start pgbouncer: {error}"))
}
