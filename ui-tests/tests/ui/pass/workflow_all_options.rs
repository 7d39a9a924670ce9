//! A workflow with every option, a zero-input workflow, and what they register.

use std::time::Duration;

use tasks::__private::{ScheduleRegistration, Workflow, WorkflowRegistration, inventory};
use tasks::{WorkflowContext, WorkflowError, step, workflow};

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub id: u64,
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    pub total: u64,
}

#[step]
async fn total(order: &Order) -> Result<u64, WorkflowError> {
    Ok(order.id * 100)
}

/// Charges an order.
///
///   Indented second paragraph.
#[workflow(
    name = "checkout",
    version = "2",
    queue = "payments/eu",
    retry(
        max_attempts = 5,
        initial_interval = "1s",
        backoff = 2,
        max_interval = "5m"
    ),
    concurrency(key = |order: &Order| order.id % 10, limit = 3)
)]
pub async fn checkout_v2(_ctx: WorkflowContext, order: Order) -> Result<Receipt, WorkflowError> {
    let total = total(&order).await?;
    Ok(Receipt { total })
}

/// Runs every night; it needs no input.
#[workflow(
    retry(max_attempts = 1),
    schedule = "0 30 2 * * *",
    timezone = "Europe/Paris",
    catch_up = "all(3)"
)]
async fn nightly(ctx: WorkflowContext) -> std::result::Result<(), WorkflowError> {
    ctx.sleep("pause", Duration::from_secs(1)).await?;
    Ok(())
}

fn main() {
    let definition = <checkout_v2 as Workflow>::definition();
    assert_eq!(definition.name, "checkout");
    assert_eq!(definition.version, Some("2"));
    assert_eq!(definition.queue, Some("payments/eu"));
    assert_eq!(
        definition.description,
        Some("Charges an order.\n\n  Indented second paragraph.")
    );
    let retry = definition.retry_policy.expect("retry was given");
    assert_eq!(retry.max_attempts, 5);
    assert_eq!(retry.initial_interval, Duration::from_secs(1));
    assert_eq!(retry.backoff_coefficient, 2.0);
    assert_eq!(retry.max_interval, Duration::from_secs(300));
    assert_eq!(definition.location.file, file!());
    assert_eq!(definition.location.module_path, module_path!());
    let concurrency = definition.concurrency.expect("concurrency was given");
    assert_eq!(concurrency.limit, 3);
    assert_eq!(
        (concurrency.key)(&tasks::__private::serde_json::json!({ "id": 17 })),
        Ok("7".to_owned())
    );
    let schema = (definition.input_schema)();
    assert_eq!(schema["title"], "Order");
    assert_eq!((definition.output_schema)()["title"], "Receipt");

    let nightly = <nightly as Workflow>::definition();
    assert_eq!(nightly.name, "nightly");
    assert_eq!(nightly.version, None);
    assert_eq!(nightly.queue, None);
    assert_eq!(
        nightly.description,
        Some("Runs every night; it needs no input.")
    );
    let retry = nightly.retry_policy.expect("retry was given");
    assert_eq!(retry.max_attempts, 1);
    assert_eq!(
        retry.max_interval,
        tasks::RetryPolicy::DEFAULT_RUN.max_interval
    );
    let _: <nightly as Workflow>::Input = ();

    let registered: Vec<String> = inventory::iter::<WorkflowRegistration>
        .into_iter()
        .map(|registration| registration.0.display_name())
        .collect();
    assert_eq!(registered.len(), 2, "{registered:?}");
    assert!(registered.contains(&"checkout@2".to_owned()));
    assert!(registered.contains(&"nightly".to_owned()));

    let schedules: Vec<_> = inventory::iter::<ScheduleRegistration>
        .into_iter()
        .map(|registration| registration.0)
        .collect();
    assert_eq!(schedules.len(), 1);
    let schedule = schedules[0];
    assert_eq!(schedule.workflow, "nightly");
    assert_eq!(schedule.version, None);
    assert_eq!(schedule.cron, "0 30 2 * * *");
    assert_eq!(schedule.timezone, "Europe/Paris");
    assert_eq!(schedule.catch_up, tasks::CatchUp::All { max: 3 });
    assert_eq!(
        (schedule.input)(),
        tasks::__private::serde_json::Value::Null
    );
}
