//! Schedules ([`ScheduleStore::create_schedule`] and the other schedule methods): named per
//! namespace, put without losing their slot, paused, resumed, deleted, and fired with a
//! compare-and-set on `next_slot` so that of two firers of one slot exactly one creates its
//! runs. The store computes no cron: the first slot comes from the caller's function of the
//! store's clock, which these cases choose freely.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use tasks_core::RunStore;
#[cfg(doc)]
use tasks_core::ScheduleStore;
use tasks_core::schedule::{CatchUp, FireSchedule, NewSchedule, slot_context, slot_key};
use tasks_core::{CreateRun, LimitError, ListRuns, RunStatus, Store, StoreError};

use super::Setup;
use super::support::*;

/// A schedule of a fresh workflow name, every policy default.
fn new_schedule(name: &str) -> NewSchedule {
    NewSchedule {
        name: name.to_owned(),
        workflow_name: unique_name(),
        version: None,
        cron: "0 * * * * *".into(),
        timezone: "UTC".into(),
        input: json!({ "report": "daily" }),
        catch_up: CatchUp::default(),
    }
}

/// First slot: an hour after the store's clock.
fn in_an_hour(now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(now + TimeDelta::hours(1))
}

/// First slot: a minute before the store's clock (a schedule that is due at once).
fn a_minute_ago(now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(micros(now - TimeDelta::minutes(1)))
}

/// The runs of the fire of `slot`, as a scheduler would pass them.
fn fire(name: &str, workflow: &str, slot: DateTime<Utc>, next: DateTime<Utc>) -> FireSchedule {
    FireSchedule {
        name: name.to_owned(),
        slot,
        next_slot: Some(next),
        runs: vec![CreateRun {
            input: Some(json!({ "report": "daily" })),
            context: Some(slot_context(name, slot)),
            idempotency_key: Some(slot_key(name, slot)),
            ..CreateRun::new(workflow)
        }],
    }
}

/// A created schedule reads back as it was given, not paused, with its first slot from the
/// store's clock; a second create of the name is refused and changes nothing.
pub async fn create_get_and_list_schedules(setup: impl Setup) {
    let store = setup.store().await;
    let created = store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("b-nightly"), &in_an_hour)
        .await
        .unwrap();
    assert_eq!(created.name, "b-nightly");
    assert_eq!(created.namespace, store.namespace());
    assert_eq!(created.input, json!({ "report": "daily" }));
    assert_eq!(created.catch_up, CatchUp::Latest);
    assert!(!created.paused);
    let first = created.next_slot.expect("a first slot");
    assert_near_now(Some(first - TimeDelta::hours(1)), "next_slot - 1 h");
    assert_near_now(Some(created.created_at), "created_at");

    assert_eq!(
        store
            .schedules()
            .unwrap()
            .get_schedule("b-nightly")
            .await
            .unwrap(),
        Some(created.clone())
    );
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .get_schedule("missing")
            .await
            .unwrap(),
        None
    );

    let mut other = new_schedule("a-hourly");
    other.catch_up = CatchUp::All { max: 5 };
    other.version = Some("v2".into());
    store
        .schedules()
        .unwrap()
        .create_schedule(other, &in_an_hour)
        .await
        .unwrap();
    let listed = store.schedules().unwrap().list_schedules().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a-hourly", "b-nightly"], "listed by name");
    assert_eq!(listed[0].catch_up, CatchUp::All { max: 5 });
    assert_eq!(listed[0].version.as_deref(), Some("v2"));

    let mut again = new_schedule("b-nightly");
    again.cron = "0 0 * * * *".into();
    assert_err!(
        store.schedules().unwrap().create_schedule(again, &a_minute_ago).await,
        StoreError::ScheduleExists { name } if name == "b-nightly"
    );
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .get_schedule("b-nightly")
            .await
            .unwrap(),
        Some(created)
    );
}

/// A put of an unchanged cron expression and timezone keeps the slot (and the pause); a
/// changed one takes the new first slot.
pub async fn put_keeps_the_slot_of_an_unchanged_schedule(setup: impl Setup) {
    let store = setup.store().await;
    let first = store
        .schedules()
        .unwrap()
        .put_schedule(new_schedule("sync"), &in_an_hour)
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .pause_schedule("sync")
        .await
        .unwrap();

    let mut changed_input = new_schedule("sync");
    changed_input.workflow_name = first.workflow_name.clone();
    changed_input.input = json!({ "report": "weekly" });
    changed_input.catch_up = CatchUp::Skip;
    let kept = store
        .schedules()
        .unwrap()
        .put_schedule(changed_input.clone(), &a_minute_ago)
        .await
        .unwrap();
    assert_eq!(kept.next_slot, first.next_slot, "same cron: the slot stays");
    assert_eq!(kept.input, json!({ "report": "weekly" }));
    assert_eq!(kept.catch_up, CatchUp::Skip);
    assert!(kept.paused, "a put keeps the pause");

    let mut changed_cron = changed_input.clone();
    changed_cron.cron = "0 0 * * * *".into();
    let moved = store
        .schedules()
        .unwrap()
        .put_schedule(changed_cron.clone(), &a_minute_ago)
        .await
        .unwrap();
    assert_ne!(moved.next_slot, first.next_slot);
    assert!(moved.next_slot.unwrap() < Utc::now());

    let mut changed_zone = changed_cron;
    changed_zone.timezone = "Europe/Paris".into();
    let rezoned = store
        .schedules()
        .unwrap()
        .put_schedule(changed_zone, &in_an_hour)
        .await
        .unwrap();
    assert!(rezoned.next_slot.unwrap() > Utc::now());
    assert_eq!(rezoned.timezone, "Europe/Paris");
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .list_schedules()
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Pause and resume are idempotent; pause, resume and delete of an unknown name are not
/// found; a deleted schedule is gone.
pub async fn pause_resume_and_delete(setup: impl Setup) {
    let store = setup.store().await;
    let created = store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("s"), &in_an_hour)
        .await
        .unwrap();
    let paused = store
        .schedules()
        .unwrap()
        .pause_schedule("s")
        .await
        .unwrap();
    assert!(paused.paused);
    assert_eq!(paused.next_slot, created.next_slot);
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .pause_schedule("s")
            .await
            .unwrap(),
        paused,
        "a repeat"
    );
    let resumed = store
        .schedules()
        .unwrap()
        .resume_schedule("s")
        .await
        .unwrap();
    assert!(!resumed.paused);
    assert_eq!(
        resumed.next_slot, created.next_slot,
        "resume keeps the slot"
    );
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .resume_schedule("s")
            .await
            .unwrap(),
        resumed
    );

    store
        .schedules()
        .unwrap()
        .delete_schedule("s")
        .await
        .unwrap();
    assert_eq!(
        store.schedules().unwrap().get_schedule("s").await.unwrap(),
        None
    );
    for result in [
        store
            .schedules()
            .unwrap()
            .pause_schedule("s")
            .await
            .map(|_| ()),
        store
            .schedules()
            .unwrap()
            .resume_schedule("s")
            .await
            .map(|_| ()),
        store.schedules().unwrap().delete_schedule("s").await,
    ] {
        assert_err!(result, StoreError::ScheduleNotFound { name } if name == "s");
    }
}

/// Due schedules are those not paused whose slot is at or before the store's clock,
/// earliest first, with that clock.
pub async fn due_schedules_are_the_unpaused_past_slots(setup: impl Setup) {
    let store = setup.store().await;
    let earlier = |now: DateTime<Utc>| Some(micros(now - TimeDelta::minutes(5)));
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("later"), &a_minute_ago)
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("earlier"), &earlier)
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("future"), &in_an_hour)
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("paused"), &a_minute_ago)
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .pause_schedule("paused")
        .await
        .unwrap();
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("exhausted"), &|_| None)
        .await
        .unwrap();

    let due = store.schedules().unwrap().due_schedules(10).await.unwrap();
    assert_near_now(Some(due.now), "the store's clock");
    let names: Vec<&str> = due.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["earlier", "later"]);
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .due_schedules(1)
            .await
            .unwrap()
            .schedules
            .len(),
        1
    );
}

/// A fire moves the slot and creates the runs, with the slot in their context; a second
/// fire of the same slot misses and writes nothing, and so does a fire of a paused
/// schedule.
pub async fn fire_moves_the_slot_and_creates_the_runs(setup: impl Setup) {
    let store = setup.store().await;
    let schedule = store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("s"), &a_minute_ago)
        .await
        .unwrap();
    let slot = schedule.next_slot.unwrap();
    let next = slot + TimeDelta::minutes(2);
    let runs = store
        .schedules()
        .unwrap()
        .fire_schedule(fire("s", &schedule.workflow_name, slot, next))
        .await
        .unwrap()
        .expect("the compare-and-set applies");
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.status, RunStatus::Pending);
    assert_eq!(run.workflow_name, schedule.workflow_name);
    assert_eq!(run.input, Some(json!({ "report": "daily" })));
    assert_eq!(
        tasks_core::schedule::scheduled_at(run.context.as_ref()),
        Some(slot)
    );
    assert_eq!(run.idempotency_key.as_deref(), Some(&*slot_key("s", slot)));
    let moved = store
        .schedules()
        .unwrap()
        .get_schedule("s")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.next_slot, Some(next));

    assert_eq!(
        store
            .schedules()
            .unwrap()
            .fire_schedule(fire("s", &schedule.workflow_name, slot, next))
            .await
            .unwrap(),
        None,
        "the slot moved on"
    );
    store
        .schedules()
        .unwrap()
        .pause_schedule("s")
        .await
        .unwrap();
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .fire_schedule(fire("s", &schedule.workflow_name, next, next))
            .await
            .unwrap(),
        None,
        "a paused schedule does not fire"
    );
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .fire_schedule(fire("gone", "w", slot, next))
            .await
            .unwrap(),
        None,
        "nor does an unknown one"
    );
    let all = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(all.data.len(), 1, "only the first fire created a run");
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .get_schedule("s")
            .await
            .unwrap()
            .unwrap()
            .next_slot,
        Some(next)
    );
}

/// A fire that only moves the slot (every due slot skipped) creates nothing; a run whose
/// slot key exists is not created twice.
pub async fn fire_without_runs_and_repeated_keys(setup: impl Setup) {
    let store = setup.store().await;
    let schedule = store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("s"), &a_minute_ago)
        .await
        .unwrap();
    let slot = schedule.next_slot.unwrap();
    let next = slot + TimeDelta::seconds(30);
    let mut skip = fire("s", &schedule.workflow_name, slot, next);
    skip.runs.clear();
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .fire_schedule(skip)
            .await
            .unwrap(),
        Some(vec![])
    );
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .get_schedule("s")
            .await
            .unwrap()
            .unwrap()
            .next_slot,
        Some(next)
    );

    // The run of `next` exists already (created by hand with its key): the fire moves the
    // slot and creates nothing.
    let mut by_hand = fire("s", &schedule.workflow_name, next, next)
        .runs
        .remove(0);
    by_hand.input = Some(json!("first"));
    let first = store.create_run(by_hand).await.unwrap();
    let after = next + TimeDelta::seconds(30);
    let runs = store
        .schedules()
        .unwrap()
        .fire_schedule(fire("s", &schedule.workflow_name, next, after))
        .await
        .unwrap();
    assert_eq!(runs, Some(vec![]));
    let all = store.list_runs(ListRuns::default()).await.unwrap();
    assert_eq!(ids(&all.data), [first.id]);
}

/// Two firers of one slot at once: exactly one creates the run.
pub async fn concurrent_fires_of_a_slot_create_one_run(setup: impl Setup) {
    let store = setup.store().await;
    let other = store.scoped(store.namespace()).unwrap();
    for round in 0..10 {
        let name = format!("race-{round}");
        let schedule = store
            .schedules()
            .unwrap()
            .create_schedule(new_schedule(&name), &a_minute_ago)
            .await
            .unwrap();
        let slot = schedule.next_slot.unwrap();
        let next = slot + TimeDelta::minutes(1);
        let (a, b) = futures::join!(
            store.schedules().unwrap().fire_schedule(fire(
                &name,
                &schedule.workflow_name,
                slot,
                next
            )),
            other.contract().schedules().unwrap().fire_schedule(fire(
                &name,
                &schedule.workflow_name,
                slot,
                next
            )),
        );
        let winners: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "round {round}: one firer wins");
        assert_eq!(winners[0].len(), 1);
    }
    let all = store
        .list_runs(ListRuns {
            limit: Some(100),
            ..ListRuns::default()
        })
        .await
        .unwrap();
    assert_eq!(all.data.len(), 10, "one run per slot");
}

/// Schedules are scoped to the store's namespace.
pub async fn schedules_are_scoped_to_namespace(setup: impl Setup) {
    let store = setup.store().await;
    let other = store.scoped(&unique_namespace()).unwrap();
    store
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("s"), &a_minute_ago)
        .await
        .unwrap();
    assert_eq!(
        other
            .contract()
            .schedules()
            .unwrap()
            .get_schedule("s")
            .await
            .unwrap(),
        None
    );
    assert!(
        other
            .contract()
            .schedules()
            .unwrap()
            .list_schedules()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        other
            .contract()
            .schedules()
            .unwrap()
            .due_schedules(10)
            .await
            .unwrap()
            .schedules
            .is_empty()
    );
    assert_err!(
        other
            .contract()
            .schedules()
            .unwrap()
            .delete_schedule("s")
            .await,
        StoreError::ScheduleNotFound { .. }
    );
    // The same name is free there.
    other
        .contract()
        .schedules()
        .unwrap()
        .create_schedule(new_schedule("s"), &in_an_hour)
        .await
        .unwrap();
    assert_eq!(
        store
            .schedules()
            .unwrap()
            .list_schedules()
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Values past the limits are refused before anything is written.
pub async fn schedule_values_past_the_limits_are_refused(setup: impl Setup) {
    let store = setup.store().await;
    let mut zero = new_schedule("s");
    zero.catch_up = CatchUp::All { max: 0 };
    assert_err!(
        store
            .schedules()
            .unwrap()
            .create_schedule(zero, &in_an_hour)
            .await,
        StoreError::Limit(LimitError::OutOfRange { .. })
    );
    let long = new_schedule(&"n".repeat(tasks_core::limits::MAX_SCHEDULE_NAME_BYTES + 1));
    assert_err!(
        store
            .schedules()
            .unwrap()
            .put_schedule(long, &in_an_hour)
            .await,
        StoreError::Limit(LimitError::TooLong { .. })
    );
    let mut nul = new_schedule("s");
    nul.cron = "* * * * *\0".into();
    assert_err!(
        store
            .schedules()
            .unwrap()
            .create_schedule(nul, &in_an_hour)
            .await,
        StoreError::Limit(LimitError::Nul { .. })
    );
    assert!(
        store
            .schedules()
            .unwrap()
            .list_schedules()
            .await
            .unwrap()
            .is_empty()
    );
}
