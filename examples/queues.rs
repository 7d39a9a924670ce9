//! Named queues: a queue per kind of work, each with its own pool of workers and limits.
//!
//! ```sh
//! cargo run --example queues
//! ```
//!
//! Emails go to the `emails` queue (declared on the workflow), reports to `reports` (chosen
//! at the start). One worker serves only `emails` and declares its limit: at most two emails
//! sending at once, across every worker. The report queue is limited to three starts per
//! second, configured through the client. A second worker serves only `reports`. The
//! printout shows at most two emails at once, and the reports starting three by three, a
//! second apart. Account syncs go to `syncs`, keyed by customer
//! (`StartOptions::concurrency_key`, each run allowing 5 of its key at once); the queue caps
//! every key at one sync at once (`concurrency_per_key(1)`), so each customer's syncs run one
//! after the other while different customers' run side by side. All limits are enforced by
//! the claim, in the database, however many workers run.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tasks::{Client, QueueOptions, Worker, WorkflowContext, WorkflowError, step, workflow};

/// When the example started, for the printout.
static STARTED: Mutex<Option<Instant>> = Mutex::new(None);
/// How many emails are sending right now, in this process (for the printout).
static SENDING: Mutex<u32> = Mutex::new(0);

fn elapsed() -> Duration {
    STARTED
        .lock()
        .unwrap()
        .map_or(Duration::ZERO, |at| at.elapsed())
}

#[step]
async fn deliver(to: &str) -> Result<(), std::io::Error> {
    let sending = {
        let mut sending = SENDING.lock().unwrap();
        *sending += 1;
        *sending
    };
    println!("{:>6.2?}  email to {to} ({sending} sending)", elapsed());
    tokio::time::sleep(Duration::from_millis(300)).await;
    *SENDING.lock().unwrap() -= 1;
    Ok(())
}

/// Sends an email; every run goes to the `emails` queue unless its start names another.
#[workflow(name = "send-email", queue = "emails")]
async fn send_email(_ctx: WorkflowContext, to: String) -> Result<(), WorkflowError> {
    Ok(deliver(&to).await?)
}

#[step]
async fn render(number: u32) -> Result<String, std::io::Error> {
    println!("{:>6.2?}  report #{number} starts", elapsed());
    Ok(format!("report-{number}.pdf"))
}

/// Renders a report.
#[workflow(name = "render-report")]
async fn render_report(_ctx: WorkflowContext, number: u32) -> Result<String, WorkflowError> {
    Ok(render(number).await?)
}

#[step]
async fn sync(customer: &str, number: u32) -> Result<(), std::io::Error> {
    println!("{:>6.2?}  sync #{number} of {customer} starts", elapsed());
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("{:>6.2?}  sync #{number} of {customer} ends", elapsed());
    Ok(())
}

/// Syncs one customer's account.
#[workflow(name = "sync-account")]
async fn sync_account(_ctx: WorkflowContext, job: (String, u32)) -> Result<(), WorkflowError> {
    Ok(sync(&job.0, job.1).await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // DATABASE_URL picks the store: postgres://... or sqlite://...; unset, a SQLite file.
    let store = tasks::connect_from_env()
        .await?
        .contract()
        .scoped("example-queues")?;
    let client = Client::new(store.clone())?;
    // Every worker's claim reads this: three report starts per second.
    client
        .put_queue(QueueOptions::new("reports").rate_limit(3, Duration::from_secs(1)))
        .await?;
    // And this: one sync of each customer at once, whatever a start allows.
    client
        .put_queue(QueueOptions::new("syncs").concurrency_per_key(1))
        .await?;

    let mut emails = Vec::new();
    for name in ["ada", "grace", "edsger", "barbara", "donald", "frances"] {
        emails.push(
            client
                .start::<send_email>(format!("{name}@example.com"))
                .await?,
        );
    }
    let mut reports = Vec::new();
    for number in 1..=7 {
        reports.push(
            client
                .start::<render_report>(number)
                .queue("reports")
                .await?,
        );
    }

    let mut syncs = Vec::new();
    for number in 1..=3 {
        for customer in ["acme", "globex"] {
            syncs.push(
                client
                    .start::<sync_account>((customer.to_owned(), number))
                    .queue("syncs")
                    .concurrency_key(customer, 5)
                    .await?,
            );
        }
    }

    *STARTED.lock().unwrap() = Some(Instant::now());
    let workers = [
        // The email pool declares its queue's limit when it starts.
        Worker::builder(store.clone())
            .queues(["emails"])
            .queue(QueueOptions::new("emails").concurrency(2))
            .concurrency(8)
            .build()?
            .spawn(),
        Worker::builder(store.clone())
            .queues(["reports"])
            .concurrency(8)
            .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
            .build()?
            .spawn(),
        Worker::builder(store.clone())
            .queues(["syncs"])
            .concurrency(8)
            .poll_interval(Duration::from_millis(20), Duration::from_millis(200))
            .build()?
            .spawn(),
    ];
    for email in emails {
        email.result().await?;
    }
    for report in reports {
        report.result().await?;
    }
    for sync in syncs {
        sync.result().await?;
    }
    for worker in workers {
        worker.shutdown().await;
    }
    for queue in client.list_queues().await? {
        println!(
            "queue {}: concurrency {:?}, per key {:?}, rate {:?}",
            queue.name, queue.concurrency, queue.key_concurrency, queue.rate_limit
        );
    }
    Ok(())
}
