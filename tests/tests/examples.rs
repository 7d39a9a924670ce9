//! Every example of `examples/` is run, not only compiled: each on a SQLite file of its own,
//! within a generous bound, and it must exit with success and print its expected line.
//!
//! The examples are built by the test command with the test binaries (`cargo test` builds a
//! workspace's examples); a missing one fails its test with how to build it. An example
//! that serves until Ctrl-C (the dashboard) has a `--once` flag that serves one request of
//! its own and exits.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// How long one example may take (they take 0.3 to 8 s on an idle machine).
const BOUND: Duration = Duration::from_secs(120);

/// The compiled example `name`: `target/<profile>/examples/<name>`, beside the directory of
/// this test binary (`target/<profile>/deps/`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in target/<profile>/deps");
    let path = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is not built: run `cargo build -p tasks-examples --examples` (the test command builds it)",
        path.display()
    );
    path
}

/// Runs example `name` with `args` on a fresh SQLite file and checks that it exits with
/// success within [`BOUND`] and prints `expected` on a line of its standard output.
async fn run(name: &str, args: &[&str], expected: &str) {
    let database = tasks_test_support::sqlite::temp_database_path();
    let mut command = tokio::process::Command::new(example(name));
    command
        .args(args)
        .env("DATABASE_URL", format!("sqlite://{}", database.display()))
        .env_remove("RUST_LOG")
        .env_remove("DASHBOARD_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(BOUND, command.output())
        .await
        .unwrap_or_else(|_| panic!("example {name} did not finish within {BOUND:?}"))
        .unwrap_or_else(|error| panic!("cannot run example {name}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "example {name} {args:?} exited with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(
        stdout.lines().any(|line| line.contains(expected)),
        "example {name} {args:?} did not print {expected:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// One `#[tokio::test]` per example (`name [args] => "expected line"`), and `RUN`, the
/// names of the examples run.
macro_rules! examples {
    ($($name:ident $([$($arg:literal),*])? => $expected:literal),* $(,)?) => {
        const RUN: &[&str] = &[$(stringify!($name)),*];
        $(
            #[tokio::test]
            async fn $name() {
                run(stringify!($name), &[$($($arg),*)?], $expected).await;
            }
        )*
    };
}

/// Every `[[example]]` of `examples/Cargo.toml` is run here: a new example needs a line
/// below.
#[test]
fn every_example_is_run() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("examples/Cargo.toml");
    let mut declared: Vec<&str> = text
        .split("[[example]]")
        .skip(1)
        .filter_map(|section| {
            let line = section.lines().find(|line| line.starts_with("name"))?;
            line.split('"').nth(1)
        })
        .collect();
    let mut run = RUN.to_vec();
    declared.sort_unstable();
    run.sort_unstable();
    assert_eq!(declared, run, "examples declared vs. examples run");
}

examples! {
    quickstart => "result: Receipt { order_id: 42",
    parallel_steps => "(three 300 ms steps, run concurrently)",
    branches => "africa/fetch_temperature:1 -> 15.0",
    durable_sleep => "result: sent to grace after",
    recorded_values => "same values in every execution: true",
    verify_replay => "gate: rename blocked, thanks passes",
    continue_as_new => "result: stopped (done for today) after",
    retry => "result: s3://bucket/report.pdf#1028",
    rate_limited => "next run: synced account-7",
    retry_and_fork => "result: 60",
    saga => "result: failed (card 4242 declined)",
    per_customer_limit => "acme: acme-8.csv done after",
    fan_out => "report: Report { total_cents: 123450, failed_regions: [\"atlantis\"] }",
    progress => "result: 38000 bytes",
    queues => "queue syncs: concurrency None, per key Some(1), rate None",
    retention => "cleaned up 1 run(s)",
    schedule => "runs started this time, one per slot",
    traces => "replay steps=2",
    approval => "result: paid 4200 cents to grace (approved by ann)",
    select => "a day later (virtual clock): rejected: nobody decided in time",
    cli ["tasks", "workflows", "list"] => "greet  1",
    dashboard ["--once"] => "GET /tasks/: HTTP/1.1 200 OK",
    http_api ["--once"] => "POST /v1/namespaces/default/workflows/send-invoice/runs: HTTP/1.1 201 Created",
}

/// `docs/openapi.json` is what the `http_api` example's `--openapi` prints: the OpenAPI
/// document of the HTTP API with that binary's workflows. `TASKS_UPDATE_OPENAPI=1`
/// rewrites the copy instead of comparing.
#[tokio::test]
async fn openapi_document_is_checked_in() {
    let output = tokio::process::Command::new(example("http_api"))
        .arg("--openapi")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("the http_api example runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout).expect("UTF-8");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    if std::env::var_os("TASKS_UPDATE_OPENAPI").is_some() {
        std::fs::write(path, &generated).expect("write docs/openapi.json");
        return;
    }
    let checked_in = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "docs/openapi.json differs from what the code generates: regenerate it with \
         `TASKS_UPDATE_OPENAPI=1 cargo nextest run -p tasks-tests -E 'test(openapi_document_is_checked_in)'` \
         and review the diff"
    );
}
