//! Back-pressure from a rate-limited API, and a singleton run per account.
//!
//! The API answers HTTP 429 with `Retry-After: 1` twice: each time the step asks to be
//! retried after that delay, the run parks (its worker slot is free meanwhile) and the
//! attempt is not used up, so a step allowed a single attempt still succeeds on the third
//! call. The run is started with an idempotency key held while it is active: a second start
//! during the run returns it, a start after it has finished creates a new run.
//!
//! ```sh
//! cargo run --example rate_limited
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tasks::{
    Client, IdempotencyScope, RetryAfter, Worker, WorkflowContext, WorkflowError, step, workflow,
};

static CALLS: AtomicU32 = AtomicU32::new(0);

/// The API: rate limited on the first two calls.
fn call_api(account: &str) -> Result<String, (u16, Option<String>)> {
    match CALLS.fetch_add(1, Ordering::SeqCst) + 1 {
        call @ (1 | 2) => {
            println!("  call {call}: 429 Too Many Requests, Retry-After: 1");
            Err((429, Some("1".into())))
        }
        call => {
            println!("  call {call}: 200 OK");
            Ok(format!("synced {account}"))
        }
    }
}

/// One attempt only: a retry-after does not use it up.
#[step(retry(max_attempts = 1))]
async fn sync(account: &str) -> Result<String, WorkflowError> {
    call_api(account).map_err(|(status, retry_after)| {
        let error = WorkflowError::msg(format!("HTTP {status}"));
        let now = chrono::Utc::now();
        match retry_after.and_then(|value| RetryAfter::from_header(&value, now)) {
            Some(retry) => error.retry_after(retry.delay()),
            None => error,
        }
    })
}

#[workflow(name = "sync-account")]
async fn sync_account(_ctx: WorkflowContext, account: String) -> Result<String, WorkflowError> {
    sync(&account).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped(&format!("example-rate-limited-{}", std::process::id()))?;
    let worker = Worker::builder(store.clone())
        .poll_interval(Duration::from_millis(50), Duration::from_millis(200))
        .build()?
        .spawn();
    let client = Client::new(store)?;
    let run = client
        .start::<sync_account>("account-7".into())
        .idempotency_key("account-7")
        .idempotency_scope(IdempotencyScope::WhileActive)
        .await?;
    let again = client
        .start::<sync_account>("account-7".into())
        .idempotency_key("account-7")
        .idempotency_scope(IdempotencyScope::WhileActive)
        .await?;
    assert_eq!(again.id(), run.id(), "a live run holds its key");
    println!("result: {}", run.result().await?);
    for step in run.steps().await? {
        let error = step.error.unwrap_or_default();
        println!(
            "  {:<5} {:<9} attempt {} {} {}",
            step.step_name,
            step.status,
            step.config["attempt"],
            error["kind"],
            error["retryAfterMs"]
        );
    }
    assert_eq!(run.run().await?.attempts, 1);

    let next = client
        .start::<sync_account>("account-7".into())
        .idempotency_key("account-7")
        .idempotency_scope(IdempotencyScope::WhileActive)
        .await?;
    assert_ne!(
        next.id(),
        run.id(),
        "the key is free once the run has finished"
    );
    println!("next run: {}", next.result().await?);
    worker.shutdown().await;
    Ok(())
}
