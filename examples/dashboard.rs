//! The web dashboard mounted in an application's own axum server, next to its own routes,
//! with a worker in the same process. `--once` serves one request of its own and exits.
//!
//! ```sh
//! cargo run --example dashboard
//! # then open http://127.0.0.1:8080/tasks/ (the application's own page is at /)
//! ```
//!
//! With no `DATABASE_URL` it uses the SQLite file `tasks.sqlite` in the current directory.
//! `DASHBOARD_TOKEN=...` requires `Authorization: Bearer ...` on the dashboard's requests.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::dashboard::{Dashboard, axum};
use tasks::{Client, Worker, WorkflowContext, WorkflowError, step, workflow};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Report {
    /// Who asked for it.
    #[schemars(length(min = 1))]
    requested_by: String,
    /// How many sections to render.
    #[schemars(range(min = 1, max = 5))]
    sections: u32,
}

#[step]
async fn gather(sections: u32) -> Result<Vec<String>, std::io::Error> {
    Ok((1..=sections).map(|n| format!("section {n}")).collect())
}

#[step]
async fn render(parts: &[String]) -> Result<String, std::io::Error> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(parts.join(" | "))
}

/// Renders a report, pausing between gathering and rendering.
#[workflow(name = "report", version = "1")]
async fn report(ctx: WorkflowContext, input: Report) -> Result<String, WorkflowError> {
    let parts = gather(input.sections).await?;
    ctx.sleep("settle", Duration::from_secs(2)).await?;
    Ok(render(&parts).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = tasks::connect_from_env().await?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;
    // Something to look at.
    let input = Report {
        requested_by: "example".into(),
        sections: 3,
    };
    client.start::<report>(input).await?;

    let mut dashboard = Dashboard::new(client);
    if let Ok(token) = std::env::var("DASHBOARD_TOKEN") {
        dashboard = dashboard.bearer_token(token);
    }
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async {
                axum::response::Html("<p>My application. <a href=\"/tasks/\">Workflows</a></p>")
            }),
        )
        .nest_service("/tasks", dashboard.router());

    if std::env::args().any(|arg| arg == "--once") {
        // One round and exit (the test command runs every example): serve on a free port,
        // open the dashboard's page once, print what it answered.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        println!("GET /tasks/: {}", status_of(addr, "/tasks/").await?);
        worker.shutdown().await;
        return Ok(());
    }
    // Loopback only: put credentials on the dashboard before binding anything else.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    println!("open http://127.0.0.1:8080/tasks/ (Ctrl-C stops)");
    tasks::dashboard::serve(listener, app).await?;
    worker.shutdown().await;
    Ok(())
}

/// The status line of a plain HTTP/1.1 GET of `path` (no HTTP client needed for one request).
async fn status_of(
    addr: std::net::SocketAddr,
    path: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response.lines().next().unwrap_or_default().to_owned())
}
