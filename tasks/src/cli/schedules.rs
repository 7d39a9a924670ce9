//! `schedules`: list, create, pause, resume and delete the cron schedules of the namespace
//! (feature `schedules`). A schedule's input is validated against its workflow's schema, and
//! its cron expression and timezone are parsed, before anything is stored.

use clap::{Args, Subcommand};
use serde_json::json;

use super::commands::{input_json, start_failed};
use super::format::table;
use super::{Exit, Output, fail, store_failed};
use crate::{CatchUp, NewSchedule, Schedule};
use crate::{Client, ClientError, StoreError};

/// `schedules` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum SchedulesCommand {
    /// The schedules of the namespace, by name.
    List {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a schedule: the workflow starts on every slot of the cron expression.
    Create(CreateScheduleArgs),
    /// Pause a schedule: it fires nothing until resumed.
    Pause(ScheduleName),
    /// Resume a paused schedule; the slots missed meanwhile go to its catch-up policy.
    Resume(ScheduleName),
    /// Delete a schedule; the runs it started are kept. (A schedule declared with
    /// `#[workflow(schedule = ...)]` comes back when a worker starts: pause it instead.)
    Delete(ScheduleName),
}

/// A schedule, by name.
#[derive(Debug, Args)]
pub struct ScheduleName {
    /// The schedule's name.
    pub name: String,
}

/// Arguments of `schedules create`.
#[derive(Debug, Args)]
pub struct CreateScheduleArgs {
    /// The schedule's name, unique in the namespace.
    pub name: String,
    /// The workflow it starts.
    #[arg(long, short = 'w')]
    pub workflow: String,
    /// The workflow version (default: the latest linked into this binary).
    #[arg(long)]
    pub version: Option<String>,
    /// The cron expression: 5 fields, or 6 with seconds first (`"0 */5 * * * *"`).
    #[arg(long)]
    pub cron: String,
    /// The IANA timezone the expression is read in.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// The input of every run: JSON text, @file to read it from a file, or @- for standard
    /// input.
    #[arg(long, short = 'i', default_value = "null")]
    pub input: String,
    /// What missed slots do after downtime: `latest` (run the latest), `skip`, or `all(N)`
    /// (run each, up to the latest N).
    #[arg(long, default_value = "latest", value_parser = parse_catch_up)]
    pub catch_up: CatchUp,
}

/// `latest`, `skip` or `all(N)`, as in `#[workflow(catch_up = ...)]`.
fn parse_catch_up(text: &str) -> Result<CatchUp, String> {
    let catch_up = match text.trim() {
        "latest" => CatchUp::Latest,
        "skip" => CatchUp::Skip,
        other => {
            let max = other
                .strip_prefix("all(")
                .and_then(|rest| rest.strip_suffix(')'))
                .and_then(|max| max.trim().parse::<u32>().ok())
                .ok_or_else(|| format!("{other:?} is not latest, skip or all(N)"))?;
            CatchUp::All { max }
        }
    };
    catch_up.check().map_err(|error| error.to_string())?;
    Ok(catch_up)
}

pub(super) async fn list(client: &Client, json: bool, out: Output<'_>, err: Output<'_>) -> Exit {
    let schedules = match client.list_schedules().await {
        Ok(schedules) => schedules,
        Err(error) => return store_failed(&error, err),
    };
    if json {
        let document: Vec<_> = schedules.iter().map(to_json).collect();
        let _ = writeln!(out, "{}", json!({ "schedules": document }));
        return Exit::Success;
    }
    if schedules.is_empty() {
        let _ = writeln!(out, "no schedules");
        return Exit::Success;
    }
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|schedule| {
            vec![
                schedule.name.clone(),
                workflow_of(schedule),
                schedule.cron.clone(),
                schedule.timezone.clone(),
                schedule.catch_up.to_string(),
                if schedule.paused {
                    "paused".into()
                } else {
                    "active".into()
                },
                schedule
                    .next_slot
                    .map_or_else(|| "-".into(), |slot| slot.to_rfc3339()),
            ]
        })
        .collect();
    let _ = write!(
        out,
        "{}",
        table(
            &[
                "NAME",
                "WORKFLOW",
                "CRON",
                "TIMEZONE",
                "CATCH-UP",
                "STATE",
                "NEXT SLOT"
            ],
            &rows
        )
    );
    Exit::Success
}

pub(super) async fn create(
    client: &Client,
    args: &CreateScheduleArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let input = match input_json(&args.input, err) {
        Ok(input) => input,
        Err(exit) => return exit,
    };
    let schedule = NewSchedule {
        name: args.name.clone(),
        workflow_name: args.workflow.clone(),
        version: args.version.clone(),
        cron: args.cron.clone(),
        timezone: args.timezone.clone(),
        input,
        catch_up: args.catch_up,
    };
    match client.create_schedule(schedule).await {
        Ok(schedule) => {
            let next = schedule
                .next_slot
                .map_or_else(|| "never".into(), |slot| slot.to_rfc3339());
            let _ = writeln!(
                out,
                "created schedule {:?} of {}: next slot {next}",
                schedule.name,
                workflow_of(&schedule)
            );
            Exit::Success
        }
        Err(error @ ClientError::InvalidSchedule { .. }) => fail(err, Exit::Usage, &error),
        Err(error) => start_failed(error, err),
    }
}

/// Reports a pause, resume or delete.
pub(super) fn operated<T>(
    result: Result<T, StoreError>,
    name: &str,
    done: &str,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    match result {
        Ok(_) => {
            let _ = writeln!(out, "schedule {name:?} {done}");
            Exit::Success
        }
        Err(error) => store_failed(&error, err),
    }
}

fn workflow_of(schedule: &Schedule) -> String {
    match &schedule.version {
        Some(version) => format!("{}@{version}", schedule.workflow_name),
        None => schedule.workflow_name.clone(),
    }
}

fn to_json(schedule: &Schedule) -> serde_json::Value {
    json!({
        "name": schedule.name,
        "workflowName": schedule.workflow_name,
        "version": schedule.version,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "input": schedule.input,
        "catchUp": schedule.catch_up.as_str(),
        "catchUpMax": schedule.catch_up.stored_max(),
        "paused": schedule.paused,
        "nextSlot": schedule.next_slot,
        "createdAt": schedule.created_at,
        "updatedAt": schedule.updated_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_up_policies_parse_like_the_attribute() {
        assert_eq!(parse_catch_up("latest"), Ok(CatchUp::Latest));
        assert_eq!(parse_catch_up("skip"), Ok(CatchUp::Skip));
        assert_eq!(parse_catch_up("all(5)"), Ok(CatchUp::All { max: 5 }));
        assert!(parse_catch_up("all(0)").is_err());
        assert!(parse_catch_up("all").is_err());
        assert!(parse_catch_up("sometimes").is_err());
    }
}
