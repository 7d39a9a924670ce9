//! The HTTP JSON API served next to a worker, for callers in other languages: start an
//! invoice run with `curl`, send it the payment it waits for, read its published status.
//! `--once` makes one request of its own (a start) and exits; `--openapi` prints the
//! OpenAPI document of this binary's workflows (the copy in `docs/openapi.json`).
//!
//! ```sh
//! TASKS_API_TOKEN=dev-token-0123456789 cargo run --example http_api
//! curl -s -X POST http://127.0.0.1:8081/v1/namespaces/default/workflows/send-invoice/runs \
//!   -H 'Authorization: Bearer dev-token-0123456789' -H 'Content-Type: application/json' \
//!   -d '{"input": {"customer": "ada", "amount_cents": 4200}}'
//! ```
//!
//! With no `DATABASE_URL` it uses the SQLite file `tasks.sqlite` in the current directory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tasks::http_api::{HttpApi, Token, axum};
use tasks::{Client, Event, Worker, WorkflowContext, WorkflowError, step, workflow};

/// An invoice to send.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Invoice {
    /// Who pays.
    #[schemars(length(min = 1))]
    customer: String,
    /// How much, in cents.
    #[schemars(range(min = 1))]
    amount_cents: u64,
}

/// A payment received for an invoice (sent by a payment provider's webhook).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Payment {
    /// How much was paid, in cents.
    paid_cents: u64,
}

impl Event for Payment {
    const TOPIC: &'static str = "payment";
}

#[step]
async fn email_invoice(invoice: &Invoice) -> Result<String, std::io::Error> {
    Ok(format!(
        "invoice for {} cents sent to {}",
        invoice.amount_cents, invoice.customer
    ))
}

/// Sends an invoice, then waits for its payment; publishes its status under `status`.
#[workflow(name = "send-invoice", events(Payment))]
async fn send_invoice(ctx: WorkflowContext, invoice: Invoice) -> Result<String, WorkflowError> {
    email_invoice(&invoice).await?;
    ctx.set_state("status", &"sent").await?;
    let payment = ctx.wait_for_event::<Payment>().await?;
    ctx.set_state("status", &"paid").await?;
    Ok(format!(
        "{} paid {} cents",
        invoice.customer, payment.paid_cents
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--openapi") {
        let registry = tasks::Registry::from_inventory()?;
        println!(
            "{}",
            serde_json::to_string_pretty(&tasks::http_api::openapi(&registry))?
        );
        return Ok(());
    }
    let store = tasks::connect_from_env().await?;
    let worker = Worker::builder(store.clone()).build()?.spawn();
    let client = Client::new(store)?;
    let once = std::env::args().any(|arg| arg == "--once");
    let secret = match std::env::var("TASKS_API_TOKEN") {
        Ok(secret) if !once => secret,
        _ => format!("example-{}", tasks::uuid::Uuid::new_v4().simple()),
    };
    // One token, operating on the default namespace only.
    let api = HttpApi::new(client)
        .token(
            Token::new(secret.clone())?
                .namespace(tasks::DEFAULT_NAMESPACE)
                .operate(),
        )
        .router();
    let app = axum::Router::new().merge(api);

    if once {
        // One round and exit (the test command runs every example): serve on a free port,
        // start a run with a request of our own, print the status line.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        let body = r#"{"input": {"customer": "ada", "amount_cents": 4200}}"#;
        let path = "/v1/namespaces/default/workflows/send-invoice/runs";
        println!("POST {path}: {}", post(addr, path, &secret, body).await?);
        worker.shutdown().await;
        return Ok(());
    }
    // Loopback only: bind another address only with tokens you hand out.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
    println!("HTTP API on http://127.0.0.1:8081/v1/namespaces/default/ (Ctrl-C stops)");
    tasks::http_api::serve(listener, app).await?;
    worker.shutdown().await;
    Ok(())
}

/// The status line of a plain HTTP/1.1 POST (no HTTP client needed for one request).
async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    token: &str,
    body: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response.lines().next().unwrap_or_default().to_owned())
}
