//! Composed primitives under the kills: runs that start children, wait for events sent
//! before and after their waits began (every send repeated with its deduplication key), and
//! publish state. Checked: each run returns what it would have without the kills, each
//! child ran once per call, each event was stored and consumed once, the published state
//! has its last value at the version of its last publication.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tasks::postgres::PgStore;
use tasks::store::{CreateRun, EventStore, RunStore, StateStore, StepStore};
use tasks::{Client, ClientError, Event, StepStatus};
use uuid::Uuid;

use crate::checks::Observed;
use crate::workflows::{ComposedInput, ComposedOutput, Early, Late, PROGRESS};

/// Runs of the composed workflow (each with three children).
pub const PARENTS: usize = 40;

#[derive(Debug, Clone)]
pub struct Parent {
    pub id: Uuid,
    pub seed: u64,
}

/// One send that went through: what the store answered.
#[derive(Debug, Clone)]
pub struct Sent {
    pub run_id: Uuid,
    pub dedup_key: String,
    pub event_id: Uuid,
    pub duplicate: bool,
}

/// The events each run is sent, by deduplication key: topic, consuming step, payload.
const EVENTS: [(&str, &str, &str, u32); 3] = [
    ("early-1", Early::TOPIC, "event/chaos-early", 1),
    ("early-2", Early::TOPIC, "event/chaos-early:1", 2),
    ("late", Late::TOPIC, "event/chaos-late", 3),
];

async fn send(client: &Client, run_id: Uuid, dedup_key: &str) -> Result<Sent, ClientError> {
    let sent = match dedup_key {
        "early-1" => {
            client
                .send_event(run_id, &Early { n: 1 })
                .dedup_key(dedup_key)
                .await
        }
        "early-2" => {
            client
                .send_event(run_id, &Early { n: 2 })
                .dedup_key(dedup_key)
                .await
        }
        _ => {
            client
                .send_event(run_id, &Late { n: 3 })
                .dedup_key(dedup_key)
                .await
        }
    }?;
    Ok(Sent {
        run_id,
        dedup_key: dedup_key.to_owned(),
        event_id: sent.event.id,
        duplicate: sent.duplicate,
    })
}

/// Creates the runs (before any worker starts) and sends each its two early events twice.
pub async fn start(
    store: &PgStore,
    client: &Client,
) -> Result<(Vec<Parent>, Vec<Sent>), Box<dyn std::error::Error>> {
    let mut parents = Vec::with_capacity(PARENTS);
    let mut sent = Vec::new();
    for index in 0..PARENTS as u64 {
        let seed = index * 10;
        let run = store
            .create_run(CreateRun {
                input: Some(serde_json::to_value(ComposedInput { seed })?),
                ..CreateRun::new("chaos-composed")
            })
            .await?;
        for key in ["early-1", "early-1", "early-2", "early-2"] {
            sent.push(send(client, run.id, key).await?);
        }
        parents.push(Parent { id: run.id, seed });
    }
    Ok((parents, sent))
}

/// Sends each run its late event, twice at once, once its wait for it has begun (its step
/// is in the run's history), and its first early event again, consumed by then. A send that
/// fails (the restart) is tried again the next round: the deduplication key makes that
/// safe. Returns once every send went through, or at `until`.
pub async fn send_late(
    client: Client,
    store: PgStore,
    parents: Vec<Parent>,
    until: Instant,
) -> Vec<Sent> {
    let mut due: HashMap<Uuid, Vec<&str>> = parents
        .iter()
        .map(|parent| (parent.id, vec!["late", "late", "early-1"]))
        .collect();
    let mut sent = Vec::new();
    while !due.is_empty() && Instant::now() < until {
        for (run_id, keys) in &mut due {
            let waiting = match store.step_history(*run_id).await {
                Ok(history) => history
                    .iter()
                    .any(|step| step.step_name == "event/chaos-late"),
                Err(_) => false,
            };
            if !waiting {
                continue;
            }
            let replies =
                futures::future::join_all(keys.iter().map(|key| send(&client, *run_id, key))).await;
            let mut failed = Vec::new();
            for (key, reply) in keys.iter().zip(replies) {
                match reply {
                    Ok(reply) => sent.push(reply),
                    Err(_) => failed.push(*key),
                }
            }
            *keys = failed;
        }
        due.retain(|_, keys| !keys.is_empty());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if !due.is_empty() {
        println!(
            "chaos: composed: {} runs never got all their late sends",
            due.len()
        );
    }
    sent
}

/// The composed runs' own promises, on top of those of every run.
pub async fn check(
    observed: &Observed,
    store: &PgStore,
    parents: &[Parent],
    sent: &[Sent],
    failures: &mut Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    for parent in parents {
        let id = parent.id;
        let Some(run) = observed.runs.iter().find(|run| run.id == id) else {
            continue;
        };
        let expected = serde_json::to_value(ComposedOutput::expected(parent.seed))?;
        if run.output.as_ref() != Some(&expected) {
            failures.push(format!(
                "composed: run {id} returned {:?}, not {expected}",
                run.output
            ));
        }

        // One child per call: three child runs, each the one its start step names.
        let children: HashSet<Uuid> = observed
            .runs
            .iter()
            .filter(|child| child.parent_run_id == Some(id))
            .map(|child| child.id)
            .collect();
        let started: HashSet<Uuid> = [
            "child/chaos-leaf",
            "child/chaos-leaf:1",
            "child/chaos-leaf:2",
        ]
        .iter()
        .filter_map(|name| observed.record(id, name))
        .filter_map(|step| step.child_workflow_run_id)
        .collect();
        if children.len() != 3 || started != children {
            failures.push(format!(
                "composed: run {id} has children {children:?}, its three starts name {started:?}"
            ));
        }

        // Each event stored once, consumed once, by its wait.
        let events = store.list_events(id).await?;
        if events.len() != EVENTS.len() {
            failures.push(format!(
                "composed: run {id} holds {} events, not {}: {events:?}",
                events.len(),
                EVENTS.len()
            ));
        }
        for (key, topic, consumer, _) in EVENTS {
            let stored: Vec<_> = events
                .iter()
                .filter(|event| event.dedup_key.as_deref() == Some(key))
                .collect();
            let [event] = stored.as_slice() else {
                failures.push(format!(
                    "composed: run {id} holds {} events of key {key}",
                    stored.len()
                ));
                continue;
            };
            if event.topic != topic || event.consumed_by.as_deref() != Some(consumer) {
                failures.push(format!(
                    "composed: run {id}: event {key} is on {} consumed by {:?}, not on {topic} \
                     by {consumer}",
                    event.topic, event.consumed_by
                ));
            }
            let replies: Vec<&Sent> = sent
                .iter()
                .filter(|reply| reply.run_id == id && reply.dedup_key == key)
                .collect();
            let firsts = replies.iter().filter(|reply| !reply.duplicate).count();
            if replies.iter().any(|reply| reply.event_id != event.id) || firsts > 1 {
                failures.push(format!(
                    "composed: run {id}: the sends of {key} were answered {replies:?}, the store \
                     holds {}",
                    event.id
                ));
            }
            if key == "late" {
                let wait_began = observed
                    .history(id)
                    .iter()
                    .find(|step| step.step_name == consumer)
                    .and_then(|step| step.started_at);
                if wait_began.is_none_or(|began| event.created_at <= began) {
                    failures.push(format!(
                        "composed: run {id}: the late event was stored at {}, its wait began at \
                         {wait_began:?}",
                        event.created_at
                    ));
                }
            }
        }

        // The published state: its last value, at the version of the third publication.
        let publications = observed
            .history(id)
            .iter()
            .filter(|step| {
                step.step_name.starts_with("state/") && step.status == StepStatus::Completed
            })
            .count();
        match store.get_state(id, PROGRESS).await? {
            Some(state)
                if state.value == serde_json::json!(3)
                    && state.version == 3
                    && publications == 3 => {}
            state => failures.push(format!(
                "composed: run {id}: state {PROGRESS} is {state:?} after {publications} recorded \
                 publications, not 3 at version 3"
            )),
        }
    }
    let late = sent
        .iter()
        .filter(|reply| reply.dedup_key == "late")
        .count();
    println!(
        "chaos: composed: {} runs, {} children, {} sends ({late} late ones) answered",
        parents.len(),
        observed
            .runs
            .iter()
            .filter(|run| run.parent_run_id.is_some())
            .count(),
        sent.len()
    );
    Ok(())
}
