//! `events send`: an event to a run, validated against the payload type its workflow
//! declares (`#[workflow(events(...))]`) before anything is stored.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::commands::input_text;
use super::{Exit, Output, fail, store_failed};
use crate::uuid::Uuid;
use crate::{Client, ClientError, EventTarget};

/// `events` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum EventsCommand {
    /// Send an event to a run (by id, or by workflow and idempotency key); the payload is
    /// validated against the type the run's workflow declares for the topic.
    Send(SendArgs),
}

/// Arguments of `events send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The topic (the event type's `TOPIC`).
    pub topic: String,
    /// The run, by id.
    #[arg(long, required_unless_present = "key", conflicts_with_all = ["workflow", "key"])]
    pub run: Option<Uuid>,
    /// The run's workflow, with --key.
    #[arg(long, short = 'w', requires = "key")]
    pub workflow: Option<String>,
    /// The idempotency key the run was started with, with --workflow.
    #[arg(long, requires = "workflow")]
    pub key: Option<String>,
    /// The payload: JSON text, @file to read it from a file, or @- for standard input.
    #[arg(long, short = 'p', default_value = "null")]
    pub payload: String,
    /// A second send to the same run and topic with this key stores nothing.
    #[arg(long)]
    pub dedup_key: Option<String>,
    /// Print only the event id.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

pub(super) async fn send(
    client: &Client,
    args: &SendArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let text = match input_text(&args.payload) {
        Ok(text) => text,
        Err(error) => {
            let _ = writeln!(
                err,
                "error: cannot read the payload {}: {error}",
                args.payload
            );
            return Exit::Usage;
        }
    };
    let payload: Value = match serde_json::from_str(&text) {
        Ok(payload) => payload,
        Err(error) => {
            let _ = writeln!(err, "error: the payload is not valid JSON: {error}");
            return Exit::Usage;
        }
    };
    let target = match (&args.run, &args.workflow, &args.key) {
        (Some(run), _, _) => EventTarget::Run(*run),
        (None, Some(workflow), Some(key)) => EventTarget::Key {
            workflow_name: workflow.clone(),
            idempotency_key: key.clone(),
        },
        // clap requires one or the other.
        _ => {
            let _ = writeln!(err, "error: give --run ID, or --workflow NAME --key KEY");
            return Exit::Usage;
        }
    };
    let mut send = client.send_event_by_topic(target, &args.topic, payload);
    if let Some(key) = &args.dedup_key {
        send = send.dedup_key(key);
    }
    match send.await {
        Ok(sent) => {
            if args.quiet {
                let _ = writeln!(out, "{}", sent.event.id);
            } else {
                let what = if sent.duplicate {
                    "already sent (duplicate key); nothing stored"
                } else if sent.woke {
                    "sent; the waiting run was woken"
                } else {
                    "sent; it waits in the run's mailbox"
                };
                let _ = writeln!(
                    out,
                    "event {} on {:?} to run {}: {what}",
                    sent.event.id, sent.event.topic, sent.event.workflow_run_id
                );
            }
            Exit::Success
        }
        Err(ClientError::InvalidEvent {
            workflow,
            topic,
            violations,
        }) => {
            let _ = writeln!(
                err,
                "error: invalid payload for event {topic:?} of workflow {workflow} ({} violation{}); nothing was stored",
                violations.len(),
                if violations.len() == 1 { "" } else { "s" }
            );
            for violation in &violations {
                let _ = writeln!(err, "  {violation}");
            }
            Exit::Usage
        }
        Err(error @ ClientError::UnknownWorkflow { .. }) => fail(err, Exit::NotFound, &error),
        Err(ClientError::Store(error)) => store_failed(&error, err),
        Err(
            error @ (ClientError::UndeclaredEvent { .. }
            | ClientError::Json(_)
            | ClientError::Limit(_)),
        ) => fail(err, Exit::Usage, &error),
        Err(error) => fail(err, Exit::Failure, &error),
    }
}
