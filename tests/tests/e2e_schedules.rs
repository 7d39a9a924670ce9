//! End to end: schedules fired by real workers. Three worker processes on one Postgres
//! database, and on one SQLite file, fire an every-second schedule: no slot twice, none lost
//! in the window, checked from the store. Against each store: the catch-up policies after downtime
//! (simulated with a first slot years in the past), a declared schedule put by the worker,
//! pause, resume and delete through the client, and the client's typed refusals.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Backend, client, worker};
use tasks::store::Store;
use tasks::store::schedule::{Cadence, CatchUp, NewSchedule, ScheduleError, scheduled_at};
use tasks::{
    ClientError, ListRuns, RunStatus, StoreError, WorkflowContext, WorkflowError, WorkflowRun,
    workflow,
};

/// Returns the slot it was started for, as the run sees it.
#[workflow(name = "e2e-scheduled")]
async fn scheduled(ctx: WorkflowContext) -> Result<Option<String>, WorkflowError> {
    Ok(ctx.scheduled_at().map(text))
}

/// An instant as the runs of these tests return it.
fn text(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Declared: every worker of this test binary puts this schedule in its namespace.
#[workflow(
    name = "e2e-declared",
    schedule = "* * * * * *",
    timezone = "Europe/Paris",
    catch_up = "skip"
)]
async fn declared(ctx: WorkflowContext) -> Result<Option<String>, WorkflowError> {
    Ok(ctx.scheduled_at().map(text))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
struct Report {
    pages: u32,
}

/// Takes a typed input, whose schema a schedule's input must pass.
#[workflow(name = "e2e-typed")]
async fn typed(_ctx: WorkflowContext, input: Report) -> Result<u32, WorkflowError> {
    Ok(input.pages)
}

fn schedule(name: &str, workflow: &str, cron: &str, catch_up: CatchUp) -> NewSchedule {
    NewSchedule {
        name: name.to_owned(),
        workflow_name: workflow.to_owned(),
        version: None,
        cron: cron.to_owned(),
        timezone: "UTC".to_owned(),
        input: Value::Null,
        catch_up,
    }
}

/// Every run of `workflow` in the store's namespace.
async fn runs_of(store: &dyn Store, workflow: &str) -> Vec<WorkflowRun> {
    store
        .list_runs(ListRuns {
            workflow_name: Some(workflow.to_owned()),
            limit: Some(1000),
            ..ListRuns::default()
        })
        .await
        .unwrap()
        .data
}

/// The runs a schedule named `name` started (its name is in their context).
fn of_schedule<'a>(runs: &'a [WorkflowRun], name: &str) -> Vec<&'a WorkflowRun> {
    runs.iter()
        .filter(|run| {
            run.context.as_ref().and_then(|c| c.get("schedule")) == Some(&Value::from(name))
        })
        .collect()
}

/// After downtime (the first slot three years back, on a yearly cron), each catch-up policy
/// starts runs for the slots it says, and every schedule moves past the store's clock.
async fn catch_up_after_downtime_follows_the_policy(backend: Backend) {
    let store = backend.store().await;
    let now = Utc::now();
    let new_year = |year: i32| Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let long_ago = new_year(now.year() - 2);
    let policies = [
        ("skip", CatchUp::Skip, vec![]),
        ("latest", CatchUp::Latest, vec![new_year(now.year())]),
        (
            "all-2",
            CatchUp::All { max: 2 },
            vec![new_year(now.year() - 1), new_year(now.year())],
        ),
        (
            "all-10",
            CatchUp::All { max: 10 },
            vec![long_ago, new_year(now.year() - 1), new_year(now.year())],
        ),
    ];
    for (name, catch_up, _) in &policies {
        let params = schedule(name, "e2e-scheduled", "0 0 0 1 1 *", *catch_up);
        store
            .schedules()
            .unwrap()
            .create_schedule(params, &|_| Some(long_ago))
            .await
            .unwrap();
    }
    let running = worker(&store).build().unwrap().spawn();
    for (name, _, _) in &policies {
        eventually!(Duration::from_secs(20), {
            let schedule = store
                .schedules()
                .unwrap()
                .get_schedule(name)
                .await
                .unwrap()
                .unwrap();
            (schedule.next_slot == Some(new_year(now.year() + 1))).then_some(())
        });
    }
    let expected_runs: usize = policies.iter().map(|(_, _, slots)| slots.len()).sum();
    let runs = eventually!(Duration::from_secs(20), {
        let runs = runs_of(&*store, "e2e-scheduled").await;
        (runs.len() == expected_runs && runs.iter().all(|r| r.status == RunStatus::Completed))
            .then_some(runs)
    });
    running.shutdown().await;
    for (name, _, slots) in &policies {
        let mut fired: Vec<DateTime<Utc>> = of_schedule(&runs, name)
            .iter()
            .map(|run| {
                let slot = scheduled_at(run.context.as_ref()).expect("a slot in the context");
                assert_eq!(run.output, Some(json!(text(slot))), "the run sees its slot");
                slot
            })
            .collect();
        fired.sort();
        assert_eq!(&fired, slots, "catch-up {name}");
    }
}

/// A declared schedule is put by the worker (named after its workflow) and fires; through
/// the client it pauses (no more runs), resumes (the slots missed meanwhile are skipped, as
/// its policy says) and is deleted (its runs are kept).
async fn declared_schedule_pauses_resumes_and_deletes(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let running = worker(&store).build().unwrap().spawn();
    let put = eventually!(Duration::from_secs(20), {
        store
            .schedules()
            .unwrap()
            .get_schedule("e2e-declared")
            .await
            .unwrap()
    });
    assert_eq!(put.cron, "* * * * * *");
    assert_eq!(put.timezone, "Europe/Paris");
    assert_eq!(put.catch_up, CatchUp::Skip);
    assert_eq!(put.input, Value::Null);
    eventually!(Duration::from_secs(20), {
        (runs_of(&*store, "e2e-declared").await.len() >= 2).then_some(())
    });

    let paused = client.pause_schedule("e2e-declared").await.unwrap();
    assert!(paused.paused);
    let paused_at = Utc::now();
    let before = runs_of(&*store, "e2e-declared").await.len();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after_pause = runs_of(&*store, "e2e-declared").await;
    assert_eq!(after_pause.len(), before, "a paused schedule fires nothing");
    assert!(
        after_pause
            .iter()
            .all(|run| scheduled_at(run.context.as_ref()).unwrap() <= paused_at),
        "no slot after the pause fired"
    );

    let resumed_at = Utc::now();
    client.resume_schedule("e2e-declared").await.unwrap();
    let resumed = eventually!(Duration::from_secs(20), {
        let runs = runs_of(&*store, "e2e-declared").await;
        (runs.len() > before).then_some(runs)
    });
    let slots: Vec<DateTime<Utc>> = resumed
        .iter()
        .map(|run| scheduled_at(run.context.as_ref()).unwrap())
        .filter(|slot| *slot > paused_at)
        .collect();
    assert!(
        slots
            .iter()
            .all(|slot| *slot >= resumed_at - chrono::TimeDelta::seconds(1)),
        "the slots missed while paused were skipped: {slots:?} (resumed at {resumed_at})"
    );

    client.delete_schedule("e2e-declared").await.unwrap();
    running.shutdown().await;
    assert_eq!(client.get_schedule("e2e-declared").await.unwrap(), None);
    assert!(runs_of(&*store, "e2e-declared").await.len() > before);
    assert!(matches!(
        client.delete_schedule("e2e-declared").await,
        Err(StoreError::ScheduleNotFound { .. })
    ));
}

/// The client refuses a bad cron expression or timezone, an unknown workflow, an input the
/// workflow's schema refuses and a taken name, with typed errors, storing nothing.
async fn client_refuses_bad_schedules(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let bad_cron = schedule("s", "e2e-scheduled", "0 */5 * * *  * *", CatchUp::Latest);
    assert!(matches!(
        client.create_schedule(bad_cron).await,
        Err(ClientError::InvalidSchedule(
            ScheduleError::InvalidCron { .. }
        ))
    ));
    let mut bad_zone = schedule("s", "e2e-scheduled", "0 */5 * * * *", CatchUp::Latest);
    bad_zone.timezone = "Europe/Atlantis".into();
    assert!(matches!(
        client.create_schedule(bad_zone).await,
        Err(ClientError::InvalidSchedule(
            ScheduleError::InvalidTimezone { .. }
        ))
    ));
    let unknown = schedule("s", "no-such-workflow", "0 */5 * * * *", CatchUp::Latest);
    assert!(matches!(
        client.create_schedule(unknown).await,
        Err(ClientError::UnknownWorkflow { .. })
    ));
    let mut bad_input = schedule("s", "e2e-typed", "0 */5 * * * *", CatchUp::Latest);
    bad_input.input = json!({ "pages": "many" });
    assert!(matches!(
        client.create_schedule(bad_input.clone()).await,
        Err(ClientError::InvalidInput(_))
    ));
    assert!(client.list_schedules().await.unwrap().is_empty());

    bad_input.input = json!({ "pages": 3 });
    let created = client.create_schedule(bad_input.clone()).await.unwrap();
    assert_eq!(created.input, json!({ "pages": 3 }));
    let next = created.next_slot.unwrap();
    assert!(next > Utc::now() - chrono::TimeDelta::seconds(5));
    assert!(next <= Utc::now() + chrono::TimeDelta::minutes(5));
    assert!(matches!(
        client.create_schedule(bad_input).await,
        Err(ClientError::Store(StoreError::ScheduleExists { .. }))
    ));
    assert!(matches!(
        client.pause_schedule("missing").await,
        Err(StoreError::ScheduleNotFound { .. })
    ));
}

every_store!(
    catch_up_after_downtime_follows_the_policy,
    declared_schedule_pauses_resumes_and_deletes,
    client_refuses_bad_schedules,
);

/// Kills a worker process when the test ends, whatever way it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three worker processes (`test_worker`) fire an every-second schedule on one Postgres
/// database for a few seconds: every slot of the window started exactly one run, and each
/// run saw its own slot. Checked from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_fire_each_slot_once_on_postgres() {
    three_worker_processes_fire_each_slot_once(Backend::Postgres).await;
}

/// The same on one SQLite file, shared by the three processes: what the SQLite store
/// promises to several processes on one machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_fire_each_slot_once_on_sqlite() {
    three_worker_processes_fire_each_slot_once(Backend::Sqlite).await;
}

async fn three_worker_processes_fire_each_slot_once(backend: Backend) {
    let store = backend.store().await;
    let namespace = store.namespace().to_owned();
    let cadence = Cadence::parse("* * * * * *", "UTC").unwrap();
    // All slots, up to a bound: a tick delayed by a loaded machine loses none.
    let every_second = schedule(
        "tick",
        "test-tick",
        "* * * * * *",
        CatchUp::All { max: 100 },
    );
    let created = store
        .schedules()
        .unwrap()
        .create_schedule(every_second, &|now| cadence.next_after(now))
        .await
        .unwrap();
    let first = created.next_slot.unwrap();
    let workers: Vec<KillOnDrop> = (0..3)
        .map(|_| {
            let child = Command::new(env!("CARGO_BIN_EXE_test_worker"))
                .args([&store.url(), &namespace, "2000"])
                .stdout(Stdio::null())
                .spawn()
                .expect("start the test worker process");
            KillOnDrop(child)
        })
        .collect();
    // The window: until at least five slots fired.
    eventually!(Duration::from_secs(60), {
        (runs_of(&*store, "test-tick").await.len() >= 5).then_some(())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let paused = store
        .schedules()
        .unwrap()
        .pause_schedule("tick")
        .await
        .unwrap();
    let end = paused.next_slot.unwrap();
    let window: Vec<DateTime<Utc>> = std::iter::successors(Some(first), |slot| {
        cadence.next_after(*slot).filter(|next| *next < end)
    })
    .collect();
    assert!(window.len() >= 5, "window of {} slots", window.len());

    // From the store: the slots of the runs, each with how many runs it has, and how many
    // of those completed with their own slot as output.
    let rows: Vec<(String, i64, i64)> = eventually!(Duration::from_secs(60), {
        let mut slots: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for run in runs_of(&*store, "test-tick").await {
            let slot = run
                .context
                .as_ref()
                .and_then(|context| context.get("scheduledAt"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let saw_its_slot = run.status == RunStatus::Completed
                && run.output.as_ref().and_then(Value::as_str) == Some(slot.as_str());
            let counts = slots.entry(slot).or_default();
            counts.0 += 1;
            counts.1 += i64::from(saw_its_slot);
        }
        let rows: Vec<(String, i64, i64)> = slots
            .into_iter()
            .map(|(slot, (runs, completed))| (slot, runs, completed))
            .collect();
        rows.iter()
            .all(|(_, runs, completed)| runs == completed)
            .then_some(rows)
    });
    drop(workers);
    let fired: Vec<DateTime<Utc>> = rows
        .iter()
        .map(|(slot, runs, _)| {
            assert_eq!(*runs, 1, "slot {slot} started {runs} runs");
            DateTime::parse_from_rfc3339(slot)
                .unwrap()
                .with_timezone(&Utc)
        })
        .collect();
    assert_eq!(fired, window, "every slot of the window fired, once");
}
