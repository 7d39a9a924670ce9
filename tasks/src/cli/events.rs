//! `events send`: an event to a run, validated against the payload type its workflow
//! declares (`#[workflow(events(...))]`) before anything is stored; `events
//! signal-with-start`: the same to the run of a workflow and an idempotency key, started
//! with an input when there is none.

use clap::{Args, Subcommand};

use super::commands::{input_json, json_arg, start_failed};
use super::{Exit, Output, fail, store_failed};
use crate::uuid::Uuid;
use crate::{Client, ClientError, EventTarget, IdempotencyScope, StartOptions};

/// `events` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum EventsCommand {
    /// Send an event to a run (by id, or by workflow and idempotency key); the payload is
    /// validated against the type the run's workflow declares for the topic.
    Send(SendArgs),
    /// Send an event to the run of a workflow and idempotency key, starting that run with
    /// the input first when no run holds the key, in one transaction; the input and the
    /// payload are validated first.
    SignalWithStart(Box<SignalWithStartArgs>),
}

/// Arguments of `events signal-with-start`.
#[derive(Debug, Args)]
pub struct SignalWithStartArgs {
    /// The topic (the event type's `TOPIC`).
    pub topic: String,
    /// The workflow of the run.
    #[arg(long, short = 'w')]
    pub workflow: String,
    /// The idempotency key that names the run (and that a new run is started with).
    #[arg(long)]
    pub key: String,
    /// The input of a new run: JSON text, @file to read it from a file, or @- for standard
    /// input.
    #[arg(long, short = 'i', default_value = "null")]
    pub input: String,
    /// The version of a new run [default: the latest].
    #[arg(long, short = 'v')]
    pub version: Option<String>,
    /// A new run holds its key only while it is live, so that once it has finished the
    /// next signal-with-start starts another [default: for ever, and a finished run
    /// refuses the event].
    #[arg(long)]
    pub while_active: bool,
    /// The payload: JSON text, @file to read it from a file, or @- for standard input.
    #[arg(long, short = 'p', default_value = "null")]
    pub payload: String,
    /// A second send to the same run and topic with this key stores nothing.
    #[arg(long)]
    pub dedup_key: Option<String>,
    /// Print only the run id.
    #[arg(long, short = 'q')]
    pub quiet: bool,
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
    let payload = match json_arg("payload", &args.payload, err) {
        Ok(payload) => payload,
        Err(exit) => return exit,
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
        Err(error @ ClientError::InvalidEvent { .. }) => event_refused(error, err),
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

pub(super) async fn signal_with_start(
    client: &Client,
    args: &SignalWithStartArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let input = match input_json(&args.input, err) {
        Ok(input) => input,
        Err(exit) => return exit,
    };
    let payload = match json_arg("payload", &args.payload, err) {
        Ok(payload) => payload,
        Err(exit) => return exit,
    };
    let mut options = StartOptions::new().idempotency_key(&args.key);
    if let Some(version) = &args.version {
        options = options.version(version);
    }
    if args.while_active {
        options = options.idempotency_scope(IdempotencyScope::WhileActive);
    }
    let mut signal = client
        .start_by_name(&args.workflow, input)
        .options(options)
        .with_event_by_topic(&args.topic, payload);
    if let Some(key) = &args.dedup_key {
        signal = signal.dedup_key(key);
    }
    match signal.await {
        Ok(signalled) => {
            if args.quiet {
                let _ = writeln!(out, "{}", signalled.run.id);
            } else {
                let run = if signalled.created {
                    "started run"
                } else {
                    "run"
                };
                let event = if signalled.event.duplicate {
                    "already sent (duplicate key); nothing stored"
                } else if signalled.event.woke {
                    "sent; the waiting run was woken"
                } else {
                    "sent; it waits in the run's mailbox"
                };
                let _ = writeln!(
                    out,
                    "{run} {} of {}: event {} on {:?} {event}",
                    signalled.run.id,
                    signalled.run.workflow_name,
                    signalled.event.event.id,
                    signalled.event.event.topic
                );
            }
            Exit::Success
        }
        Err(error @ (ClientError::InvalidEvent { .. } | ClientError::UndeclaredEvent { .. })) => {
            event_refused(error, err)
        }
        Err(error) => start_failed(error, err),
    }
}

/// Prints why an event was refused before anything was stored; a usage error.
fn event_refused(error: ClientError, err: Output<'_>) -> Exit {
    match error {
        ClientError::InvalidEvent {
            workflow,
            topic,
            violations,
        } => {
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
        error => fail(err, Exit::Usage, &error),
    }
}
