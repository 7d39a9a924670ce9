//! The HTTP JSON API (`tasks::http_api`), served over real HTTP on each store with a real
//! worker: a client written with Python's standard library (`tests/python/`), the tokens'
//! scopes and rights, problem documents, operations and schedules.

use crate::browser::http;
use crate::support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Backend, TestStore, client, worker};
use tasks::http_api::{HttpApi, Token};
use tasks::{Event, ListRuns, RunStatus, WorkflowContext, WorkflowError, step, workflow};

/// An order the API starts; its schema bounds both fields.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct HttpOrder {
    /// What to ship.
    #[schemars(length(min = 1))]
    item: String,
    #[schemars(range(min = 1, max = 10))]
    quantity: u32,
}

/// An approval sent over HTTP.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct HttpApproval {
    approved: bool,
    by: String,
}

impl Event for HttpApproval {
    const TOPIC: &'static str = "http-approval";
}

#[step]
async fn http_reserve(order: &HttpOrder) -> Result<String, std::io::Error> {
    Ok(format!("{} x {}", order.quantity, order.item))
}

/// Reserves an order, publishes its stage, waits for an approval, publishes again.
#[workflow(name = "http-order", events(HttpApproval))]
async fn http_order(ctx: WorkflowContext, order: HttpOrder) -> Result<String, WorkflowError> {
    let reserved = http_reserve(&order).await?;
    ctx.set_state("stage", &"awaiting approval").await?;
    let approval = ctx.wait_for_event::<HttpApproval>().await?;
    ctx.set_state("stage", &"approved").await?;
    if !approval.approved {
        return Err(WorkflowError::msg("rejected").non_retryable());
    }
    Ok(format!("{reserved}, approved by {}", approval.by))
}

#[step]
async fn http_double(n: u32) -> Result<u32, std::io::Error> {
    Ok(n * 2)
}

/// Doubles a number.
#[workflow(name = "http-double")]
async fn http_double_workflow(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(http_double(n).await?)
}

/// Sleeps long enough to be paused, canceled or forked from.
#[workflow(name = "http-slow")]
async fn http_slow(ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    let doubled = http_double(n).await?;
    ctx.sleep("nap", Duration::from_millis(300)).await?;
    Ok(doubled)
}

const OPERATOR: &str = "operator-token-0123456789";
const READER: &str = "reader-token-0123456789";
const STRANGER: &str = "stranger-token-0123456789";

/// Serves the API of `store` on a free loopback port: an operating and a reading token of
/// the store's namespace, and an operating token of another namespace only.
async fn serve(store: &TestStore) -> SocketAddr {
    let namespace = store.shared().namespace().to_owned();
    let api = HttpApi::new(client(store))
        .token(
            Token::new(OPERATOR)
                .unwrap()
                .namespace(&namespace)
                .operate(),
        )
        .token(Token::new(READER).unwrap().namespace(&namespace))
        .token(
            Token::new(STRANGER)
                .unwrap()
                .namespace("http-elsewhere")
                .operate(),
        )
        .max_wait(Duration::from_secs(20))
        .body_limit(64 * 1024);
    serve_router(api.router()).await
}

async fn serve_router(router: tasks::http_api::axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { tasks::http_api::axum::serve(listener, router).await });
    addr
}

/// A JSON request with `token`; the status and the body as JSON (`null` when empty).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String, Value) {
    let auth = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let request = format!("{method} {path} HTTP/1.1\r\n{auth}Content-Type: application/json\r\n");
    let (status, head, body) = http(addr, &request, &body).await;
    let json = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"))
    };
    (status, head, json)
}

/// The Python client (`tests/python/http_api_client.py`, standard library only) against a
/// live API: start and wait, an event a run waits for, published state, a refused input
/// that stores nothing, and a token of another namespace that sees nothing.
async fn python_client(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let addr = serve(&store).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/http_api_client.py");
    let mut command = tokio::process::Command::new("python3");
    command
        .arg(&script)
        .env("TASKS_API", format!("http://{addr}"))
        .env("TASKS_NAMESPACE", store.shared().namespace())
        .env("TASKS_TOKEN", OPERATOR)
        .env("TASKS_OTHER_TOKEN", STRANGER)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the Python client finished within 120 s")
        .expect("python3 runs (it is needed by this test)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert!(stdout.contains("all checks passed"), "stdout:\n{stdout}");
    // What the client was refused is not in the store.
    let runs = client(&store)
        .list_runs(tasks::ListRuns {
            workflow_name: Some("http-order".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.data.len(), 1, "only the valid start stored a run");
    worker.shutdown().await;
}

/// Missing and wrong tokens (401), a reading token that writes (403), a token of another
/// namespace (the 404 of a missing run), a body past the limit (413), bad input (422 with
/// every path), and an API without tokens that refuses everything.
async fn security(backend: Backend) {
    let store = backend.store().await;
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let runs = format!("/v1/namespaces/{ns}/runs");
    let start = format!("/v1/namespaces/{ns}/workflows/http-double/runs");

    let (status, head, body) = call(addr, "GET", &runs, None, None).await;
    assert_eq!(status, 401);
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    assert_eq!(body["type"], "urn:tasks:problem:unauthorized");
    let (status, _, _) = call(addr, "GET", &runs, Some("not-a-token-at-all-000"), None).await;
    assert_eq!(status, 401);
    let (status, _, _) = call(addr, "GET", &runs, Some(&OPERATOR[1..]), None).await;
    assert_eq!(status, 401, "a token's suffix is not the token");

    let (status, _, body) = call(
        addr,
        "POST",
        &start,
        Some(READER),
        Some(json!({"input": 2})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["type"], "urn:tasks:problem:forbidden");
    let (status, _, body) = call(addr, "GET", &runs, Some(READER), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["runs"].as_array().unwrap().is_empty(),
        "the refused start stored nothing"
    );

    let (status, _, run) = call(
        addr,
        "POST",
        &start,
        Some(OPERATOR),
        Some(json!({"input": 2})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let run_path = format!("{runs}/{id}");
    let (status, _, body) = call(addr, "GET", &run_path, Some(READER), None).await;
    assert_eq!((status, body["id"].as_str()), (200, Some(id.as_str())));

    // Another namespace's token: the same 404 as a run that does not exist.
    let (status, head, hidden) = call(addr, "GET", &run_path, Some(STRANGER), None).await;
    assert_eq!(status, 404);
    assert!(head.contains("application/problem+json"));
    let missing = format!("{runs}/{}", tasks::uuid::Uuid::now_v7());
    let (status, _, absent) = call(addr, "GET", &missing, Some(OPERATOR), None).await;
    assert_eq!(status, 404);
    assert_eq!(hidden["type"], absent["type"]);
    assert_eq!(hidden["title"], absent["title"]);
    let (status, _, _) = call(
        addr,
        "POST",
        &format!("{run_path}/cancel"),
        Some(STRANGER),
        None,
    )
    .await;
    assert_eq!(status, 404, "no write through another namespace's token");
    let (status, _, _) = call(addr, "GET", &runs, Some(STRANGER), None).await;
    assert_eq!(status, 404, "nor a listing");
    let (_, _, run) = call(addr, "GET", &run_path, Some(OPERATOR), None).await;
    assert_ne!(run["status"], "canceled");

    // Bad input: every violation with its path, nothing stored.
    let order = format!("/v1/namespaces/{ns}/workflows/http-order/runs");
    let bad = json!({"input": {"item": "", "quantity": 11}});
    let (status, head, problem) = call(addr, "POST", &order, Some(OPERATOR), Some(bad)).await;
    assert_eq!(status, 422, "{problem}");
    assert!(head.contains("application/problem+json"));
    assert_eq!(problem["type"], "urn:tasks:problem:invalid-input");
    let mut pointers: Vec<_> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|error| error["pointer"].as_str().unwrap().to_owned())
        .collect();
    pointers.sort();
    assert_eq!(pointers, ["/item", "/quantity"], "{problem}");
    let (status, _, problem) = call(
        addr,
        "POST",
        &order,
        Some(OPERATOR),
        Some(json!({"inptu": {}})),
    )
    .await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (400, Some("urn:tasks:problem:invalid-request"))
    );
    let (_, _, listed) = call(
        addr,
        "GET",
        &format!("{runs}?workflow=http-order"),
        Some(OPERATOR),
        None,
    )
    .await;
    assert!(listed["runs"].as_array().unwrap().is_empty(), "{listed}");

    // A body past the limit.
    let big = json!({"input": {"item": "x".repeat(100 * 1024), "quantity": 1}});
    let (status, _, problem) = call(addr, "POST", &order, Some(OPERATOR), Some(big)).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (413, Some("urn:tasks:problem:payload-too-large"))
    );

    // Every error is a problem document, a wrong method and a wrong path too.
    let (status, head, problem) = call(addr, "DELETE", &runs, Some(OPERATOR), None).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (405, Some("urn:tasks:problem:method-not-allowed"))
    );
    assert!(head.contains("application/problem+json"), "{head}");
    let (status, _, problem) = call(addr, "GET", "/v2/nothing", Some(OPERATOR), None).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (404, Some("urn:tasks:problem:not-found"))
    );

    // Authentication first: without a valid token, a wrong method and a wrong path are
    // 401 like everything else, and say nothing of the routes.
    for (method, path) in [("DELETE", runs.as_str()), ("GET", "/v2/nothing")] {
        for token in [None, Some("not-a-token-at-all-000")] {
            let (status, head, problem) = call(addr, method, path, token, None).await;
            assert_eq!(
                (status, problem["type"].as_str()),
                (401, Some("urn:tasks:problem:unauthorized")),
                "{method} {path} with {token:?}"
            );
            assert!(head.contains("www-authenticate: bearer"), "{head}");
        }
    }

    // An API given no token accepts no request.
    let closed = serve_router(HttpApi::new(client(&store)).router()).await;
    let (status, _, _) = call(closed, "GET", &runs, Some(OPERATOR), None).await;
    assert_eq!(status, 401);
}

/// Cancel, pause, resume, retry and fork; listing with cursors; steps; workflows; and the
/// OpenAPI document served.
async fn operations(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let runs = format!("/v1/namespaces/{ns}/runs");
    let slow = format!("/v1/namespaces/{ns}/workflows/http-slow/runs");
    let token = Some(OPERATOR);

    // Three runs, listed two at a time.
    let mut ids = Vec::new();
    for n in 1..=3 {
        let (status, _, run) = call(
            addr,
            "POST",
            &slow,
            token,
            Some(json!({"input": n, "delay_ms": 60_000})),
        )
        .await;
        assert_eq!(status, 201, "{run}");
        assert_eq!(run["status"], "pending");
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let (_, _, page) = call(
        addr,
        "GET",
        &format!("{runs}?limit=2&workflow=http-slow"),
        token,
        None,
    )
    .await;
    assert_eq!(page["runs"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["runs"][0]["id"], ids[2].as_str(), "newest first");
    let next = page["next"].as_str().expect("a next page").to_owned();
    let (_, _, page) = call(
        addr,
        "GET",
        &format!("{runs}?limit=2&after={next}"),
        token,
        None,
    )
    .await;
    assert_eq!(page["runs"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["runs"][0]["id"], ids[0].as_str());
    let (status, _, problem) =
        call(addr, "GET", &format!("{runs}?status=bogus"), token, None).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (400, Some("urn:tasks:problem:invalid-request"))
    );

    // Pause, resume, cancel, retry.
    let first = format!("{runs}/{}", ids[0]);
    let (status, _, run) = call(addr, "POST", &format!("{first}/pause"), token, None).await;
    assert_eq!(
        (status, run["status"].as_str()),
        (200, Some("paused")),
        "{run}"
    );
    let (status, _, run) = call(addr, "POST", &format!("{first}/resume"), token, None).await;
    assert_eq!(
        (status, run["status"].as_str()),
        (200, Some("pending")),
        "{run}"
    );
    let (status, _, run) = call(addr, "POST", &format!("{first}/cancel"), token, None).await;
    assert_eq!(
        (status, run["status"].as_str()),
        (200, Some("canceled")),
        "{run}"
    );
    let (status, _, problem) = call(addr, "POST", &format!("{first}/resume"), token, None).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (409, Some("urn:tasks:problem:conflict"))
    );
    let (status, _, run) = call(addr, "POST", &format!("{first}/retry"), token, None).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["finished"], false);

    // A run that finishes, its steps, and a fork from its sleep.
    let (_, _, run) = call(addr, "POST", &slow, token, Some(json!({"input": 21}))).await;
    let done = format!("{runs}/{}", run["id"].as_str().unwrap());
    let (status, _, run) = call(
        addr,
        "GET",
        &format!("{done}/result?timeout=20"),
        token,
        None,
    )
    .await;
    assert_eq!(
        (status, run["status"].as_str()),
        (200, Some("completed")),
        "{run}"
    );
    assert_eq!(run["output"], 42);
    let (_, _, steps) = call(addr, "GET", &format!("{done}/steps"), token, None).await;
    let names: Vec<_> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| step["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"http_double") && names.contains(&"nap"),
        "{steps}"
    );
    let (status, _, fork) = call(
        addr,
        "POST",
        &format!("{done}/fork"),
        token,
        Some(json!({"from_step": "nap"})),
    )
    .await;
    assert_eq!(status, 201, "{fork}");
    assert_eq!(fork["forked_from_step"], "nap");
    let forked = format!("{runs}/{}/result?timeout=20", fork["id"].as_str().unwrap());
    let (_, _, fork) = call(addr, "GET", &forked, token, None).await;
    assert_eq!(fork["output"], 42, "{fork}");

    // A long poll that times out answers with the run as it is.
    let (_, _, pending) = call(
        addr,
        "GET",
        &format!("{runs}/{}/result?timeout=1", ids[1]),
        token,
        None,
    )
    .await;
    assert_eq!(
        (pending["status"].as_str(), &pending["finished"]),
        (Some("pending"), &json!(false))
    );

    // The workflows and the OpenAPI document.
    let (status, _, workflows) = call(addr, "GET", "/v1/workflows", Some(READER), None).await;
    assert_eq!(status, 200);
    let order = workflows
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "http-order")
        .expect("http-order listed");
    assert_eq!(order["events"][0]["topic"], "http-approval");
    assert_eq!(
        order["input_schema"]["properties"]["quantity"]["maximum"],
        10
    );
    let (status, _, doc) = call(addr, "GET", "/openapi.json", Some(READER), None).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(
        doc["paths"]["/v1/namespaces/{namespace}/workflows/http-order/runs"]["post"].is_object()
    );
    assert!(doc["components"]["schemas"]["http-order.Input"].is_object());
    worker.shutdown().await;
}

/// Schedules: create (checked), list, pause, resume, delete.
async fn schedules(backend: Backend) {
    let store = backend.store().await;
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let path = format!("/v1/namespaces/{ns}/schedules");
    let token = Some(OPERATOR);
    let nightly =
        json!({"name": "nightly", "workflow": "http-double", "cron": "0 3 * * *", "input": 4});
    let (status, _, created) = call(addr, "POST", &path, token, Some(nightly.clone())).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["paused"].as_bool(), created["timezone"].as_str()),
        (Some(false), Some("UTC"))
    );
    let (status, _, problem) = call(addr, "POST", &path, token, Some(nightly)).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (409, Some("urn:tasks:problem:conflict"))
    );
    let bad =
        json!({"name": "bad", "workflow": "http-double", "cron": "0 3 * * *", "input": "four"});
    let (status, _, problem) = call(addr, "POST", &path, token, Some(bad)).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (422, Some("urn:tasks:problem:invalid-input"))
    );
    let (status, _, _) = call(
        addr,
        "POST",
        &path,
        Some(READER),
        Some(json!({"name": "x", "workflow": "http-double", "cron": "0 3 * * *"})),
    )
    .await;
    assert_eq!(status, 403);
    let (_, _, listed) = call(addr, "GET", &path, Some(READER), None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let (status, _, paused) =
        call(addr, "POST", &format!("{path}/nightly/pause"), token, None).await;
    assert_eq!((status, paused["paused"].as_bool()), (200, Some(true)));
    let (status, _, resumed) =
        call(addr, "POST", &format!("{path}/nightly/resume"), token, None).await;
    assert_eq!((status, resumed["paused"].as_bool()), (200, Some(false)));
    let (status, _, _) = call(addr, "DELETE", &format!("{path}/nightly"), token, None).await;
    assert_eq!(status, 204);
    let (status, _, _) = call(addr, "DELETE", &format!("{path}/nightly"), token, None).await;
    assert_eq!(status, 404);
}

/// An event by workflow and key, a duplicate send, and a published state waited for.
async fn events_and_state(backend: Backend) {
    let store = backend.store().await;
    let worker = worker(&store).build().unwrap().spawn();
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let token = Some(OPERATOR);
    let start = json!({"input": {"item": "tea", "quantity": 2}, "idempotency_key": "order-7"});
    let path = format!("/v1/namespaces/{ns}/workflows/http-order/runs");
    let (status, _, run) = call(addr, "POST", &path, token, Some(start.clone())).await;
    assert_eq!(status, 201, "{run}");
    let (_, _, again) = call(addr, "POST", &path, token, Some(start)).await;
    assert_eq!(
        again["id"], run["id"],
        "the idempotency key returns the first run"
    );
    let run_path = format!("/v1/namespaces/{ns}/runs/{}", run["id"].as_str().unwrap());
    let (status, _, stage) = call(
        addr,
        "GET",
        &format!("{run_path}/state/stage/wait?after=0&timeout=20"),
        token,
        None,
    )
    .await;
    assert_eq!(
        (status, stage["value"].as_str()),
        (200, Some("awaiting approval")),
        "{stage}"
    );
    let version = stage["version"].as_u64().unwrap();
    let (status, _, _) = call(
        addr,
        "GET",
        &format!("{run_path}/state/stage/wait?after={version}&timeout=1"),
        token,
        None,
    )
    .await;
    assert_eq!(status, 204, "no newer version within the timeout");
    let (status, _, _) = call(
        addr,
        "GET",
        &format!("{run_path}/state/missing"),
        token,
        None,
    )
    .await;
    assert_eq!(status, 404);

    let keyed = format!("/v1/namespaces/{ns}/workflows/http-order/keys/order-7/events");
    let undeclared = json!({"topic": "nope", "payload": {}});
    let (status, _, problem) = call(addr, "POST", &keyed, token, Some(undeclared)).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (422, Some("urn:tasks:problem:invalid-event"))
    );
    let approval = json!({"topic": "http-approval", "payload": {"approved": true, "by": "ada"}, "dedup_key": "d1"});
    let (status, _, sent) = call(addr, "POST", &keyed, token, Some(approval.clone())).await;
    assert_eq!(status, 201, "{sent}");
    assert_eq!(sent["duplicate"], false);
    let (_, _, run) = call(
        addr,
        "GET",
        &format!("{run_path}/result?timeout=20"),
        token,
        None,
    )
    .await;
    assert_eq!(run["output"], "2 x tea, approved by ada", "{run}");
    let (_, _, states) = call(addr, "GET", &format!("{run_path}/state"), token, None).await;
    assert_eq!(states[0]["value"], "approved", "{states}");
    let (status, _, problem) = call(
        addr,
        "POST",
        &format!("{run_path}/events"),
        token,
        Some(approval),
    )
    .await;
    assert!(
        status == 201 && problem["duplicate"] == true || status == 409,
        "a repeated key after the end: {status} {problem}"
    );
    let runs = client(&store);
    let id = run["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        runs.get_run(id).await.unwrap().unwrap().status,
        RunStatus::Completed
    );
    worker.shutdown().await;
}

/// Signal-with-start: the first request starts the run with its event (201), the next
/// finds it (200) and adds its event; an invalid payload, a start whose key differs from
/// the path's, and an event for a finished run that holds its key store nothing.
async fn signal_with_start(backend: Backend) {
    let store = backend.store().await;
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let token = Some(OPERATOR);
    let path = format!("/v1/namespaces/{ns}/workflows/http-order/keys/order-9/signal-with-start");
    let body = |by: &str| {
        json!({
            "topic": "http-approval",
            "payload": {"approved": true, "by": by},
            "start": {"input": {"item": "tea", "quantity": 3}},
        })
    };
    let invalid = json!({"topic": "http-approval", "payload": {"approved": "yes"}, "start": {"input": {"item": "tea", "quantity": 3}}});
    let (status, _, problem) = call(addr, "POST", &path, token, Some(invalid)).await;
    assert_eq!(
        (status, problem["type"].as_str()),
        (422, Some("urn:tasks:problem:invalid-event")),
        "{problem}"
    );
    let other_key = json!({"topic": "http-approval", "payload": {"approved": true, "by": "x"}, "start": {"idempotency_key": "order-10"}});
    let (status, _, problem) = call(addr, "POST", &path, token, Some(other_key)).await;
    assert_eq!(status, 400, "{problem}");
    let (status, _, problem) = call(addr, "POST", &path, Some(READER), Some(body("r"))).await;
    assert_eq!(status, 403, "a reading token may not: {problem}");
    let runs = client(&store);
    assert!(
        runs.list_runs(ListRuns::default())
            .await
            .unwrap()
            .data
            .is_empty()
    );

    let (status, _, first) = call(addr, "POST", &path, token, Some(body("ada"))).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["run"]["status"], "pending");
    assert_eq!(first["event"]["topic"], "http-approval");
    assert_eq!(first["event"]["run_id"], first["run"]["id"]);
    let (status, _, second) = call(addr, "POST", &path, token, Some(body("bob"))).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["created"], false);
    assert_eq!(second["run"]["id"], first["run"]["id"]);

    let worker = worker(&store).build().unwrap().spawn();
    let run_path = format!(
        "/v1/namespaces/{ns}/runs/{}",
        first["run"]["id"].as_str().unwrap()
    );
    let (_, _, run) = call(
        addr,
        "GET",
        &format!("{run_path}/result?timeout=20"),
        token,
        None,
    )
    .await;
    assert_eq!(run["output"], "3 x tea, approved by ada", "{run}");
    worker.shutdown().await;
    let (status, _, problem) = call(addr, "POST", &path, token, Some(body("cy"))).await;
    assert_eq!(status, 409, "a finished run keeps its key: {problem}");
    let id = first["run"]["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        runs.store()
            .contract()
            .events()
            .unwrap()
            .list_events(id)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A start with an idempotency key answers 201 when it created the run and 200 with that
/// same run when a run held the key already; a `traceparent` header is the trace the run
/// joins (an invalid one is ignored, and the run starts).
async fn start_statuses_and_trace_context(backend: Backend) {
    let store = backend.store().await;
    let addr = serve(&store).await;
    let ns = store.shared().namespace().to_owned();
    let start = format!("/v1/namespaces/{ns}/workflows/http-double/runs");
    let keyed = json!({"input": 4, "idempotency_key": "invoice-9", "delay_ms": 60_000});

    let (status, _, first) = call(addr, "POST", &start, Some(OPERATOR), Some(keyed.clone())).await;
    assert_eq!(status, 201, "{first}");
    let (status, _, again) = call(addr, "POST", &start, Some(OPERATOR), Some(keyed)).await;
    assert_eq!(status, 200, "a repeat finds the run: {again}");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["idempotency_key"], "invoice-9");
    let (status, _, other) = call(
        addr,
        "POST",
        &start,
        Some(OPERATOR),
        Some(json!({"input": 4, "idempotency_key": "invoice-10", "delay_ms": 60_000})),
    )
    .await;
    assert_eq!(status, 201, "another key starts another run: {other}");
    assert_ne!(other["id"], first["id"]);
    let runs = client(&store)
        .list_runs(tasks::ListRuns {
            workflow_name: Some("http-double".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.data.len(), 2, "the repeat started nothing");

    // The listing's filters and search, as the client's.
    let (status, _, mailed) = call(
        addr,
        "POST",
        &start,
        Some(OPERATOR),
        Some(json!({"input": 6, "delay_ms": 60_000, "queue": "mail", "concurrency": {"key": "tenant-3", "limit": 1}})),
    )
    .await;
    assert_eq!(status, 201, "{mailed}");
    let runs_path = format!("/v1/namespaces/{ns}/runs");
    let listed = |query: String| {
        let path = format!("{runs_path}?{query}");
        async move {
            let (status, _, page) = call(addr, "GET", &path, Some(READER), None).await;
            assert_eq!(status, 200, "{query}: {page}");
            page["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|run| run["id"].clone())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("q=invoice-9".into()).await, [first["id"].clone()]);
    assert_eq!(
        listed(format!("q={}", other["id"].as_str().unwrap())).await,
        [other["id"].clone()]
    );
    assert_eq!(listed("queue=mail".into()).await, [mailed["id"].clone()]);
    assert_eq!(
        listed("concurrency_key=tenant-3".into()).await,
        [mailed["id"].clone()]
    );
    assert!(listed("version=7".into()).await.is_empty());
    assert_eq!(listed("queue=default&order=asc".into()).await.len(), 2);

    // The trace context of the request is the run's.
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let body = json!({"input": 5, "delay_ms": 60_000}).to_string();
    let request = |headers: &str| {
        format!(
            "POST {start} HTTP/1.1\r\nAuthorization: Bearer {OPERATOR}\r\nContent-Type: application/json\r\n{headers}"
        )
    };
    let (status, _, answer) = http(
        addr,
        &request(&format!(
            "traceparent: {traceparent}\r\ntracestate: vendor=opaque\r\n"
        )),
        &body,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let run = client(&store).get_run(id).await.unwrap().unwrap();
    let trace = run
        .trace_context
        .expect("the run joins the request's trace");
    assert_eq!(trace.traceparent(), traceparent);
    assert_eq!(trace.tracestate(), Some("vendor=opaque"));
    // An invalid traceparent is ignored: the run starts, outside that trace.
    let (status, _, answer) = http(addr, &request("traceparent: 00-not-a-trace\r\n"), &body).await;
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let run = client(&store).get_run(id).await.unwrap().unwrap();
    assert!(
        run.trace_context
            .as_ref()
            .is_none_or(|trace| !trace.traceparent().contains("not-a-trace")),
        "{:?}",
        run.trace_context
    );
}

every_store!(
    start_statuses_and_trace_context,
    python_client,
    security,
    operations,
    schedules,
    events_and_state,
    signal_with_start
);
