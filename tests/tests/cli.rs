//! The command line (`tasks::cli`), parsed from argument lists and executed against each
//! store with its output captured.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Backend, TestStore, bump, client, worker};
use tasks::cli::clap::Parser as _;
use tasks::cli::{Cli, Exit};
use tasks::{ListRuns, RunStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Greeting {
    name: String,
    /// How many greetings.
    #[schemars(range(min = 1, max = 5))]
    times: u32,
}

#[step]
async fn compose(name: &str, times: u32) -> Result<String, std::io::Error> {
    Ok(format!("hello {name}").repeat(times as usize))
}

#[derive(Debug, Serialize, Deserialize)]
struct Flaky;

impl std::fmt::Display for Flaky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("flaky on purpose")
    }
}

impl std::error::Error for Flaky {}

#[step(retry(max_attempts = 3, initial_interval = "10ms"))]
async fn deliver(text: &str) -> Result<usize, Flaky> {
    let run_id = WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default();
    if bump(run_id, "deliver") == 1 {
        return Err(Flaky);
    }
    Ok(text.len())
}

/// Greets someone, a few times.
///
/// Second paragraph, not shown in listings.
#[workflow(name = "cli-greet", version = "2")]
async fn greet(_ctx: WorkflowContext, input: Greeting) -> Result<usize, WorkflowError> {
    let text = compose(&input.name, input.times).await?;
    Ok(deliver(&text).await?)
}

/// An approval, sent to `cli-approve` runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Approval {
    approved: bool,
    by: String,
}

impl tasks::Event for Approval {
    const TOPIC: &'static str = "cli-approval";
}

/// Waits for an approval and returns who gave it.
#[workflow(name = "cli-approve", events(Approval))]
async fn approve(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    Ok(ctx.wait_for_event::<Approval>().await?.by)
}

/// Publishes two keys, one of them twice.
#[workflow(name = "cli-publish")]
async fn publish(ctx: WorkflowContext) -> Result<(), WorkflowError> {
    ctx.set_state("progress", &json!({ "done": 1 })).await?;
    ctx.set_state("phase", "copying").await?;
    ctx.set_state("progress", &json!({ "done": 2 })).await?;
    Ok(())
}

/// The outcome of one command line.
struct Ran {
    exit: Exit,
    out: String,
    err: String,
}

fn parse(args: &[&str]) -> Cli {
    let args = std::iter::once("tasks").chain(args.iter().copied());
    Cli::try_parse_from(args).unwrap_or_else(|error| panic!("{error}"))
}

/// Runs `args` on the test store's client (as an application that mounts the CLI does).
async fn cli(store: &TestStore, args: &[&str]) -> Ran {
    let cli = parse(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli
        .tasks
        .execute_with(&client(store), &mut out, &mut err)
        .await;
    ran(exit, out, err)
}

/// Runs `args` connecting by URL, as the standalone program does.
async fn cli_url(store: &TestStore, args: &[&str]) -> Ran {
    let url = store.url();
    let mut full = vec!["--database-url", &url, "--namespace", store.namespace()];
    full.extend_from_slice(args);
    let cli = parse(&full);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli.execute(&mut out, &mut err).await;
    ran(exit, out, err)
}

fn ran(exit: Exit, out: Vec<u8>, err: Vec<u8>) -> Ran {
    let ran = Ran {
        exit,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    };
    eprintln!("exit {exit:?}\n--- out\n{}--- err\n{}", ran.out, ran.err);
    ran
}

async fn run_count(store: &TestStore) -> usize {
    store
        .list_runs(ListRuns::default())
        .await
        .unwrap()
        .data
        .len()
}

fn started_id(ran: &Ran) -> Uuid {
    ran.out.trim().parse().expect("--quiet prints the run id")
}

async fn start_with_valid_input_stores_the_run(backend: Backend) {
    let store = backend.store().await;
    let ran = cli_url(
        &store,
        &[
            "start",
            "cli-greet",
            "--input",
            r#"{"name":"ada","times":2}"#,
            "--idempotency-key",
            "k1",
            "--delay",
            "1h",
            "-q",
        ],
    )
    .await;
    assert_eq!(ran.exit, Exit::Success);
    let id = started_id(&ran);
    let run = store.get_run(id).await.unwrap().expect("the run is stored");
    assert_eq!(run.workflow_name, "cli-greet");
    assert_eq!(run.version.as_deref(), Some("2"));
    assert_eq!(run.input, Some(json!({"name": "ada", "times": 2})));
    assert_eq!(run.idempotency_key.as_deref(), Some("k1"));
    let delay = run.available_at.unwrap() - run.created_at;
    assert!(delay > chrono::TimeDelta::minutes(59), "{delay}");

    // From a file, not quiet.
    let path = std::env::temp_dir().join(format!("cli-input-{}.json", Uuid::new_v4()));
    std::fs::write(&path, r#"{"name":"bob","times":1}"#).unwrap();
    let input = format!("@{}", path.display());
    let ran = cli(&store, &["start", "cli-greet", "--input", &input]).await;
    let _ = std::fs::remove_file(&path);
    assert_eq!(ran.exit, Exit::Success);
    assert!(
        ran.out.starts_with("started run ") && ran.out.contains("cli-greet@2"),
        "{}",
        ran.out
    );
    assert_eq!(run_count(&store).await, 2);
}

async fn start_with_invalid_input_prints_every_violation_and_stores_nothing(backend: Backend) {
    let store = backend.store().await;
    let ran = cli(
        &store,
        &[
            "start",
            "cli-greet",
            "--input",
            r#"{"times":9,"extra":true}"#,
        ],
    )
    .await;
    assert_eq!(ran.exit, Exit::Usage);
    assert_eq!(ran.exit.code(), 2);
    assert!(
        ran.err
            .starts_with("error: invalid input for workflow cli-greet@2"),
        "{}",
        ran.err
    );
    assert!(ran.err.contains("at /times:"), "{}", ran.err);
    assert!(
        ran.err.contains("at /:") && ran.err.contains("name"),
        "{}",
        ran.err
    );
    assert!(ran.out.is_empty());

    let ran = cli(&store, &["start", "cli-greet", "--input", "{not json"]).await;
    assert_eq!(ran.exit, Exit::Usage);
    assert!(
        ran.err.starts_with("error: the input is not valid JSON"),
        "{}",
        ran.err
    );

    let ran = cli(&store, &["start", "no-such-workflow"]).await;
    assert_eq!(ran.exit, Exit::NotFound);
    assert_eq!(ran.err.lines().count(), 1, "{}", ran.err);

    assert_eq!(run_count(&store).await, 0);
}

async fn runs_list_prints_a_table_or_json_with_cursors(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let input = json!({"name": name, "times": 1});
        ids.push(client.start_by_name("cli-greet", input).await.unwrap().id());
    }
    client.cancel(ids[0]).await.unwrap();

    let ran = cli(&store, &["runs", "list"]).await;
    assert_eq!(ran.exit, Exit::Success);
    let lines: Vec<&str> = ran.out.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{}",
        ran.out
    );
    assert_eq!(lines.len(), 4, "{}", ran.out);
    assert!(
        lines[1].starts_with(&ids[2].to_string()),
        "newest first: {}",
        ran.out
    );

    let ran = cli(&store, &["runs", "list", "--status", "canceled", "--json"]).await;
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    let runs = document["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["id"], json!(ids[0]));
    assert_eq!(runs[0]["status"], json!("canceled"));

    // Pages of two, newest first, following the printed cursor.
    let ran = cli(&store, &["runs", "list", "--limit", "2", "--json"]).await;
    let first: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(first["runs"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().expect("a next cursor").to_owned();
    let ran = cli(
        &store,
        &["runs", "list", "--limit", "2", "--after", &next, "--json"],
    )
    .await;
    let second: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(second["runs"][0]["id"], json!(ids[0]));
    assert_eq!(second["next"], Value::Null);

    let ran = cli(&store, &["runs", "list", "--limit", "2"]).await;
    assert!(
        ran.out.contains(&format!("next page: --after {next}")),
        "{}",
        ran.out
    );

    let ran = cli(&store, &["runs", "list", "--workflow", "other"]).await;
    assert_eq!(ran.out, "no runs\n");

    let error = Cli::try_parse_from(["tasks", "runs", "list", "--after", "garbage"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("invalid cursor"), "{error}");

    // A namespace past the limits is a usage error naming it, not a database error.
    let long = "n".repeat(tasks::limits::MAX_NAMESPACE_BYTES + 1);
    for namespace in [long.as_str(), "a\0b"] {
        let ran = cli(&store, &["--namespace", namespace, "runs", "list"]).await;
        assert_eq!(ran.exit, Exit::Usage);
        assert!(ran.err.contains("the namespace"), "{}", ran.err);
    }

    // Through the URL and namespace flags too.
    let ran = cli_url(&store, &["runs", "list", "--json"]).await;
    assert_eq!(ran.exit, Exit::Success);
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(document["runs"].as_array().unwrap().len(), 3);
}

async fn runs_show_and_watch_give_the_step_timeline(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let ran = cli(
        &store,
        &[
            "start",
            "cli-greet",
            "--input",
            r#"{"name":"ada","times":2}"#,
            "-q",
        ],
    )
    .await;
    let id = started_id(&ran).to_string();

    let ran = cli(&store, &["runs", "watch", &id, "--interval", "50ms"]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains("✓ compose completed"), "{}", ran.out);
    assert!(
        ran.out.contains("✗ deliver failed") && ran.out.contains("flaky on purpose"),
        "{}",
        ran.out
    );
    assert!(
        ran.out.contains("✓ deliver completed") && ran.out.contains("(attempt 2)"),
        "{}",
        ran.out
    );
    assert!(ran.out.contains("run is completed"), "{}", ran.out);
    worker.shutdown().await;

    let ran = cli(&store, &["runs", "show", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains("status          completed"), "{}", ran.out);
    assert!(
        ran.out
            .contains(r#"input           {"name":"ada","times":2}"#),
        "{}",
        ran.out
    );
    assert!(ran.out.contains("output          18"), "{}", ran.out);
    let timeline: Vec<&str> = ran
        .out
        .lines()
        .skip_while(|l| !l.starts_with('#'))
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(timeline.len(), 4, "{}", ran.out);
    assert!(timeline[0].contains("DURATION") && timeline[0].contains("ATTEMPT"));
    let columns = |line: &str| {
        line.split_whitespace()
            .take(5)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        columns(timeline[1]),
        ["1", "compose", "function", "completed", "1"]
    );
    assert_eq!(
        columns(timeline[2]),
        ["2", "deliver", "function", "failed", "1"]
    );
    assert!(timeline[2].ends_with("flaky on purpose"), "{}", timeline[2]);
    assert_eq!(
        columns(timeline[3]),
        ["3", "deliver", "function", "completed", "2"]
    );
    // The arguments of each call, once per call (the retry of `deliver` had the same).
    let arguments: Vec<&str> = ran
        .out
        .lines()
        .skip_while(|l| *l != "arguments")
        .skip(1)
        .collect();
    assert_eq!(arguments.len(), 2, "{}", ran.out);
    assert_eq!(arguments[0], r#"1   compose(name="ada", times=2)"#);
    assert!(
        arguments[1].starts_with(r#"2   deliver(text="hello ada"#),
        "{}",
        arguments[1]
    );

    let ran = cli(&store, &["runs", "show", &id, "--json"]).await;
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(document["run"]["output"], json!(18));
    assert_eq!(document["steps"].as_array().unwrap().len(), 3);
    assert_eq!(
        document["steps"][0]["args"],
        json!([{ "name": "name", "value": "ada" }, { "name": "times", "value": 2 }])
    );

    // The completed run forks from `deliver`: a new pending run that copies `compose`.
    let ran = cli(&store, &["fork", &id, "--from-step", "deliver"]).await;
    assert_eq!(ran.exit, Exit::Success, "{}", ran.err);
    assert!(
        ran.out
            .contains(&format!("forked from {id} at step deliver: now pending")),
        "{}",
        ran.out
    );
    let forked: Uuid = ran.out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let copied = store.step_history(forked).await.unwrap();
    assert_eq!(copied.len(), 1);
    assert_eq!(copied[0].step_name, "compose");
    let ran = cli(&store, &["fork", &id, "--from-step", "nope"]).await;
    assert_eq!(ran.exit, Exit::NotFound, "{}", ran.err);
    // A step name the store refuses by its limits is invalid input, and nothing is forked.
    let runs = run_count(&store).await;
    let ran = cli(&store, &["fork", &id, "--from-step", "a\0b"]).await;
    assert_eq!(ran.exit, Exit::Usage, "{}", ran.err);
    assert_eq!(run_count(&store).await, runs);
}

async fn cancel_pause_and_resume_change_the_status(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let input = json!({"name": "x", "times": 1});
    let run = client.start_by_name("cli-greet", input).await.unwrap();
    let id = run.id().to_string();
    let status = || async { store.get_run(run.id()).await.unwrap().unwrap().status };

    let ran = cli(&store, &["pause", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert_eq!(status().await, RunStatus::Paused);
    let ran = cli(&store, &["resume", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert_eq!(status().await, RunStatus::Pending);
    let ran = cli(&store, &["cancel", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains("now canceled"), "{}", ran.out);
    assert_eq!(status().await, RunStatus::Canceled);

    // A canceled run cannot be resumed; watching it says how it ended.
    let ran = cli(&store, &["resume", &id]).await;
    assert_eq!(ran.exit, Exit::Failure);
    assert!(
        ran.err.starts_with("error: ") && ran.err.lines().count() == 1,
        "{}",
        ran.err
    );
    let ran = cli(&store, &["runs", "watch", &id]).await;
    assert_eq!(ran.exit, Exit::Failure);

    // A canceled run can be retried, once: it is pending again.
    let ran = cli(&store, &["retry", &id]).await;
    assert_eq!(ran.exit, Exit::Success, "{}", ran.err);
    assert!(ran.out.contains("retried: now pending"), "{}", ran.out);
    assert_eq!(status().await, RunStatus::Pending);
    let ran = cli(&store, &["retry", &id]).await;
    assert_eq!(ran.exit, Exit::Failure);
    assert!(ran.err.contains("cannot retry"), "{}", ran.err);
    // A live run cannot be forked.
    let ran = cli(&store, &["fork", &id, "--from-step", "greet"]).await;
    assert_eq!(ran.exit, Exit::Failure);
    assert!(ran.err.contains("cannot fork"), "{}", ran.err);
}

async fn purge_deletes_old_finished_runs(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let input = json!({"name": "x", "times": 1});
    let start = || client.start_by_name("cli-greet", input.clone());
    let (canceled, paused) = (start().await.unwrap(), start().await.unwrap());
    client.cancel(canceled.id()).await.unwrap();
    client.pause(paused.id()).await.unwrap();

    // Nothing finished a day ago; a live status is refused.
    let ran = cli(&store, &["purge", "--older-than", "1d"]).await;
    assert_eq!(ran.exit, Exit::Success, "{}", ran.err);
    assert!(ran.out.contains("purged 0 "), "{}", ran.out);
    let ran = cli(
        &store,
        &["purge", "--older-than", "0s", "--status", "paused"],
    )
    .await;
    assert_eq!(ran.exit, Exit::Usage, "{}", ran.err);
    assert!(ran.err.contains("not paused"), "{}", ran.err);
    let ran = cli(
        &store,
        &["purge", "--older-than", "0s", "--status", "failed"],
    )
    .await;
    assert!(ran.out.contains("purged 0 "), "{}", ran.out);

    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let ran = cli(
        &store,
        &["purge", "--older-than", "0s", "-s", "canceled,failed"],
    )
    .await;
    assert_eq!(ran.exit, Exit::Success, "{}", ran.err);
    assert!(ran.out.contains("purged 1 finished runs"), "{}", ran.out);
    assert_eq!(store.get_run(canceled.id()).await.unwrap(), None);
    assert!(store.get_run(paused.id()).await.unwrap().is_some());
}

async fn unknown_runs_are_not_found(backend: Backend) {
    let store = backend.store().await;
    let missing = Uuid::now_v7().to_string();
    for args in [
        vec!["runs", "show", &missing],
        vec!["runs", "watch", &missing],
        vec!["runs", "state", &missing],
        vec!["cancel", &missing],
        vec!["pause", &missing],
        vec!["resume", &missing],
        vec!["retry", &missing],
        vec!["fork", &missing, "--from-step", "a"],
    ] {
        let ran = cli(&store, &args).await;
        assert_eq!(ran.exit, Exit::NotFound, "{args:?}");
        assert_eq!(ran.exit.code(), 3);
        assert!(
            ran.err.starts_with("error: ") && ran.err.contains(&missing),
            "{}",
            ran.err
        );
        assert_eq!(ran.err.lines().count(), 1, "{}", ran.err);
    }
}

async fn runs_state_prints_the_published_values(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = publish::start(&client, ()).await.unwrap();
    let id = run.id().to_string();
    let ran = cli(&store, &["runs", "state", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains("published no state"), "{}", ran.out);

    let worker = worker(&store).build().unwrap().spawn();
    run.result_within(Duration::from_secs(20)).await.unwrap();
    worker.shutdown().await;

    let ran = cli(&store, &["runs", "state", &id]).await;
    assert_eq!(ran.exit, Exit::Success);
    let lines: Vec<&str> = ran.out.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{}", ran.out);
    assert!(
        lines[1].starts_with("phase") && lines[1].contains("\"copying\""),
        "{}",
        ran.out
    );
    assert!(
        lines[2].starts_with("progress") && lines[2].contains(r#"{"done":2}"#),
        "{}",
        ran.out
    );

    let ran = cli(&store, &["runs", "state", &id, "--json"]).await;
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(document["run"], json!(id));
    assert_eq!(document["state"].as_array().unwrap().len(), 2);

    let ran = cli(&store, &["runs", "state", &id, "progress", "--json"]).await;
    assert_eq!(ran.exit, Exit::Success);
    let state: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(state["value"], json!({ "done": 2 }));
    assert_eq!(state["version"], json!(2));

    let ran = cli(&store, &["runs", "state", &id, "nothing"]).await;
    assert_eq!(ran.exit, Exit::NotFound);
    assert!(ran.err.contains("published nothing"), "{}", ran.err);

    // A key the store refuses by its limits is invalid input.
    let ran = cli(&store, &["runs", "state", &id, "a\0b"]).await;
    assert_eq!(ran.exit, Exit::Usage, "{}", ran.err);
}

async fn workflows_list_and_schema(backend: Backend) {
    let store = backend.store().await;
    let ran = cli(&store, &["workflows", "list"]).await;
    assert_eq!(ran.exit, Exit::Success);
    let line = ran
        .out
        .lines()
        .find(|l| l.starts_with("cli-greet"))
        .expect("listed");
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        ["cli-greet", "2", "Greets", "someone,", "a", "few", "times."]
    );

    let ran = cli(&store, &["workflows", "schema", "cli-greet"]).await;
    assert_eq!(ran.exit, Exit::Success);
    let schema: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(schema["version"], json!("2"));
    assert_eq!(schema["input"]["properties"]["times"]["maximum"], json!(5));
    assert_eq!(schema["output"]["type"], json!("integer"));
    assert!(ran.out.contains("\n  \"input\""), "pretty printed");

    let ran = cli(
        &store,
        &["workflows", "schema", "cli-greet", "--version", "7"],
    )
    .await;
    assert_eq!(ran.exit, Exit::NotFound);
}

async fn worker_settings_are_checked_before_it_runs(backend: Backend) {
    let store = backend.store().await;
    let ran = cli(&store, &["worker", "--concurrency", "0"]).await;
    assert_eq!(ran.exit, Exit::Usage);
    assert!(
        ran.err.contains("concurrency must be at least 1"),
        "{}",
        ran.err
    );
    assert!(ran.out.is_empty());
}

async fn doctor_passes_on_a_healthy_store(backend: Backend) {
    let store = backend.store().await;
    let ran = cli_url(&store, &["doctor"]).await;
    assert_eq!(ran.exit, Exit::Success, "{}{}", ran.out, ran.err);
    for check in ["connection", "schema", "notifications", "clock"] {
        let line = ran
            .out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(check))
            .expect(check);
        assert!(line.starts_with("ok "), "{line}");
    }
    assert!(ran.out.lines().any(|l| l.contains("worker")));
    assert!(!ran.out.contains("FAIL"));

    // On a store the application opened, the schema is not checked (it did not connect).
    let ran = cli(&store, &["doctor"]).await;
    assert_eq!(ran.exit, Exit::Success, "{}{}", ran.out, ran.err);
    assert!(ran.out.contains("skip  schema"), "{}", ran.out);
    assert!(ran.out.contains("ok    notifications"), "{}", ran.out);
}

#[tokio::test]
async fn an_unreachable_store_is_a_store_error() {
    // An unreachable Postgres fails the same way, once the pool gives up connecting (30 s).
    let cli = parse(&[
        "--database-url",
        "sqlite:///nonexistent-dir/deeper/x.sqlite",
        "runs",
        "list",
    ]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = tokio::time::timeout(Duration::from_secs(60), cli.execute(&mut out, &mut err))
        .await
        .unwrap();
    let err = String::from_utf8(err).unwrap();
    assert_eq!(exit, Exit::Store, "{err}");
    assert!(
        err.starts_with("error: cannot open the SQLite store"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let cli = parse(&["--database-url", "mysql://x@h/db", "migrate"]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(cli.execute(&mut out, &mut err).await, Exit::Usage);
}

#[test]
fn usage_errors_are_clap_errors_with_exit_code_2() {
    for args in [
        vec!["tasks", "runs", "show", "not-a-uuid"],
        vec!["tasks", "start", "x", "--delay", "soon"],
        vec!["tasks", "runs", "list", "--status", "done"],
        vec!["tasks", "nope"],
    ] {
        let error = Cli::try_parse_from(&args).expect_err("a usage error");
        assert_eq!(error.exit_code(), 2, "{args:?}");
    }
}

async fn events_send_validates_the_payload_and_wakes_the_run(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = client
        .start_by_name("cli-approve", json!(null))
        .idempotency_key("exp-1")
        .await
        .unwrap();
    let id = run.id().to_string();

    let bad = cli(
        &store,
        &[
            "events",
            "send",
            "cli-approval",
            "--run",
            &id,
            "--payload",
            r#"{"approved": 1}"#,
        ],
    )
    .await;
    assert_eq!(bad.exit, Exit::Usage, "{}", bad.err);
    assert!(bad.err.contains("2 violations"), "{}", bad.err);
    assert!(bad.err.contains("/approved"), "{}", bad.err);
    let undeclared = cli(&store, &["events", "send", "nope", "--run", &id]).await;
    assert_eq!(undeclared.exit, Exit::Usage);
    assert!(
        undeclared.err.contains("cli-approval"),
        "{}",
        undeclared.err
    );
    let unknown = cli(
        &store,
        &[
            "events",
            "send",
            "cli-approval",
            "--run",
            &Uuid::now_v7().to_string(),
        ],
    )
    .await;
    assert_eq!(unknown.exit, Exit::NotFound, "{}", unknown.err);
    assert!(
        store
            .events()
            .unwrap()
            .list_events(run.id())
            .await
            .unwrap()
            .is_empty()
    );

    let worker = worker(&store).build().unwrap().spawn();
    eventually!(Duration::from_secs(20), {
        let run = store.get_run(run.id()).await.unwrap().unwrap();
        (run.status == RunStatus::Sleeping).then_some(())
    });
    let sent = cli(
        &store,
        &[
            "events",
            "send",
            "cli-approval",
            "--workflow",
            "cli-approve",
            "--key",
            "exp-1",
            "--payload",
            r#"{"approved": true, "by": "ann"}"#,
            "--dedup-key",
            "d-1",
        ],
    )
    .await;
    assert_eq!(sent.exit, Exit::Success, "{}", sent.err);
    assert!(sent.out.contains("woken"), "{}", sent.out);
    assert_eq!(
        run.result_within(Duration::from_secs(20)).await.unwrap(),
        json!("ann")
    );
    worker.shutdown().await;
}

async fn events_signal_with_start_starts_the_run_once_and_signals_it(backend: Backend) {
    let store = backend.store().await;
    let signal = |payload: &'static str| {
        [
            "events",
            "signal-with-start",
            "cli-approval",
            "--workflow",
            "cli-approve",
            "--key",
            "sws-1",
            "--payload",
            payload,
            "--quiet",
        ]
    };
    let bad = cli(&store, &signal(r#"{"approved": 1}"#)).await;
    assert_eq!(bad.exit, Exit::Usage, "{}", bad.err);
    assert!(bad.err.contains("/approved"), "{}", bad.err);
    assert_eq!(run_count(&store).await, 0, "nothing stored");

    let first = cli(&store, &signal(r#"{"approved": true, "by": "ann"}"#)).await;
    assert_eq!(first.exit, Exit::Success, "{}", first.err);
    let id = started_id(&first);
    let second = cli(&store, &signal(r#"{"approved": true, "by": "bob"}"#)).await;
    assert_eq!(started_id(&second), id, "the run of the key");
    assert_eq!(run_count(&store).await, 1);
    let events = store.events().unwrap().list_events(id).await.unwrap();
    let by: Vec<&str> = events
        .iter()
        .map(|event| event.payload["by"].as_str().unwrap())
        .collect();
    assert_eq!(by, ["ann", "bob"]);

    let worker = worker(&store).build().unwrap().spawn();
    let handle = client(&store).handle::<String>(id);
    assert_eq!(
        handle.result_within(Duration::from_secs(20)).await.unwrap(),
        "ann"
    );
    worker.shutdown().await;
    // The finished run still holds its key: the event is refused, nothing is stored.
    let refused = cli(&store, &signal(r#"{"approved": true, "by": "cy"}"#)).await;
    assert_eq!(refused.exit, Exit::Failure, "{}", refused.err);
    assert_eq!(
        store.events().unwrap().list_events(id).await.unwrap().len(),
        2
    );
    let text = cli(
        &store,
        &[
            "events",
            "signal-with-start",
            "cli-approval",
            "-w",
            "cli-approve",
            "--key",
            "sws-2",
            "--while-active",
            "--payload",
            r#"{"approved": false, "by": "dee"}"#,
        ],
    )
    .await;
    assert_eq!(text.exit, Exit::Success, "{}", text.err);
    assert!(text.out.starts_with("started run "), "{}", text.out);
    assert!(text.out.contains("mailbox"), "{}", text.out);
}

async fn schedules_are_checked_created_listed_paused_resumed_and_deleted(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let greeting = r#"{"name": "Ada", "times": 2}"#;
    let create = |extra: &'static [&'static str]| {
        let mut args = vec![
            "schedules",
            "create",
            "nightly",
            "--workflow",
            "cli-greet",
            "--cron",
            "0 0 3 * * *",
        ];
        args.extend_from_slice(extra);
        args
    };

    // Refusals store nothing, each with its exit code.
    let bad_cron = cli(
        &store,
        &[
            "schedules",
            "create",
            "nightly",
            "-w",
            "cli-greet",
            "--cron",
            "61 * * * *",
            "-i",
            greeting,
        ],
    )
    .await;
    assert_eq!(bad_cron.exit, Exit::Usage, "{}", bad_cron.err);
    assert!(bad_cron.err.starts_with("error: "), "{}", bad_cron.err);
    let bad_zone = cli(
        &store,
        &create(&[
            "--timezone",
            "Mars/Olympus",
            "-i",
            r#"{"name": "Ada", "times": 2}"#,
        ]),
    )
    .await;
    assert_eq!(bad_zone.exit, Exit::Usage, "{}", bad_zone.err);
    assert!(bad_zone.err.contains("Mars/Olympus"), "{}", bad_zone.err);
    let bad_input = cli(&store, &create(&["-i", r#"{"name": "Ada", "times": 9}"#])).await;
    assert_eq!(bad_input.exit, Exit::Usage, "{}", bad_input.err);
    assert!(bad_input.err.contains("/times"), "{}", bad_input.err);
    let unknown = cli(
        &store,
        &[
            "schedules",
            "create",
            "x",
            "-w",
            "cli-nope",
            "--cron",
            "0 * * * *",
        ],
    )
    .await;
    assert_eq!(unknown.exit, Exit::NotFound, "{}", unknown.err);
    assert!(client.list_schedules().await.unwrap().is_empty());

    let created = cli(
        &store,
        &create(&[
            "--timezone",
            "Europe/Paris",
            "--catch-up",
            "all(3)",
            "-i",
            r#"{"name": "Ada", "times": 2}"#,
        ]),
    )
    .await;
    assert_eq!(created.exit, Exit::Success, "{}", created.err);
    assert!(
        created
            .out
            .contains("created schedule \"nightly\" of cli-greet@2"),
        "{}",
        created.out
    );
    let stored = client.get_schedule("nightly").await.unwrap().unwrap();
    assert_eq!(stored.timezone, "Europe/Paris");
    assert_eq!(
        stored.catch_up,
        tasks::store::schedule::CatchUp::All { max: 3 }
    );
    assert_eq!(stored.input, json!({ "name": "Ada", "times": 2 }));
    let again = cli(&store, &create(&["-i", r#"{"name": "Ada", "times": 2}"#])).await;
    assert_eq!(again.exit, Exit::Failure, "{}", again.err);

    let table = cli(&store, &["schedules", "list"]).await;
    assert_eq!(table.exit, Exit::Success);
    for expected in [
        "NEXT SLOT",
        "nightly",
        "cli-greet@2",
        "Europe/Paris",
        "all (up to 3)",
        "active",
    ] {
        assert!(table.out.contains(expected), "{expected}: {}", table.out);
    }
    let listed = cli(&store, &["schedules", "list", "--json"]).await;
    let document: Value = serde_json::from_str(&listed.out).unwrap();
    let first = &document["schedules"][0];
    assert_eq!(first["name"], "nightly");
    assert_eq!(first["catchUp"], "all");
    assert_eq!(first["catchUpMax"], 3);
    assert!(first["nextSlot"].is_string(), "{document}");

    let paused = cli(&store, &["schedules", "pause", "nightly"]).await;
    assert_eq!(paused.exit, Exit::Success, "{}", paused.err);
    assert!(
        client
            .get_schedule("nightly")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    assert!(
        cli(&store, &["schedules", "list"])
            .await
            .out
            .contains("paused")
    );
    let resumed = cli(&store, &["schedules", "resume", "nightly"]).await;
    assert_eq!(resumed.exit, Exit::Success, "{}", resumed.err);
    assert!(
        !client
            .get_schedule("nightly")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    let deleted = cli(&store, &["schedules", "delete", "nightly"]).await;
    assert_eq!(deleted.exit, Exit::Success, "{}", deleted.err);
    assert!(client.get_schedule("nightly").await.unwrap().is_none());
    let gone = cli(&store, &["schedules", "pause", "nightly"]).await;
    assert_eq!(gone.exit, Exit::NotFound, "{}", gone.err);
    assert_eq!(
        run_count(&store).await,
        0,
        "creating a schedule starts nothing by itself"
    );
}

/// `queues list` shows the configured queues and their limits, as a table or JSON.
async fn queues_list_shows_the_limits(backend: Backend) {
    let store = backend.store().await;
    let empty = cli(&store, &["queues", "list"]).await;
    assert_eq!(empty.exit, Exit::Success, "{}", empty.err);
    assert!(empty.out.contains("no configured queues"), "{}", empty.out);
    let client = client(&store);
    client
        .put_queue(
            tasks::QueueOptions::new("emails")
                .concurrency(10)
                .concurrency_per_key(4),
        )
        .await
        .unwrap();
    client
        .put_queue(
            tasks::QueueOptions::new("reports")
                .rate_limit(100, std::time::Duration::from_secs(60))
                .rate_limit_per_key(3, std::time::Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let table = cli(&store, &["queues", "list"]).await;
    assert_eq!(table.exit, Exit::Success, "{}", table.err);
    for expected in [
        "CONCURRENCY",
        "PER KEY CONCURRENCY",
        "emails",
        "10",
        "reports",
        "100 per 60s",
        "3 per 1s",
    ] {
        assert!(table.out.contains(expected), "{expected}: {}", table.out);
    }
    let listed = cli(&store, &["queues", "list", "--json"]).await;
    let document: Value = serde_json::from_str(&listed.out).unwrap();
    assert_eq!(document["queues"][0]["name"], "emails");
    assert_eq!(document["queues"][0]["concurrency"], 10);
    assert_eq!(document["queues"][0]["keyConcurrency"], 4);
    assert_eq!(document["queues"][1]["keyConcurrency"], Value::Null);
    assert_eq!(document["queues"][1]["rateLimit"]["starts"], 100);
    assert_eq!(document["queues"][1]["rateLimit"]["periodMs"], 60_000);
    assert_eq!(document["queues"][1]["keyRateLimit"]["starts"], 3);
}

async fn verify_replay_exits_1_on_a_mismatch(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let waiting = client.start::<approve>(()).await.unwrap().id();
    let ran = cli(&store, &["verify-replay"]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains(&waiting.to_string()), "{}", ran.out);
    assert!(ran.out.contains("event/cli-approval"), "{}", ran.out);
    assert!(
        ran.out.contains("1 consistent, 0 mismatched"),
        "{}",
        ran.out
    );

    // A run of a workflow this binary does not have, written behind the client's back.
    let gone = store
        .create_run(tasks::store::CreateRun::new("cli-gone"))
        .await
        .unwrap()
        .id;
    let ran = cli(&store, &["verify-replay"]).await;
    assert_eq!(ran.exit, Exit::Failure, "a mismatch fails the gate");
    let line = ran
        .out
        .lines()
        .find(|line| line.contains(&gone.to_string()))
        .expect("the run is named");
    assert!(
        line.starts_with("MISMATCH") && line.contains("unregistered"),
        "{line}"
    );
    assert!(
        ran.out.contains("1 consistent, 1 mismatched"),
        "{}",
        ran.out
    );

    // Finished runs only when sampled; one JSON document.
    client.cancel(waiting).await.unwrap();
    let ran = cli(&store, &["verify-replay", "--json"]).await;
    assert_eq!(ran.exit, Exit::Failure);
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    assert_eq!(document["consistent"], false);
    assert_eq!(document["namespace"], store.namespace());
    assert_eq!(document["runs"].as_array().unwrap().len(), 1);
    assert_eq!(document["runs"][0]["runId"], gone.to_string());
    assert_eq!(document["runs"][0]["verdict"], "mismatch");
    assert_eq!(document["runs"][0]["detail"]["kind"], "unregistered");
    let ran = cli(
        &store,
        &["verify-replay", "--json", "--finished-sample", "5"],
    )
    .await;
    let document: Value = serde_json::from_str(&ran.out).unwrap();
    let runs = document["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["runId"], waiting.to_string());
    assert_eq!(runs[1]["status"], "canceled");
    assert_eq!(runs[1]["verdict"], "consistent");
    assert_eq!(runs[1]["detail"]["at"], "unrecorded");
    assert_eq!(runs[1]["detail"]["call"], "event/cli-approval");

    // Settled by code alone, the gate passes again.
    client.cancel(gone).await.unwrap();
    let ran = cli(&store, &["verify-replay"]).await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(ran.out.contains("0 runs"), "{}", ran.out);
}

/// `verify-replay` by URL applies no migration, unlike every other command: on a database
/// without the schema it fails with a store error and leaves it without, so it fails again;
/// once migrated (by `migrate`), it verifies.
#[tokio::test]
async fn verify_replay_by_url_applies_no_migration() {
    let path = tasks_tests::sqlite::temp_database_path();
    let url = format!("sqlite://{}", path.display());
    let by_url = async |command: &str| {
        let cli = parse(&["--database-url", &url, command]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let exit = cli.execute(&mut out, &mut err).await;
        ran(exit, out, err)
    };
    for _ in 0..2 {
        let ran = by_url("verify-replay").await;
        assert_eq!(ran.exit, Exit::Store, "no schema, none applied");
    }
    assert_eq!(by_url("migrate").await.exit, Exit::Success);
    let ran = by_url("verify-replay").await;
    assert_eq!(ran.exit, Exit::Success);
    assert!(
        ran.out.contains("0 runs of namespace default"),
        "{}",
        ran.out
    );
}

every_store! {
    verify_replay_exits_1_on_a_mismatch,
    queues_list_shows_the_limits,
    schedules_are_checked_created_listed_paused_resumed_and_deleted,
    events_send_validates_the_payload_and_wakes_the_run,
    events_signal_with_start_starts_the_run_once_and_signals_it,
    start_with_invalid_input_prints_every_violation_and_stores_nothing,
    runs_show_and_watch_give_the_step_timeline,
    cancel_pause_and_resume_change_the_status,
    purge_deletes_old_finished_runs,
    unknown_runs_are_not_found,
    runs_state_prints_the_published_values,
    workflows_list_and_schema,
    worker_settings_are_checked_before_it_runs,
    ;
    sql:
    doctor_passes_on_a_healthy_store,
    runs_list_prints_a_table_or_json_with_cursors,
    start_with_valid_input_stores_the_run,
}

/// The command line's `api` refuses an address other hosts reach without tokens (unless
/// told `--insecure-no-auth`), and a token too short to be a secret.
#[tokio::test]
async fn api_refuses_to_serve_without_tokens_beyond_loopback() {
    use tasks::cli::clap::Parser as _;
    use tasks::cli::{Cli, Exit};

    let store = crate::support::Backend::Memory.store().await;
    for (args, expected) in [
        (
            &["tasks", "api", "--bind", "0.0.0.0:0"][..],
            "give the API tokens",
        ),
        (
            &["tasks", "api", "--token", "short"][..],
            "at least 16 characters",
        ),
        (
            &["tasks", "api", "--token", "0123456789abcdef:admin"][..],
            "unknown rights",
        ),
    ] {
        let cli = Cli::try_parse_from(args).unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let exit = cli
            .tasks
            .execute_with(&crate::support::client(&store), &mut out, &mut err)
            .await;
        let err = String::from_utf8(err).unwrap();
        assert_eq!(exit, Exit::Usage, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
