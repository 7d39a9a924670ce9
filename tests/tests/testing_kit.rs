//! The testing kit (`tasks::testing`): a virtual clock skips durable sleeps, event-wait
//! timeouts, retry backoffs, delayed starts and schedules in well under a second of real
//! time, and nothing becomes due before its virtual instant. The last test is the guide's
//! "Testing your workflows" example, verbatim.

use std::time::{Duration, Instant};
use tasks::store::RunStore;

use serde_json::Value;
use tasks::prelude::*;
use tasks::testing::{TestEnv, TestEnvError};
use tasks::{CatchUp, ListRuns, NewSchedule};

const HOUR: Duration = Duration::from_secs(3600);
/// How long a test gives the worker to act on a wake-up (real time; generous).
const PROMPT: Duration = Duration::from_secs(5);

/// Sleeps for an hour, durably.
#[workflow(name = "kit-hour-sleep")]
async fn hour_sleep(ctx: WorkflowContext) -> Result<String, WorkflowError> {
    ctx.sleep("an-hour", HOUR).await?;
    Ok("rested".to_owned())
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Approval {
    by: String,
}

impl tasks::Event for Approval {
    const TOPIC: &'static str = "kit-approval";
}

/// Waits half an hour for an approval.
#[workflow(name = "kit-approval", events(Approval))]
async fn approval(ctx: WorkflowContext) -> Result<Option<String>, WorkflowError> {
    let outcome = ctx
        .wait_for_event_timeout::<Approval>(Duration::from_secs(30 * 60))
        .await?;
    Ok(outcome.received().map(|approval| approval.by))
}

/// Reads the recorded clock before and after an hour-long sleep, and makes an id.
#[workflow(name = "kit-recorded-clock")]
async fn recorded_clock(ctx: WorkflowContext) -> Result<(String, String, String), WorkflowError> {
    let before = ctx.now().await?;
    ctx.sleep("an-hour", HOUR).await?;
    let after = ctx.now().await?;
    let id = ctx.uuid().await?;
    Ok((before.to_rfc3339(), after.to_rfc3339(), id.to_string()))
}

/// Started by a schedule.
#[workflow(name = "kit-scheduled")]
async fn scheduled(_ctx: WorkflowContext) -> Result<u32, WorkflowError> {
    Ok(7)
}

/// Fails its first attempt; the workflow's retry policy waits an hour before the second.
#[workflow(
    name = "kit-retry-later",
    retry(max_attempts = 2, initial_interval = "1h")
)]
async fn retry_later(ctx: WorkflowContext) -> Result<u32, WorkflowError> {
    let attempt = ctx.attempt();
    if attempt == 1 {
        return Err(WorkflowError::msg("not yet"));
    }
    Ok(attempt)
}

/// The runs of `kit-scheduled` in `env`.
async fn scheduled_runs(env: &TestEnv) -> Vec<tasks::WorkflowRun> {
    env.store()
        .list_runs(ListRuns {
            workflow_name: Some("kit-scheduled".into()),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
}

/// Runs whatever the worker must do, then checks that the run is still in `status`.
async fn still(
    env: &TestEnv,
    run: &tasks::RunHandle<impl serde::de::DeserializeOwned>,
    status: RunStatus,
) {
    env.settle(PROMPT).await.unwrap();
    assert_eq!(run.status().await.unwrap(), status);
}

#[tokio::test]
async fn an_hour_long_sleep_ends_after_an_advance_in_well_under_a_second() {
    let env = TestEnv::start().await.unwrap();
    let run = hour_sleep::start(env.client(), ()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], PROMPT)
        .await
        .unwrap();
    // Nothing fires before the advance, nor before the full hour.
    tokio::time::sleep(Duration::from_millis(300)).await;
    still(&env, &run, RunStatus::Sleeping).await;
    env.advance(HOUR - Duration::from_secs(60)).await.unwrap();
    still(&env, &run, RunStatus::Sleeping).await;

    let advanced = Instant::now();
    env.advance(Duration::from_secs(60)).await.unwrap();
    assert_eq!(run.result_within(PROMPT).await.unwrap(), "rested");
    let took = advanced.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?} of real time");
    let finished = run.run().await.unwrap();
    assert_eq!(finished.attempts, 1, "waking continues the attempt");
    // The instants written are virtual: the run finished an hour after it started.
    let slept = finished.finished_at.unwrap() - finished.created_at;
    assert!(slept >= chrono::TimeDelta::hours(1), "{slept}");
    assert!(
        slept < chrono::TimeDelta::hours(1) + chrono::TimeDelta::minutes(1),
        "{slept}"
    );
    env.shutdown().await;
}

#[tokio::test]
async fn the_recorded_clock_follows_the_virtual_clock() {
    let env = TestEnv::start().await.unwrap();
    env.advance(Duration::from_secs(24 * 3600)).await.unwrap();
    let started = env.now();
    let run = recorded_clock::start(env.client(), ()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], PROMPT)
        .await
        .unwrap();
    env.advance(HOUR).await.unwrap();
    let (before, after, id) = run.result_within(PROMPT).await.unwrap();
    let parse = |text: &str| {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&chrono::Utc)
    };
    let (before, after) = (parse(&before), parse(&after));
    // A day ahead of the system clock, as the virtual clock is, to within real seconds.
    let real_seconds = chrono::TimeDelta::seconds(10);
    assert!(
        before >= started && before < started + real_seconds,
        "{before} {started}"
    );
    assert!(
        after - before >= chrono::TimeDelta::hours(1),
        "{before} {after}"
    );
    assert!(after - before < chrono::TimeDelta::hours(1) + real_seconds);
    // The id's time part is the virtual clock's too.
    let id: tasks::uuid::Uuid = id.parse().unwrap();
    let (seconds, _) = id.get_timestamp().unwrap().to_unix();
    let after_seconds = u64::try_from(after.timestamp()).unwrap();
    assert!(
        seconds.abs_diff(after_seconds) <= 1,
        "{seconds} {after_seconds}"
    );
    env.shutdown().await;
}

#[tokio::test]
async fn an_event_wait_times_out_after_an_advance() {
    let env = TestEnv::start().await.unwrap();
    let run = approval::start(env.client(), ()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], PROMPT)
        .await
        .unwrap();
    env.advance(Duration::from_secs(29 * 60)).await.unwrap();
    still(&env, &run, RunStatus::Sleeping).await;
    env.advance(Duration::from_secs(2 * 60)).await.unwrap();
    assert_eq!(run.result_within(PROMPT).await.unwrap(), None);

    // Within the timeout, the event is delivered.
    let run = approval::start(env.client(), ()).await.unwrap();
    run.wait_for_status(&[RunStatus::Sleeping], PROMPT)
        .await
        .unwrap();
    env.advance(Duration::from_secs(20 * 60)).await.unwrap();
    let ada = Approval { by: "ada".into() };
    env.client().send_event(run.id(), &ada).await.unwrap();
    assert_eq!(
        run.result_within(PROMPT).await.unwrap(),
        Some("ada".to_owned())
    );
    env.shutdown().await;
}

#[tokio::test]
async fn a_schedule_fires_after_an_advance_and_not_before() {
    use chrono::Timelike;

    let env = TestEnv::start().await.unwrap();
    // Daily at the top of the hour that begins between one and two hours from now.
    let hour = (env.now() + chrono::TimeDelta::hours(2)).hour();
    let schedule = env
        .client()
        .create_schedule(NewSchedule {
            name: "kit-daily".into(),
            workflow_name: "kit-scheduled".into(),
            version: None,
            cron: format!("0 0 {hour} * * *"),
            timezone: "UTC".into(),
            input: Value::Null,
            catch_up: CatchUp::Latest,
        })
        .await
        .unwrap();
    let slot = schedule.next_slot.unwrap();
    assert!(slot > env.now() + chrono::TimeDelta::minutes(59), "{slot}");

    // Several scheduler ticks (every 20 ms in a test environment) pass: nothing fires.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(scheduled_runs(&env).await.is_empty());
    env.advance(Duration::from_secs(50 * 60)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        scheduled_runs(&env).await.is_empty(),
        "fired before its slot"
    );

    env.advance(2 * HOUR).await.unwrap();
    let fired = tokio::time::timeout(PROMPT, async {
        loop {
            let runs = scheduled_runs(&env).await;
            if !runs.is_empty() {
                return runs;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the schedule fired after the advance");
    assert_eq!(fired.len(), 1);
    let run = env.client().handle::<u32>(fired[0].id);
    assert_eq!(run.result_within(PROMPT).await.unwrap(), 7);
    let schedule = env
        .client()
        .get_schedule("kit-daily")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        schedule.next_slot,
        Some(slot + chrono::TimeDelta::days(1)),
        "the next slot is a day later"
    );
    env.shutdown().await;
}

#[tokio::test]
async fn a_retry_backoff_and_a_delayed_start_follow_the_clock() {
    let env = TestEnv::start().await.unwrap();
    let retried = retry_later::start(env.client(), ()).await.unwrap();
    let delayed = env
        .client()
        .start::<hour_sleep>(())
        .delay(2 * HOUR)
        .await
        .unwrap();
    retried
        .wait_for_run(PROMPT, |run| {
            run.status == RunStatus::Pending && run.attempts == 1
        })
        .await
        .unwrap();
    still(&env, &retried, RunStatus::Pending).await;
    still(&env, &delayed, RunStatus::Pending).await;

    env.advance(HOUR).await.unwrap();
    assert_eq!(retried.result_within(PROMPT).await.unwrap(), 2);
    still(&env, &delayed, RunStatus::Pending).await;
    env.advance(HOUR).await.unwrap();
    delayed
        .wait_for_status(&[RunStatus::Sleeping], PROMPT)
        .await
        .unwrap();
    env.advance(HOUR).await.unwrap();
    assert_eq!(delayed.result_within(PROMPT).await.unwrap(), "rested");
    env.shutdown().await;
}

#[tokio::test]
async fn the_virtual_clock_only_moves_forward_and_within_limits() {
    let env = TestEnv::start().await.unwrap();
    let before = env.now();
    env.clock().advance(HOUR).unwrap();
    assert!(env.now() - before >= chrono::TimeDelta::hours(1));
    assert_eq!(env.clock().offset(), HOUR);
    assert!(matches!(
        env.advance(tasks::limits::MAX_DURATION).await,
        Err(TestEnvError::Clock(tasks::ClockError::OutOfRange { .. }))
    ));
    assert_eq!(
        env.clock().offset(),
        HOUR,
        "a refused advance changes nothing"
    );
    env.shutdown().await;
}

// ---- The guide's example (`tasks::guide::testing`), verbatim below this line (its `use`
// lines are at the top of this file) ----

/// Sends a reminder when a trial ends, fourteen days after sign-up.
#[workflow(name = "trial")]
async fn trial(ctx: WorkflowContext, email: String) -> Result<String, WorkflowError> {
    ctx.sleep("trial-period", Duration::from_secs(14 * 24 * 3600))
        .await?;
    Ok(format!("reminder sent to {email}"))
}

#[tokio::test]
async fn the_trial_reminder_goes_out_after_fourteen_days() -> Result<(), Box<dyn std::error::Error>>
{
    let env = tasks::testing::TestEnv::start().await?;
    let run = trial::start(env.client(), "ada@example.com".to_owned()).await?;
    run.wait_for_status(&[RunStatus::Sleeping], Duration::from_secs(5))
        .await?;

    // Thirteen days later, still waiting.
    env.advance(Duration::from_secs(13 * 24 * 3600)).await?;
    env.settle(Duration::from_secs(5)).await?;
    assert_eq!(run.status().await?, RunStatus::Sleeping);

    // One more day, and the reminder goes out, at once.
    env.advance(Duration::from_secs(24 * 3600)).await?;
    let sent = run.result_within(Duration::from_secs(5)).await?;
    assert_eq!(sent, "reminder sent to ada@example.com");
    env.shutdown().await;
    Ok(())
}
