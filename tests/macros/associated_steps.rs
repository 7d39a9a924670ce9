//! Steps as associated functions and `&self` methods of a service type, `Self` included, and
//! workflows whose context is spelled through a renamed import or a type alias.

use tasks::WorkflowContext as Ctx;
use tasks::{WorkflowError, step, workflow};

type Context = tasks::WorkflowContext;

#[derive(Clone)]
struct Billing {
    surcharge: u64,
}

impl Billing {
    const FEE: u64 = 30;

    /// An associated function whose body names `Self`.
    #[step]
    async fn fee_for(amount: u64) -> Result<u64, WorkflowError> {
        Ok(amount + Self::FEE)
    }

    /// A method: each attempt gets the same `&self`.
    #[step(retry(max_attempts = 3, initial_interval = "1ms"))]
    async fn charge(
        &self,
        amount: u64,
        attempts: &std::sync::atomic::AtomicU32,
    ) -> Result<u64, WorkflowError> {
        if attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(WorkflowError::msg("card network busy"));
        }
        Ok(Self::fee_for(amount).await? + self.surcharge)
    }
}

static ATTEMPTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[workflow]
async fn renamed_import(_ctx: Ctx, amount: u64) -> Result<u64, WorkflowError> {
    Billing { surcharge: 2 }.charge(amount, &ATTEMPTS).await
}

#[workflow]
async fn type_alias(_ctx: Context) -> Result<u64, WorkflowError> {
    Billing::fee_for(0).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Outside a run, a step is a plain call.
    assert_eq!(Billing::fee_for(10).await.unwrap(), 40);

    let store = tasks::sqlite::SqliteStore::connect("sqlite::memory:")
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let worker = tasks::Worker::builder(store.clone())
        .build()
        .unwrap()
        .spawn();
    let client = tasks::Client::new(store).unwrap();
    let run = renamed_import::start(&client, 100).await.unwrap();
    assert_eq!(run.result().await.unwrap(), 132);
    // The first attempt failed and the step's own policy retried it.
    assert_eq!(ATTEMPTS.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(
        type_alias::start(&client, ())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        30
    );
    worker.shutdown().await;
}
