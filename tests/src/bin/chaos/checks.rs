//! What every scenario is checked for, on what the store and the execution log hold once
//! the runs drained: no lost run, no step recorded twice, no step body begun after its
//! record existed.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tasks::postgres::PgStore;
use tasks::store::{RunStore, StepStore, Store};
use tasks::{ListRuns, RunStatus, StepAttempt, StepKind, StepStatus, WorkflowRun};
use uuid::Uuid;

use crate::workflows::logged_step_name;

/// One row of `tasks_chaos.executions` (its run and step index are its key in
/// [`Observed::executions`]).
#[derive(Debug, Clone)]
pub struct Execution {
    pub pid: i64,
    pub started_at: DateTime<Utc>,
}

/// A namespace as the checks read it after the drain.
pub struct Observed {
    pub namespace: String,
    pub runs: Vec<WorkflowRun>,
    pub histories: HashMap<Uuid, Vec<StepAttempt>>,
    /// Executions of each `(run, step index)`.
    pub executions: HashMap<(Uuid, i64), Vec<Execution>>,
}

impl Observed {
    pub async fn read(admin: &PgPool, store: &PgStore) -> Result<Self, Box<dyn std::error::Error>> {
        let runs = all_runs(store, Vec::new()).await?;
        let mut histories = HashMap::new();
        for run in &runs {
            histories.insert(run.id, store.step_history(run.id).await?);
        }
        let ids: Vec<Uuid> = runs.iter().map(|run| run.id).collect();
        let rows: Vec<(Uuid, i64, i64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT run_id, step_index, pid, started_at FROM tasks_chaos.executions
              WHERE run_id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(admin)
        .await?;
        let mut executions: HashMap<(Uuid, i64), Vec<Execution>> = HashMap::new();
        for (run_id, step_index, pid, started_at) in rows {
            executions
                .entry((run_id, step_index))
                .or_default()
                .push(Execution { pid, started_at });
        }
        Ok(Observed {
            namespace: store.namespace().to_owned(),
            runs,
            histories,
            executions,
        })
    }

    pub fn history(&self, run_id: Uuid) -> &[StepAttempt] {
        self.histories.get(&run_id).map_or(&[], Vec::as_slice)
    }

    /// The completed record of the step named `name` of `run_id`, if there is one.
    pub fn record(&self, run_id: Uuid, name: &str) -> Option<&StepAttempt> {
        self.history(run_id)
            .iter()
            .find(|step| step.step_name == name && step.status == StepStatus::Completed)
    }

    pub fn executions_of(&self, run_id: Uuid, index: i64) -> &[Execution] {
        self.executions
            .get(&(run_id, index))
            .map_or(&[], Vec::as_slice)
    }
}

/// Every run of a namespace in one of `statuses` (all runs when empty), page after page.
pub async fn all_runs(
    store: &PgStore,
    statuses: Vec<RunStatus>,
) -> Result<Vec<WorkflowRun>, tasks::StoreError> {
    let mut runs = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_runs(ListRuns {
                statuses: statuses.clone(),
                limit: Some(500),
                after,
                ..Default::default()
            })
            .await?;
        runs.extend(page.data);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(runs),
        }
    }
}

/// What the checks counted beside their failures.
#[derive(Debug, Default)]
pub struct Tally {
    pub runs: usize,
    pub records: usize,
    /// Logged steps whose body ran more than once before their record existed: in flight
    /// at a kill, a freeze or a failed attempt, which is the at-least-once window.
    pub reexecuted_in_flight: usize,
}

/// The promises every scenario shares: each of `expected` runs is in the namespace, every
/// run of it completed, no step of any run completed twice, every logged step of a
/// completed run has its record, and no logged step body began after its record existed.
pub fn every_run(observed: &Observed, expected: &[Uuid], failures: &mut Vec<String>) -> Tally {
    let namespace = &observed.namespace;
    let mut tally = Tally::default();
    for id in expected {
        if !observed.runs.iter().any(|run| run.id == *id) {
            failures.push(format!("{namespace}: run {id} is gone"));
        }
    }
    for run in &observed.runs {
        tally.runs += 1;
        if run.status != RunStatus::Completed {
            failures.push(format!(
                "{namespace}: run {} ({}) is {} (lost): {:?}",
                run.id, run.workflow_name, run.status, run.error
            ));
        }
        let mut completed: HashMap<&str, usize> = HashMap::new();
        for step in observed.history(run.id) {
            if step.status == StepStatus::Completed {
                *completed.entry(step.step_name.as_str()).or_default() += 1;
            }
        }
        for (name, times) in &completed {
            tally.records += 1;
            if *times > 1 {
                failures.push(format!(
                    "{namespace}: run {}: step {name} completed {times} times",
                    run.id
                ));
            }
        }
        let expected_calls = logged_calls(run);
        if matches!(run.workflow_name.as_str(), "chaos-steps" | "chaos-paced")
            && run.status == RunStatus::Completed
            && run.output != Some(serde_json::json!(expected_calls))
        {
            failures.push(format!(
                "{namespace}: run {} completed with {:?}, not {expected_calls}",
                run.id, run.output
            ));
        }
        let seen_calls = observed
            .executions
            .keys()
            .filter(|(id, _)| *id == run.id)
            .map(|(_, index)| index + 1)
            .max()
            .unwrap_or(0);
        for index in 0..expected_calls.max(seen_calls) {
            let name = logged_step_name(index);
            let executions = observed.executions_of(run.id, index);
            match observed.record(run.id, &name) {
                None if run.status == RunStatus::Completed => failures.push(format!(
                    "{namespace}: run {} completed without a record of {name}",
                    run.id
                )),
                None => {}
                Some(record) => {
                    let late: Vec<&Execution> = executions
                        .iter()
                        .filter(|execution| execution.started_at > record.created_at)
                        .collect();
                    if !late.is_empty() {
                        failures.push(format!(
                            "{namespace}: run {}: step {name} began {} times after its record of \
                             {}: {late:?}",
                            run.id,
                            late.len(),
                            record.created_at
                        ));
                    }
                    if executions.is_empty() {
                        failures.push(format!(
                            "{namespace}: run {}: step {name} is recorded but its body never ran",
                            run.id
                        ));
                    }
                }
            }
            if executions.len() > 1 {
                tally.reexecuted_in_flight += 1;
            }
        }
        if index_past(observed, run.id, expected_calls) {
            failures.push(format!(
                "{namespace}: run {} ({}) recorded more than its {expected_calls} logged steps",
                run.id, run.workflow_name
            ));
        }
    }
    tally
}

/// How many times a run of its workflow calls `logged`.
fn logged_calls(run: &WorkflowRun) -> i64 {
    match run.workflow_name.as_str() {
        "chaos-steps" | "chaos-paced" => run
            .input
            .as_ref()
            .and_then(|input| input.get("steps"))
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0),
        "chaos-leaf" => 2,
        "chaos-composed" => 3,
        _ => 0,
    }
}

/// Whether `run_id` holds a record of a logged step at `calls` or past it.
fn index_past(observed: &Observed, run_id: Uuid, calls: i64) -> bool {
    observed.history(run_id).iter().any(|step| {
        step.kind == StepKind::Function
            && step.step_name.starts_with("logged")
            && (0..calls).all(|index| logged_step_name(index) != step.step_name)
    })
}
