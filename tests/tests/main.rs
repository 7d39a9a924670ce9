//! The integration tests, in one test binary: every file of this directory is a module
//! of it, but three that need a link-time registry of their own (declared in `Cargo.toml`):
//! `duplicate_steps.rs` and `e2e_identity.rs` declare two steps with one name on purpose,
//! and `e2e_schedules.rs` declares a schedule that every worker of its binary fires. A
//! workflow or step of the others is named uniquely across them all. One binary is
//! compiled and linked once, where a binary per file monomorphized the same async code and
//! linked the whole dependency tree once per file. nextest still runs every test in a
//! process of its own, so link-time registrations, global recorders and subscribers stay
//! per test.

mod browser;
#[macro_use]
mod support;

mod call_names;
mod cli;
mod conformance_pgbouncer;
mod conformance_postgres;
mod conformance_sqlite;
mod corrupt_steps;
mod dashboard;
mod e2e_children;
mod e2e_continue;
mod e2e_derived_keys;
mod e2e_events;
mod e2e_execution;
mod e2e_fence;
mod e2e_flow;
mod e2e_idempotency;
mod e2e_lifecycle;
mod e2e_queues;
mod e2e_recorded;
mod e2e_recovery;
mod e2e_retention;
mod e2e_retry;
mod e2e_retry_after;
mod e2e_saga;
mod e2e_select;
mod e2e_signal;
mod e2e_spawn;
mod e2e_start_in;
mod e2e_state;
mod e2e_status;
mod e2e_step_args;
mod e2e_traces;
mod e2e_verify;
mod examples;
mod http_api;
mod limits;
mod limits_props;
mod lost_acks;
mod metrics;
mod migrations;
mod notifications;
mod postgres_background;
mod postgres_pgbouncer;
mod postgres_pool;
mod postgres_restart;
mod registry;
mod replay_props;
mod sqlite;
mod sqlite_processes;
mod testing_kit;

/// With `autotests = false`, a test file that is neither a module here nor a `[[test]]` of
/// `Cargo.toml` would never be compiled: every file of this directory must be one of them.
#[test]
fn every_test_file_is_compiled() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"),
    )
    .unwrap();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        if module == "main" {
            continue;
        }
        files += 1;
        let in_main = main.lines().any(|line| line == format!("mod {module};"));
        let own_binary = manifest.contains(&format!("path = \"tests/{name}\""));
        assert!(
            in_main || own_binary,
            "tests/tests/{name} is compiled by no test target: add `mod {module};` to \
             tests/tests/main.rs (or a [[test]] to tests/Cargo.toml)"
        );
        assert!(
            !(in_main && own_binary),
            "tests/tests/{name} is compiled twice"
        );
    }
    assert!(
        files > 30,
        "only {files} test files found in {}",
        dir.display()
    );
}
