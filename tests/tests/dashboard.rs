//! The web dashboard (`tasks::dashboard`), served on a real store and driven in headless
//! Chromium; its safety checks over raw HTTP. Screenshots go to
//! `$CARGO_TARGET_TMPDIR/dashboard/`.

use crate::browser;
use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use browser::{Browser, http};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Backend, TestStore, bump, client, worker};
use tasks::cli::clap::Parser as _;
use tasks::cli::{Cli, Command};
use tasks::dashboard::Dashboard;
use tasks::store::schedule::{CatchUp, NewSchedule};
use tasks::{Client, Event, ListRuns, RunStatus, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Order {
    /// What to ship.
    #[schemars(length(min = 1))]
    item: String,
    #[schemars(range(min = 1, max = 10))]
    quantity: u32,
    /// Free text from the customer (the escaping test puts markup here).
    #[serde(default)]
    note: String,
}

#[step]
async fn reserve(order: &Order) -> Result<String, std::io::Error> {
    Ok(format!("{} x {}", order.quantity, order.item))
}

#[derive(Debug, Serialize, Deserialize)]
struct Flaky;

impl std::fmt::Display for Flaky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("carrier unavailable, retrying")
    }
}

impl std::error::Error for Flaky {}

#[step(retry(max_attempts = 3, initial_interval = "50ms"))]
async fn book_carrier() -> Result<String, Flaky> {
    let run_id = WorkflowContext::current()
        .map(|ctx| ctx.run_id())
        .unwrap_or_default();
    if bump(run_id, "book_carrier") == 1 {
        return Err(Flaky);
    }
    Ok("parcel-42".to_owned())
}

#[step(name = "ship_parcel")]
async fn ship(parcel: &str) -> Result<String, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(60)).await;
    Ok(format!("shipped {parcel}"))
}

/// Ships an order: reserves it, books a carrier, waits, ships.
#[workflow(name = "dash-ship", version = "1")]
async fn dash_ship(ctx: WorkflowContext, order: Order) -> Result<String, WorkflowError> {
    reserve(&order).await?;
    let parcel = book_carrier().await?;
    ctx.sleep("cool-off", Duration::from_millis(300)).await?;
    Ok(ship(&parcel).await?)
}

#[step]
async fn take_note() -> Result<String, std::io::Error> {
    Ok("noted".to_owned())
}

/// Takes a note, then refuses for good: a run that fails at once.
#[workflow(name = "dash-refuse")]
async fn dash_refuse(_ctx: WorkflowContext) -> Result<String, WorkflowError> {
    take_note().await?;
    Err(WorkflowError::msg("refused on purpose").non_retryable())
}

/// An approval, with a schema the form's payload is checked against.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Approval {
    #[schemars(length(min = 1))]
    by: String,
    #[schemars(range(min = 1, max = 3))]
    level: u8,
}

impl Event for Approval {
    const TOPIC: &'static str = "dash-approval";
}

/// Waits for an approval.
#[workflow(name = "dash-approve", events(Approval))]
async fn dash_approve(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    let approval = ctx.wait_for_event::<Approval>().await?;
    Ok(approval.by)
}

/// Publishes its progress, with a value a page must escape.
#[workflow(name = "dash-progress")]
async fn dash_progress(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    ctx.set_state("progress", &json!({ "done": 3, "of": 4 }))
        .await?;
    ctx.set_state("progress", &json!({ "done": 4, "of": 4 }))
        .await?;
    ctx.set_state("note", &HOSTILE).await?;
    Ok("done".into())
}

/// Serves `dashboard` on a loopback port of this test's runtime.
async fn serve(dashboard: Dashboard) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tasks::dashboard::axum::serve(listener, dashboard.router())
            .await
            .unwrap()
    });
    addr
}

fn order(item: &str, note: &str) -> Order {
    Order {
        item: item.to_owned(),
        quantity: 2,
        note: note.to_owned(),
    }
}

/// Starts a run that waits an hour before any worker may claim it.
async fn pending_run(client: &Client, item: &str, note: &str) -> Uuid {
    client
        .start::<dash_ship>(order(item, note))
        .delay(Duration::from_secs(3600))
        .await
        .unwrap()
        .id()
}

async fn run_count(client: &Client) -> usize {
    let query = ListRuns {
        limit: Some(500),
        ..ListRuns::default()
    };
    client.list_runs(query).await.unwrap().data.len()
}

fn screenshots(backend: Backend) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("dashboard")
        .join(format!("{backend:?}").to_lowercase())
}

const HOSTILE: &str = "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>";

/// Every page in Chromium: the runs list (with live refresh), a run's timeline, cancel from
/// the page, an invalid and a valid start form, and escaping of user data.
async fn pages_work_in_chromium(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let shots = screenshots(backend);

    // A run that a worker takes through every kind of step.
    let worker = worker(&store).build().unwrap().spawn();
    let done = client
        .start::<dash_ship>(order("teapot", "fragile"))
        .await
        .unwrap();
    let output = done.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, "shipped parcel-42");
    worker.shutdown().await;
    let waiting = pending_run(&client, "kettle", "").await;
    let hostile = pending_run(&client, "mug", HOSTILE).await;

    let addr =
        serve(Dashboard::new(client.clone()).refresh_interval(Duration::from_millis(300))).await;
    let base = format!("http://{addr}/");
    let browser = Browser::launch().await;

    // The runs page lists the runs, newest first.
    browser.open(&format!("{base}runs")).await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (row, id) in rows.iter().zip([hostile, waiting, done.id()]) {
        assert!(row.contains(&id.to_string()), "{row} should show {id}");
    }
    assert!(
        rows[2].contains("dash-ship@1") && rows[2].contains("completed"),
        "{}",
        rows[2]
    );
    assert!(rows[1].contains("pending"), "{}", rows[1]);

    // Live refresh: a run started now appears without reloading.
    let fresh = pending_run(&client, "spoon", "").await;
    browser
        .wait_for(&format!("tr[data-run-id=\"{fresh}\"]"))
        .await;
    browser.screenshot(&shots, "runs").await;

    // A run's timeline shows its steps, attempts, errors, the sleep and the output.
    browser.open(&format!("{base}run?id={}", done.id())).await;
    let steps = browser.texts("#timeline tbody tr").await;
    let names = browser.texts("#timeline .step-name").await;
    assert_eq!(
        names,
        [
            "reserve",
            "book_carrier",
            "book_carrier",
            "cool-off",
            "ship_parcel"
        ],
        "{steps:#?}"
    );
    let attempts = browser.texts("#timeline tbody td:nth-child(3)").await;
    assert_eq!(attempts, ["1", "1", "2", "1", "1"]);
    let statuses = browser.texts("#timeline tbody td:nth-child(4)").await;
    assert_eq!(
        statuses,
        ["completed", "failed", "completed", "completed", "completed"]
    );
    assert!(
        steps[1].contains("carrier unavailable, retrying"),
        "{}",
        steps[1]
    );
    assert!(
        steps[3].contains("sleep") && steps[3].contains("until"),
        "{}",
        steps[3]
    );
    assert!(
        steps[4].contains("shipped parcel-42") || steps[4].contains("output"),
        "{}",
        steps[4]
    );
    let bars = browser.texts("#timeline svg.bar").await;
    assert_eq!(bars.len(), 5);
    browser.wait_for_text("#run-status", "completed").await;
    let shot = browser.screenshot(&shots, "run").await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    doc_screenshot(backend, &shot, "dashboard-run");

    // User data is shown as text, never as markup.
    browser.open(&format!("{base}run?id={hostile}")).await;
    let shown = browser.texts("pre.json").await.join("\n");
    // As JSON text: the quotes are escaped, the markup is not interpreted.
    assert!(
        shown.contains(r#"<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"#),
        "{shown}"
    );
    let injected = browser
        .client
        .execute(
            "return [document.querySelectorAll('main img, main script').length, String(window.pwned)]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(injected, json!([0, "undefined"]));

    // Cancel from the page cancels the run in the store.
    browser.open(&format!("{base}run?id={waiting}")).await;
    browser.click("#cancel-run").await;
    browser.wait_for_text("#notice", "canceled").await;
    browser.wait_for_text("#run-status", "canceled").await;
    let run = client.get_run(waiting).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Canceled);

    // An invalid start form shows every violation and stores nothing.
    let before = run_count(&client).await;
    browser.open(&format!("{base}workflows")).await;
    browser.click("table.workflows a[href*='dash-ship']").await;
    browser.wait_for("#start-run").await;
    let input = browser
        .client
        .find(fantoccini::Locator::Css("#input"))
        .await
        .unwrap();
    input.clear().await.unwrap();
    input
        .send_keys(r#"{"item": "", "quantity": 11}"#)
        .await
        .unwrap();
    browser.click("#start-run").await;
    let violations = browser.texts("#violations li").await;
    let violations = if violations.is_empty() {
        browser.wait_for("#violations").await;
        browser.texts("#violations li").await
    } else {
        violations
    };
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(
        violations.iter().any(|v| v.starts_with("/item")),
        "{violations:?}"
    );
    assert!(
        violations.iter().any(|v| v.starts_with("/quantity")),
        "{violations:?}"
    );
    browser
        .wait_for_text("#start-error", "Nothing was stored")
        .await;
    browser.screenshot(&shots, "start-invalid").await;
    assert_eq!(run_count(&client).await, before);

    // The same form with valid input starts the run and shows it.
    let input = browser
        .client
        .find(fantoccini::Locator::Css("#input"))
        .await
        .unwrap();
    input.clear().await.unwrap();
    input
        .send_keys(r#"{"item": "cup", "quantity": 3}"#)
        .await
        .unwrap();
    browser.click("#start-run").await;
    browser.wait_for_text("#notice", "started").await;
    let url = browser.client.current_url().await.unwrap();
    let id: Uuid = url
        .query_pairs()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| value.parse().unwrap())
        .expect("the run page's id");
    let run = client.get_run(id).await.unwrap().unwrap();
    assert_eq!(run.input, Some(json!({ "item": "cup", "quantity": 3 })));
    assert_eq!(run_count(&client).await, before + 1);

    browser.close().await;
}

/// The token of the forms on a page.
fn csrf_of(page: &str) -> String {
    let start = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    page[start..start + 64].to_owned()
}

/// Actions need the page's token and a same-site request; credentials guard every page;
/// every response forbids inline scripts and framing.
async fn actions_and_credentials_are_guarded(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let id = pending_run(&client, "kettle", "").await;
    let addr = serve(Dashboard::new(client.clone())).await;

    let (status, head, page) = http(addr, &format!("GET /run?id={id} HTTP/1.1\r\n"), "").await;
    assert_eq!(status, 200);
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(head.contains("x-frame-options: deny"), "{head}");
    let token = csrf_of(&page);
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";

    // No token, a wrong token, a cross-site request with the right token: all refused.
    for (headers, body) in [
        (String::new(), format!("id={id}&action=cancel&csrf=")),
        (
            String::new(),
            format!("id={id}&action=cancel&csrf={}", "0".repeat(64)),
        ),
        (
            "Sec-Fetch-Site: cross-site\r\n".to_owned(),
            format!("id={id}&action=cancel&csrf={token}"),
        ),
        (
            "Origin: http://evil.test\r\n".to_owned(),
            format!("id={id}&action=cancel&csrf={token}"),
        ),
    ] {
        let request = format!("POST /action HTTP/1.1\r\n{form}{headers}");
        let (status, _, _) = http(addr, &request, &body).await;
        assert_eq!(status, 403, "{headers} {body}");
    }
    assert_eq!(
        client.get_run(id).await.unwrap().unwrap().status,
        RunStatus::Pending
    );

    // The right token from the same site: done, and back to the run's page.
    let request = format!("POST /action HTTP/1.1\r\n{form}Sec-Fetch-Site: same-origin\r\n");
    let (status, head, _) = http(
        addr,
        &request,
        &format!("id={id}&action=pause&csrf={token}"),
    )
    .await;
    assert_eq!(status, 303, "{head}");
    assert!(
        head.contains(&format!("location: /run?id={id}&done=paused")),
        "{head}"
    );
    assert_eq!(
        client.get_run(id).await.unwrap().unwrap().status,
        RunStatus::Paused
    );

    // A refused transition is a page saying why, not a change.
    let canceled = pending_run(&client, "cup", "").await;
    client.cancel(canceled).await.unwrap();
    let (status, _, page) = http(
        addr,
        &request,
        &format!("id={canceled}&action=resume&csrf={token}"),
    )
    .await;
    assert_eq!(status, 409);
    assert!(page.contains("canceled"), "{page}");

    // Bearer and basic credentials.
    let guarded = serve(Dashboard::new(client.clone()).bearer_token("s3cret")).await;
    let (status, head, _) = http(guarded, "GET / HTTP/1.1\r\n", "").await;
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    // The refusal carries the security headers of every other response.
    for header in [
        "content-security-policy: default-src 'none'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
        "referrer-policy: same-origin",
        "cache-control: no-store",
    ] {
        assert!(head.contains(header), "{header} in {head}");
    }
    let (status, _, _) = http(
        guarded,
        "GET / HTTP/1.1\r\nAuthorization: Bearer wrong\r\n",
        "",
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, page) = http(
        guarded,
        "GET /runs HTTP/1.1\r\nAuthorization: Bearer s3cret\r\n",
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains(&id.to_string()));

    let basic = serve(Dashboard::new(client.clone()).basic_auth("ops", "pa:ss")).await;
    let (status, head, _) = http(basic, "GET /workflows HTTP/1.1\r\n", "").await;
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: basic"), "{head}");
    // base64("ops:pa:ss")
    let (status, _, page) = http(
        basic,
        "GET /workflows HTTP/1.1\r\nAuthorization: Basic b3BzOnBhOnNz\r\n",
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains("dash-ship"));

    // Cursor pages: one run per page, the next page holds the older run.
    let (status, _, first) = http(addr, "GET /runs?limit=1 HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200);
    assert!(first.contains(&canceled.to_string()) && !first.contains(&id.to_string()));
    let next = first
        .split_once("id=\"next-page\" href=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(href, _)| href.replace("&amp;", "&"))
        .expect("a link to the next page");
    let (status, _, second) = http(addr, &format!("GET {next} HTTP/1.1\r\n"), "").await;
    assert_eq!(status, 200, "{next}");
    assert!(second.contains(&id.to_string()) && !second.contains(&canceled.to_string()));
    // Filters: by status; a status that does not exist is a clear 400.
    let (_, _, paused) = http(addr, "GET /runs?status=paused HTTP/1.1\r\n", "").await;
    assert!(paused.contains(&id.to_string()) && !paused.contains(&canceled.to_string()));
    let (status, _, page) = http(addr, "GET /runs?status=bogus HTTP/1.1\r\n", "").await;
    assert_eq!(status, 400);
    assert!(page.contains("unknown status"), "{page}");
    // A link made when the runs were the landing page still reaches them.
    let (status, head, _) = http(addr, "GET /?status=paused HTTP/1.1\r\n", "").await;
    assert_eq!(status, 303, "{head}");
    assert!(head.contains("location: /runs?status=paused"), "{head}");

    // Nested in an application's router as the docs say, the mount point answers with and
    // without a trailing slash, and every link starts at the mount point.
    let app = tasks::dashboard::axum::Router::new()
        .nest_service("/ops", Dashboard::new(client.clone()).router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nested = listener.local_addr().unwrap();
    tokio::spawn(async move { tasks::dashboard::axum::serve(listener, app).await.unwrap() });
    for mount in ["/ops", "/ops/"] {
        let (status, _, page) = http(nested, &format!("GET {mount} HTTP/1.1\r\n"), "").await;
        assert_eq!(status, 200, "{mount}");
        for link in [
            "href=\"/ops/assets/style.css\"",
            "href=\"/ops/workflows\"",
            "href=\"/ops/runs\"",
            "href=\"/ops/queues\"",
            "href=\"/ops/workers\"",
        ] {
            assert!(page.contains(link), "{mount}: {link} in {page}");
        }
    }
    let (status, _, page) = http(nested, "GET /ops/runs HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("href=\"/ops/run?id={id}\"")),
        "{page}"
    );
    let (status, _, _) = http(nested, "GET /ops/assets/style.css HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200);
    let (status, _, page) = http(nested, "GET /ops/workflows HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("href=\"/ops/workflow?name=dash-ship&amp;version=1\""),
        "{page}"
    );

    // The assets are served from the binary.
    let (status, head, body) = http(addr, "GET /assets/dashboard.js HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert!(body.contains("DOMParser"));
    let (status, _, _) = http(addr, "GET /assets/nope.js HTTP/1.1\r\n", "").await;
    assert_eq!(status, 404);
}

/// The id in the query of the browser's page.
async fn id_in_url(browser: &Browser) -> Uuid {
    let url = browser.client.current_url().await.unwrap();
    url.query_pairs()
        .find(|(key, _)| key == "id")
        .map(|(_, value)| value.parse().unwrap())
        .expect("the run page's id")
}

/// Types `text` into the field matching `css`, replacing what it held.
async fn type_into(browser: &Browser, css: &str, text: &str) {
    let field = browser
        .client
        .find(fantoccini::Locator::Css(css))
        .await
        .unwrap();
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

/// The actions of a run's page in Chromium: fork a failed run from a step (onto the new
/// run's page), retry it (runnable again in the store), send an event (an invalid payload
/// shows every violation and stores nothing, a valid one is stored), and the schedules
/// page (pause from the page pauses the schedule in the store).
async fn run_actions_in_chromium(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let shots = screenshots(backend);

    let worker = worker(&store).build().unwrap().spawn();
    let failed = client.start::<dash_refuse>(()).await.unwrap().id();
    eventually!(Duration::from_secs(30), {
        let run = client.get_run(failed).await.unwrap().unwrap();
        (run.status == RunStatus::Failed).then_some(())
    });
    worker.shutdown().await;

    let addr = serve(Dashboard::new(client.clone())).await;
    let base = format!("http://{addr}/");
    let browser = Browser::launch().await;

    // A failed run offers retry and a fork from each step; fork opens the new run.
    browser.open(&format!("{base}run?id={failed}")).await;
    browser.wait_for_text("#run-status", "failed").await;
    let forks = browser.texts("#timeline button.fork").await;
    assert_eq!(
        forks,
        ["Fork from here"],
        "one step, one fork button: {}",
        browser.client.source().await.unwrap()
    );
    browser.screenshot(&shots, "run-failed").await;
    browser.click("#timeline button.fork").await;
    browser.wait_for_text("#notice", "forked").await;
    let fork = id_in_url(&browser).await;
    assert_ne!(fork, failed);
    assert!(
        browser
            .wait_for("#forked-from")
            .await
            .contains(&format!("{failed} at step take_note")),
    );
    let forked = client.get_run(fork).await.unwrap().unwrap();
    assert_eq!(forked.forked_from_run_id, Some(failed));
    assert_eq!(forked.forked_from_step.as_deref(), Some("take_note"));
    assert_eq!(forked.status, RunStatus::Pending);

    // Retry makes the failed run runnable again, in the store.
    browser.open(&format!("{base}run?id={failed}")).await;
    browser.click("#retry-run").await;
    browser.wait_for_text("#notice", "retried").await;
    assert_eq!(id_in_url(&browser).await, failed);
    let retried = client.get_run(failed).await.unwrap().unwrap();
    assert_eq!(retried.status, RunStatus::Pending);
    // A live run offers neither retry nor fork.
    assert!(browser.texts("#retry-run").await.is_empty());
    assert!(browser.texts("#timeline button.fork").await.is_empty());

    // Retrying it again is refused with the store's reason, and changes nothing.
    let page = csrf_page(addr, failed).await;
    let (status, _, body) = http(
        addr,
        &format!("POST /action HTTP/1.1\r\n{FORM}Sec-Fetch-Site: same-origin\r\n"),
        &format!("id={failed}&action=retry&csrf={}", csrf_of(&page)),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("pending"), "{body}");
    // Forking from a step the run never recorded is a 404 saying so.
    let (status, _, body) = http(
        addr,
        &format!("POST /fork HTTP/1.1\r\n{FORM}Sec-Fetch-Site: same-origin\r\n"),
        &format!("id={fork}&step=nope&csrf={}", csrf_of(&page)),
    )
    .await;
    assert!(status == 404 || status == 409, "{status} {body}");

    // The event form: only the topics the run's workflow declares.
    let waiting = client.start::<dash_approve>(()).await.unwrap().id();
    browser.open(&format!("{base}run?id={waiting}")).await;
    let topics = browser.texts("#event-topic option").await;
    assert_eq!(topics, ["dash-approval"]);
    // An invalid payload: every violation with its path, nothing stored.
    type_into(&browser, "#event-payload", r#"{"by": "", "level": 7}"#).await;
    browser.click("#send-event").await;
    browser.wait_for("#event-error").await;
    let violations = browser.texts("#event-violations li").await;
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(
        violations.iter().any(|v| v.starts_with("/by")),
        "{violations:?}"
    );
    assert!(
        violations.iter().any(|v| v.starts_with("/level")),
        "{violations:?}"
    );
    browser
        .wait_for_text("#event-error", "Nothing was stored")
        .await;
    // The payload is shown again as typed.
    let typed = browser
        .client
        .execute(
            "return document.getElementById('event-payload').value",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(typed, json!(r#"{"by": "", "level": 7}"#));
    browser.screenshot(&shots, "event-invalid").await;
    assert!(
        client
            .store()
            .contract()
            .events()
            .unwrap()
            .list_events(waiting)
            .await
            .unwrap()
            .is_empty()
    );
    // Not JSON at all: said so, nothing stored.
    type_into(&browser, "#event-payload", "{by: ada").await;
    browser.click("#send-event").await;
    browser
        .wait_for_text("#event-error", "not valid JSON")
        .await;
    assert!(
        client
            .store()
            .contract()
            .events()
            .unwrap()
            .list_events(waiting)
            .await
            .unwrap()
            .is_empty()
    );
    // A valid payload is stored.
    type_into(&browser, "#event-payload", r#"{"by": "ada", "level": 2}"#).await;
    browser.click("#send-event").await;
    browser.wait_for_text("#notice", "Event sent").await;
    let events = client
        .store()
        .contract()
        .events()
        .unwrap()
        .list_events(waiting)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, json!({ "by": "ada", "level": 2 }));
    // A run whose workflow declares no events has no form.
    browser.open(&format!("{base}run?id={fork}")).await;
    assert!(browser.texts("#send-event").await.is_empty());

    // Schedules: listed from the nav, paused from the page, in the store.
    client
        .create_schedule(NewSchedule {
            name: "nightly-refusal".to_owned(),
            workflow_name: "dash-refuse".to_owned(),
            version: None,
            cron: "0 3 * * *".to_owned(),
            timezone: "Europe/Paris".to_owned(),
            input: serde_json::Value::Null,
            catch_up: CatchUp::Skip,
        })
        .await
        .unwrap();
    browser.open(&base).await;
    browser.click("#nav-schedules").await;
    let rows = browser.texts("#schedules tbody tr").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    for shown in [
        "nightly-refusal",
        "dash-refuse",
        "0 3 * * *",
        "Europe/Paris",
        "active",
    ] {
        assert!(rows[0].contains(shown), "{shown} in {}", rows[0]);
    }
    browser
        .click("tr[data-schedule='nightly-refusal'] button.pause")
        .await;
    browser.wait_for_text("#notice", "paused").await;
    browser.wait_for_text("#schedules td.state", "paused").await;
    let schedule = client
        .get_schedule("nightly-refusal")
        .await
        .unwrap()
        .unwrap();
    assert!(schedule.paused);
    browser.screenshot(&shots, "schedules").await;
    browser
        .click("tr[data-schedule='nightly-refusal'] button.resume")
        .await;
    browser.wait_for_text("#notice", "resumed").await;
    assert!(
        !client
            .get_schedule("nightly-refusal")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    browser.close().await;

    // Delete (which asks first in a browser) needs the token and a same-site request too.
    let (_, _, page) = http(addr, "GET /schedules HTTP/1.1\r\n", "").await;
    let body = format!("name=nightly-refusal&action=delete&csrf={}", csrf_of(&page));
    let cross = format!("POST /schedule HTTP/1.1\r\n{FORM}Sec-Fetch-Site: cross-site\r\n");
    assert_eq!(http(addr, &cross, &body).await.0, 403);
    let wrong = format!("name=nightly-refusal&action=delete&csrf={}", "0".repeat(64));
    let same = format!("POST /schedule HTTP/1.1\r\n{FORM}Sec-Fetch-Site: same-origin\r\n");
    assert_eq!(http(addr, &same, &wrong).await.0, 403);
    assert!(
        client
            .get_schedule("nightly-refusal")
            .await
            .unwrap()
            .is_some()
    );
    let (status, head, _) = http(addr, &same, &body).await;
    assert_eq!(status, 303, "{head}");
    assert!(head.contains("location: /schedules?done=deleted"), "{head}");
    assert!(
        client
            .get_schedule("nightly-refusal")
            .await
            .unwrap()
            .is_none()
    );
    // A schedule that is not there: 404 with the store's reason.
    let (status, _, page) = http(addr, &same, &body).await;
    assert_eq!(status, 404);
    assert!(page.contains("nightly-refusal"), "{page}");
}

const FORM: &str = "Content-Type: application/x-www-form-urlencoded\r\n";

/// A run's page, over HTTP.
async fn csrf_page(addr: SocketAddr, id: Uuid) -> String {
    let (status, _, page) = http(addr, &format!("GET /run?id={id} HTTP/1.1\r\n"), "").await;
    assert_eq!(status, 200);
    page
}

/// A writer shared with a command that runs in another task.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("tasks").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{error}"))
}

/// `tasks dashboard` binds to loopback by default and serves the store it connects to,
/// behind the credentials it is given.
async fn cli_dashboard_serves_the_store(backend: Backend) {
    let store: TestStore = backend.store().await;
    let id = pending_run(&client(&store), "kettle", "").await;

    let defaults = parse(&["dashboard"]);
    match &defaults.tasks.command {
        Command::Dashboard(args) => {
            assert_eq!(args.bind, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
            assert!(args.token.is_none() && args.basic_auth.is_none());
        }
        other => panic!("parsed as {other:?}"),
    }
    let refused = Cli::try_parse_from(["tasks", "dashboard", "--basic-auth", "no-colon"]);
    assert_eq!(refused.unwrap_err().exit_code(), 2);

    let url = store.url();
    let cli = parse(&[
        "--database-url",
        &url,
        "--namespace",
        store.namespace(),
        "dashboard",
        "--bind",
        "127.0.0.1:0",
        "--token",
        "t0ken",
    ]);
    let (out, err) = (Shared::default(), Shared::default());
    let (mut task_out, mut task_err) = (out.clone(), err.clone());
    let serving = tokio::spawn(async move { cli.execute(&mut task_out, &mut task_err).await });
    let addr: SocketAddr = eventually!(Duration::from_secs(30), {
        out.text()
            .split_once("dashboard on http://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .and_then(|(addr, _)| addr.parse().ok())
    });
    assert!(addr.ip().is_loopback());
    let (status, _, _) = http(addr, "GET / HTTP/1.1\r\n", "").await;
    assert_eq!(status, 401);
    let (status, _, page) = http(
        addr,
        "GET /runs HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n",
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains(&id.to_string()), "{page}");
    assert_eq!(err.text(), "");
    serving.abort();
}

/// `tasks worker --metrics-bind ADDR` serves the Prometheus metrics while it works.
async fn cli_worker_serves_metrics(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let url = store.url();
    let cli = parse(&[
        "--database-url",
        &url,
        "--namespace",
        store.namespace(),
        "worker",
        "--metrics-bind",
        "127.0.0.1:0",
    ]);
    let (out, err) = (Shared::default(), Shared::default());
    let (mut task_out, mut task_err) = (out.clone(), err.clone());
    let working = tokio::spawn(async move { cli.execute(&mut task_out, &mut task_err).await });
    let addr: SocketAddr = eventually!(Duration::from_secs(30), {
        out.text()
            .split_once("metrics on http://")
            .and_then(|(_, rest)| rest.split_once("/metrics"))
            .and_then(|(addr, _)| addr.parse().ok())
    });
    // The worker executes a run, and the scrape counts it.
    let run = client.start::<dash_ship>(order("lamp", "")).await.unwrap();
    let output = run.result_within(Duration::from_secs(30)).await.unwrap();
    assert_eq!(output, "shipped parcel-42");
    let (status, head, _) = http(addr, "GET /metrics HTTP/1.1\r\n", "").await;
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("content-type: text/plain"), "{head}");
    // The worker counts the run just after the store shows it completed.
    let body = eventually!(Duration::from_secs(30), {
        let (_, _, body) = http(addr, "GET /metrics HTTP/1.1\r\n", "").await;
        body.lines()
            .any(|line| {
                line.starts_with("tasks_runs_finished_total{")
                    && line.contains("workflow=\"dash-ship\"")
                    && line.contains("status=\"completed\"")
                    && line.ends_with(" 1")
            })
            .then_some(body)
    });
    assert!(body.contains("tasks_worker_slots 16"), "{body}");
    assert!(
        body.contains("tasks_step_attempts_total{") && body.contains("step=\"book_carrier\""),
        "{body}"
    );
    assert_eq!(err.text(), "");
    working.abort();

    // An address that cannot be bound is a usage error (exit 2).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cli = parse(&[
        "--database-url",
        &url,
        "--namespace",
        store.namespace(),
        "worker",
        "--metrics-bind",
        &taken.local_addr().unwrap().to_string(),
    ]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli.execute(&mut out, &mut err).await;
    assert_eq!(exit.code(), 2);
    assert!(String::from_utf8(err).unwrap().contains("cannot listen on"));
}

/// A run's page shows the arguments each step was called with, HTML-escaped like all user
/// data.
async fn step_arguments_are_shown_escaped(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let done = client
        .start::<dash_ship>(order("teapot", HOSTILE))
        .await
        .unwrap();
    done.result_within(Duration::from_secs(30)).await.unwrap();
    worker.shutdown().await;
    let addr = serve(Dashboard::new(client.clone())).await;

    let (status, _, page) =
        http(addr, &format!("GET /run?id={} HTTP/1.1\r\n", done.id()), "").await;
    assert_eq!(status, 200);
    assert!(page.contains("<summary>arguments</summary>"), "{page}");
    // `reserve(order)` and `ship(parcel)`; `book_carrier()` takes none.
    assert!(page.contains("parcel"), "{page}");
    assert!(
        page.contains("&quot;item&quot;:&quot;teapot&quot;"),
        "{page}"
    );
    assert!(
        page.contains("&lt;img src=x onerror=\\&quot;window.pwned=1\\&quot;&gt;&lt;script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<img"), "{page}");
    assert!(!page.contains("<script>window"), "{page}");
}

/// A run's page shows what the run published (each key's latest value and version,
/// escaped) and the trace it joins.
async fn published_state_and_trace_are_shown(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = tasks::store::trace::TraceContext::new(traceparent, None).unwrap();
    let done = client
        .start::<dash_progress>(())
        .trace_context(trace)
        .await
        .unwrap();
    done.result_within(Duration::from_secs(30)).await.unwrap();
    worker.shutdown().await;
    let addr = serve(Dashboard::new(client.clone())).await;

    let (status, _, page) =
        http(addr, &format!("GET /run?id={} HTTP/1.1\r\n", done.id()), "").await;
    assert_eq!(status, 200);
    assert!(page.contains("<h2>Published state</h2>"), "{page}");
    let row = |key: &str| {
        let start = page
            .find(&format!("data-key=\"{key}\""))
            .unwrap_or_else(|| panic!("no row for {key}: {page}"));
        let end = start + page[start..].find("</tr>").unwrap();
        page[start..end].to_owned()
    };
    let progress = row("progress");
    assert!(progress.contains("<td class=\"num\">2</td>"), "{progress}");
    assert!(progress.contains("&quot;done&quot;: 4"), "{progress}");
    assert!(!progress.contains("&quot;done&quot;: 3"), "{progress}");
    let note = row("note");
    assert!(note.contains("&lt;img src=x"), "{note}");
    assert!(!page.contains("<img"), "{page}");
    assert!(page.contains(&format!(">{traceparent}</dd>")), "{page}");

    // A run that published nothing has no such section.
    let id = pending_run(&client, "kettle", "").await;
    let (_, _, page) = http(addr, &format!("GET /run?id={id} HTTP/1.1\r\n"), "").await;
    assert!(!page.contains("Published state"), "{page}");
}

/// Where the guide's screenshots are: `docs/` of the repository.
fn doc_screenshots() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs"))
}

/// Copies a screenshot to `docs/{name}.png` when `TASKS_UPDATE_SCREENSHOTS` is set (on
/// SQLite only, so that one run writes each file once), and checks that the checked-in copy
/// is a PNG of a real page. Not on every run: a screenshot differs in every run (its ids
/// and times), and the repository keeps one, refreshed on purpose.
fn doc_screenshot(backend: Backend, shot: &std::path::Path, name: &str) {
    let path = doc_screenshots().join(format!("{name}.png"));
    if matches!(backend, Backend::Sqlite) && std::env::var_os("TASKS_UPDATE_SCREENSHOTS").is_some()
    {
        std::fs::copy(shot, &path).expect("the doc screenshot is written");
    }
    let png = std::fs::read(&path).unwrap_or_else(|error| {
        panic!(
            "{}: {error}; write it with `TASKS_UPDATE_SCREENSHOTS=1 cargo nextest run -p tasks-tests -E 'test(/dashboard::.*sqlite/)'`",
            path.display()
        )
    });
    assert!(png.starts_with(b"\x89PNG"), "{} is a PNG", path.display());
    assert!(
        png.len() > 10_000,
        "{} is a page, not a blank",
        path.display()
    );
}

/// The figure of the element `css` on the page, as a number.
async fn figure(browser: &Browser, css: &str) -> u64 {
    let text = browser.wait_for(css).await;
    text.split_whitespace()
        .next()
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("{css} shows no figure: {text:?}"))
}

/// Waits until the figure of `css` is `expected` (the live refresh may show an older page
/// first), and returns it.
async fn figure_is(browser: &Browser, css: &str, expected: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let shown = figure(browser, css).await;
        if shown == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{css} shows {shown}, not {expected}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The overview (the landing page), the queues and the workers pages in Chromium: the
/// figures shown are those of the runs the test made, and the runs page's filters and
/// search narrow the list.
async fn overview_queues_and_workers_in_chromium(backend: Backend) {
    let store: TestStore = backend.store().await;
    let client = client(&store);
    let shots = screenshots(backend);

    // A worker of the default queue only: it finishes two shipments and one refusal, then
    // stays, idle and live.
    let worker_id = format!("dash-worker-{}", Uuid::new_v4().simple());
    let worker = worker(&store)
        .queues(["default"])
        .worker_id(worker_id.clone())
        .build()
        .unwrap()
        .spawn();
    for item in ["teapot", "kettle"] {
        let run = client.start::<dash_ship>(order(item, "")).await.unwrap();
        run.result_within(Duration::from_secs(30)).await.unwrap();
    }
    let refused = client.start::<dash_refuse>(()).await.unwrap();
    assert!(
        refused
            .result_within(Duration::from_secs(30))
            .await
            .is_err()
    );
    // Two runs ready in the "mail" queue, which no worker serves; one keyed, one with an
    // idempotency key.
    let keyed = client
        .start::<dash_ship>(order("letter", ""))
        .queue("mail")
        .concurrency_key("tenant-7", 2)
        .await
        .unwrap()
        .id();
    let by_key = client
        .start::<dash_ship>(order("parcel", ""))
        .queue("mail")
        .idempotency_key("order-1234")
        .await
        .unwrap()
        .id();
    // One run delayed by an hour in the default queue, and one paused.
    let delayed = pending_run(&client, "cup", "").await;
    let paused = pending_run(&client, "saucer", "").await;
    client.pause(paused).await.unwrap();

    let addr =
        serve(Dashboard::new(client.clone()).refresh_interval(Duration::from_millis(500))).await;
    let base = format!("http://{addr}/");
    let browser = Browser::launch().await;

    // The overview is the landing page.
    browser.open(&base).await;
    browser.wait_for_text("h1", "Overview").await;
    figure_is(&browser, "#count-pending", 3).await;
    figure_is(&browser, "#count-running", 0).await;
    figure_is(&browser, "#count-paused", 1).await;
    figure_is(&browser, "#finished-completed", 2).await;
    figure_is(&browser, "#finished-failed", 1).await;
    figure_is(&browser, "#finished-canceled", 0).await;
    // The chart draws the same figures: one bar per status with runs, in the last minutes.
    let drawn = browser
        .client
        .execute(
            "var svg = document.querySelector('svg#throughput'); return [svg.getAttribute('data-completed'), svg.getAttribute('data-failed'), svg.querySelectorAll('rect.completed').length > 0, svg.querySelectorAll('rect.failed').length > 0]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(drawn, json!(["2", "1", true, true]));
    // The backlog of each queue.
    let mail = browser
        .wait_for_text("#queues-panel tr[data-queue=\"mail\"]", "mail")
        .await;
    let cells: Vec<&str> = mail.split_whitespace().collect();
    assert_eq!(&cells[..4], ["mail", "2", "0", "0"], "{mail}");
    let default = browser
        .wait_for("#queues-panel tr[data-queue=\"default\"]")
        .await;
    let cells: Vec<&str> = default.split_whitespace().collect();
    assert_eq!(&cells[..5], ["default", "0", "1", "0", "-"], "{default}");
    // The live worker.
    let row = browser
        .wait_for(&format!("#workers-panel tr[data-worker=\"{worker_id}\"]"))
        .await;
    assert!(row.contains("live") && row.contains("ago"), "{row}");
    browser.wait_for("#nav-overview.current").await;
    let shot = browser.screenshot(&shots, "overview").await;
    doc_screenshot(backend, &shot, "dashboard-overview");

    // A figure opens the runs it counts.
    browser.click("#count-paused").await;
    browser.wait_for_text("h1", "Runs").await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains(&paused.to_string()), "{rows:?}");

    // The queues page, from the nav.
    browser.click("#nav-queues").await;
    let mail = browser
        .wait_for("table.backlog tr[data-queue=\"mail\"] td.ready")
        .await;
    assert_eq!(mail, "2");
    // The workers page, from the nav.
    browser.click("#nav-workers").await;
    let running = browser
        .wait_for(&format!(
            "table.workers tr[data-worker=\"{worker_id}\"] td.running"
        ))
        .await;
    assert_eq!(running, "0");

    // Filters on the runs page: the queue, then the concurrency key, then the version.
    browser.open(&format!("{base}runs")).await;
    assert_eq!(browser.texts("table.runs tbody tr").await.len(), 7);
    type_into(&browser, "#filter-queue", "mail").await;
    browser.click("#filter-runs").await;
    browser.wait_for("#filter-queue[value=\"mail\"]").await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|row| row.contains("mail")), "{rows:?}");
    type_into(&browser, "#filter-key", "tenant-7").await;
    browser.click("#filter-runs").await;
    browser.wait_for("#filter-key[value=\"tenant-7\"]").await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains(&keyed.to_string()), "{rows:?}");
    browser.open(&format!("{base}runs?version=1")).await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 6, "every run but the refusal: {rows:?}");
    assert!(
        rows.iter().all(|row| row.contains("dash-ship@1")),
        "{rows:?}"
    );

    // Search: by idempotency key, then by run id.
    browser.open(&format!("{base}runs")).await;
    type_into(&browser, "#search", "order-1234").await;
    browser.click("#filter-runs").await;
    browser.wait_for("#search[value=\"order-1234\"]").await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains(&by_key.to_string()), "{rows:?}");
    browser.open(&format!("{base}runs?q={delayed}")).await;
    let rows = browser.texts("table.runs tbody tr").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains(&delayed.to_string()), "{rows:?}");

    browser.close().await;
    worker.shutdown().await;
}

every_store! {
    overview_queues_and_workers_in_chromium,
    published_state_and_trace_are_shown,
    pages_work_in_chromium,
    run_actions_in_chromium,
    step_arguments_are_shown_escaped,
    actions_and_credentials_are_guarded,
    ;
    sql:
    cli_dashboard_serves_the_store,
    cli_worker_serves_metrics,
}
