//! `runs list`, `runs show` and `runs state`.

use crate::uuid::Uuid;
use serde_json::{Value, json};

use super::{Exit, ListArgs, Output, fail, format, store_failed};
pub(super) use crate::display::{
    arguments_line, attempt_numbers, error_text, step_duration, workflow_of,
};
use crate::{Client, ListRuns, Order, RunError, StepAttempt, WorkflowRun};

pub(super) async fn list(
    client: &Client,
    args: &ListArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let query = ListRuns {
        statuses: args.status.clone(),
        workflow_name: args.workflow.clone(),
        parent_run_id: args.parent,
        order: if args.oldest_first {
            Order::Asc
        } else {
            Order::Desc
        },
        limit: Some(args.limit),
        after: args.after,
        before: args.before,
        ..ListRuns::default()
    };
    let page = match client.list_runs(query).await {
        Ok(page) => page,
        Err(error) => return store_failed(&error, err),
    };
    let next = page.next.map(|cursor| cursor.to_string());
    let prev = page.prev.map(|cursor| cursor.to_string());
    if args.json {
        let document = json!({ "runs": page.data, "next": next, "prev": prev });
        let _ = writeln!(out, "{document}");
        return Exit::Success;
    }
    if page.data.is_empty() {
        let _ = writeln!(out, "no runs");
    } else {
        let rows: Vec<Vec<String>> = page
            .data
            .iter()
            .map(|run| {
                vec![
                    run.id.to_string(),
                    workflow_of(run),
                    run.status.to_string(),
                    run.attempts.to_string(),
                    format::time(run.created_at),
                    format::time(run.updated_at),
                ]
            })
            .collect();
        let headers = ["ID", "WORKFLOW", "STATUS", "ATTEMPTS", "CREATED", "UPDATED"];
        let _ = write!(out, "{}", format::table(&headers, &rows));
    }
    if let Some(next) = next {
        let _ = writeln!(out, "next page: --after {next}");
    }
    if let Some(prev) = prev {
        let _ = writeln!(out, "previous page: --before {prev}");
    }
    Exit::Success
}

/// A run, or the exit code of why not.
async fn fetch_run(client: &Client, id: Uuid, err: Output<'_>) -> Result<WorkflowRun, Exit> {
    match client.get_run(id).await {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(fail(
            err,
            Exit::NotFound,
            &RunError::NotFound { run_id: id },
        )),
        Err(error) => Err(store_failed(&error, err)),
    }
}

/// A run with its steps, or the exit code of why not.
pub(super) async fn fetch(
    client: &Client,
    id: Uuid,
    err: Output<'_>,
) -> Result<(WorkflowRun, Vec<StepAttempt>), Exit> {
    let run = fetch_run(client, id, err).await?;
    match client.store().contract().step_history(id).await {
        Ok(steps) => Ok((run, steps)),
        Err(error) => Err(store_failed(&error, err)),
    }
}

pub(super) async fn show(
    client: &Client,
    id: Uuid,
    json: bool,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let run = match fetch_run(client, id, err).await {
        Ok(run) => run,
        Err(exit) => return exit,
    };
    // A step row that does not decode still leaves the run to show; the error names the row.
    let steps = client.store().contract().step_history(id).await;
    if json {
        return match steps {
            Ok(steps) => {
                let _ = writeln!(out, "{}", json!({ "run": run, "steps": steps }));
                Exit::Success
            }
            Err(error) => {
                let _ = writeln!(out, "{}", json!({ "run": run, "steps": null }));
                store_failed(&error, err)
            }
        };
    }
    let mut fields = vec![
        ("run", run.id.to_string()),
        ("workflow", workflow_of(&run)),
        ("namespace", run.namespace.clone()),
        ("status", run.status.to_string()),
        ("attempts", run.attempts.to_string()),
    ];
    if let Some(key) = &run.idempotency_key {
        fields.push(("idempotency key", key.clone()));
    }
    fields.extend([
        ("created", format::time(run.created_at)),
        ("started", format::maybe_time(run.started_at)),
        ("finished", format::maybe_time(run.finished_at)),
    ]);
    if !run.status.is_terminal()
        && let Some(at) = run.available_at
    {
        fields.push(("available at", format::time(at)));
    }
    if let Some(worker) = &run.worker_id {
        fields.push(("worker", worker.clone()));
    }
    if let Some(parent) = run.parent_run_id {
        fields.push(("parent", parent.to_string()));
    }
    if let Some(previous) = run.continued_from_run_id {
        fields.push(("continued from", previous.to_string()));
        fields.push(("lineage", run.lineage_id().to_string()));
    }
    if let Some(successor) = run.continued_as_run_id {
        fields.push(("continued as", successor.to_string()));
    }
    fields.push((
        "input",
        run.input
            .as_ref()
            .map_or_else(|| "-".into(), Value::to_string),
    ));
    if let Some(output) = &run.output {
        fields.push(("output", output.to_string()));
    }
    if let Some(error) = &run.error {
        fields.push(("error", error_text(error)));
    }
    for (name, value) in fields {
        let _ = writeln!(out, "{name:<16}{value}");
    }
    let _ = writeln!(out);
    let steps = match steps {
        Ok(steps) => steps,
        Err(error) => {
            let _ = writeln!(out, "steps cannot be shown (see the error)");
            return store_failed(&error, err);
        }
    };
    if steps.is_empty() {
        let _ = writeln!(out, "no steps yet");
        return Exit::Success;
    }
    let numbers = attempt_numbers(&steps);
    let rows: Vec<Vec<String>> = steps
        .iter()
        .zip(numbers)
        .enumerate()
        .map(|(index, (step, attempt))| {
            vec![
                (index + 1).to_string(),
                step.step_name.clone(),
                match step.child_workflow_run_id {
                    // A child start names its child run.
                    Some(child) => format!("{} {child}", step.kind),
                    None => step.kind.to_string(),
                },
                step.status.to_string(),
                attempt.to_string(),
                format::time(step.started_at.unwrap_or(step.created_at)),
                step_duration(step),
                step.error.as_ref().map(error_text).unwrap_or_default(),
            ]
        })
        .collect();
    let headers = [
        "#", "STEP", "KIND", "STATUS", "ATTEMPT", "STARTED", "DURATION", "ERROR",
    ];
    let _ = write!(out, "{}", format::table(&headers, &rows));
    // The arguments of each call, once per call (its retries were called with the same).
    let mut shown: Option<(&str, &Value)> = None;
    let mut lines = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        let Some(args) = &step.args else { continue };
        if shown == Some((step.step_name.as_str(), args)) {
            continue;
        }
        shown = Some((step.step_name.as_str(), args));
        lines.push(format!(
            "{:<4}{}({})",
            index + 1,
            step.step_name,
            arguments_line(args)
        ));
    }
    if !lines.is_empty() {
        let _ = writeln!(out, "\narguments");
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
    }
    Exit::Success
}

/// `runs state ID [KEY] [--json]`: the latest value of every key the run published, or of
/// one key.
pub(super) async fn state(
    client: &Client,
    id: Uuid,
    key: Option<&str>,
    json: bool,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let store = client.store();
    let read = match (store.contract().published_state(), key) {
        (Ok(states), Some(key)) => states
            .get_state(id, key)
            .await
            .map(|state| state.into_iter().collect::<Vec<_>>()),
        (Ok(states), None) => states.list_state(id).await,
        (Err(unsupported), _) => Err(unsupported),
    };
    let states = match read {
        Ok(states) => states,
        Err(error) => return store_failed(&error, err),
    };
    if let Some(key) = key
        && states.is_empty()
    {
        if json {
            let _ = writeln!(out, "null");
        }
        let _ = writeln!(err, "error: run {id} published nothing under {key:?}");
        return Exit::NotFound;
    }
    if json {
        let document = match key {
            Some(_) => json!(states.first()),
            None => json!({ "run": id, "state": states }),
        };
        let _ = writeln!(out, "{document}");
        return Exit::Success;
    }
    if states.is_empty() {
        let _ = writeln!(out, "run {id} published no state");
        return Exit::Success;
    }
    let rows: Vec<Vec<String>> = states
        .iter()
        .map(|state| {
            vec![
                state.key.clone(),
                state.version.to_string(),
                format::time(state.updated_at),
                state.value.to_string(),
            ]
        })
        .collect();
    let _ = write!(
        out,
        "{}",
        format::table(&["KEY", "VERSION", "UPDATED", "VALUE"], &rows)
    );
    Exit::Success
}
