//! The operator command line, compiled into your binary (feature `cli`).
//!
//! Because it is linked into the program that defines the workflows, it knows their names,
//! versions and JSON Schemas: `start` validates input against the schema before anything is
//! stored, and `worker` executes every `#[workflow]` of the binary.
//!
//! The whole command line is one call in `main`:
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     tasks::cli::run().await
//! }
//! ```
//!
//! or [`TasksArgs`] mounted as a subcommand of your own clap application (see
//! `examples/cli.rs`), executed with [`TasksArgs::execute`] (which connects to
//! `--database-url`) or [`TasksArgs::execute_with`] (on a [`Client`] you built).
//!
//! | command | what it does |
//! | --- | --- |
//! | `worker [--concurrency N]` | runs a worker until Ctrl-C, then shuts down gracefully |
//! | `migrate` | brings the database schema up to date |
//! | `workflows list` | name, version and description of every linked workflow |
//! | `workflows schema NAME [--version V]` | the JSON Schemas of its input and output |
//! | `start NAME --input JSON\|@file [--version V] [--idempotency-key K] [--delay 30s]` | starts a run, input validated first |
//! | `runs list [--status S] [--workflow W] [--parent ID] [--limit N] [--after C\|--before C] [--json]` | a page of runs, newest first |
//! | `runs show ID [--json]` | a run with its input, output or error, and step timeline |
//! | `runs watch ID` | follows a run until it ends |
//! | `cancel ID`, `pause ID`, `resume ID`, `retry ID` | operate on a run (`retry`: a failed or canceled run runs again from its first unfinished step) |
//! | `fork ID --from-step NAME` | a new run of a finished run that replays the steps before `NAME` and runs the rest |
//! | `purge --older-than 30d [--status failed,canceled] [--batch-size N]` | deletes finished runs older than that, with their steps and events, and prints how many |
//! | `doctor` | checks connectivity, schema, notifications, clock skew and workers |
//! | `verify-replay [--finished-sample N] [--json]` | replays the histories of the namespace's unfinished runs (and of N finished ones) against this binary's workflows, executing and writing nothing; exit code 1 on a mismatch (see [`crate::verify`]) |
//! | `events send TOPIC (--run ID \| --workflow W --key K) [--payload JSON\|@file] [--dedup-key K]` | sends an event, payload validated first |
//! | `events signal-with-start TOPIC --workflow W --key K [--input JSON\|@file] [--version V] [--while-active] [--payload JSON\|@file] [--dedup-key K]` | sends an event to the run of the key, starting it with the input if there is none, in one transaction; input and payload validated first |
//! | `queues list [--json]` | the namespace's configured queues, with their concurrency and rate limits |
//! | `schedules list [--json]` | the namespace's cron schedules, with their next slots (feature `schedules`) |
//! | `schedules create NAME --workflow W --cron EXPR [--timezone TZ] [--input JSON\|@file] [--catch-up latest\|skip\|all(N)]` | creates a schedule; cron, timezone and input checked first |
//! | `schedules pause NAME`, `resume NAME`, `delete NAME` | operate on a schedule |
//! | `dashboard [--bind 127.0.0.1:8080] [--token T\|--basic-auth U:P]` | serves the [web dashboard](crate::dashboard) (feature `dashboard`) |
//! | `api [--bind 127.0.0.1:8081] [--token SECRET[@NS,...\|@*][:read\|:operate]]... [--insecure-no-auth]` | serves the [HTTP JSON API](crate::http_api) (feature `http-api`); without tokens only on loopback unless told |
//!
//! Every command takes `--database-url` (default: `DATABASE_URL`, else
//! [`DEFAULT_DATABASE_URL`](crate::DEFAULT_DATABASE_URL)) and `--namespace`. Connecting
//! applies pending migrations, like [`connect`](crate::connect) (but for `verify-replay`).
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (for `runs watch`: the run completed) |
//! | 1 | the run failed or was canceled (`runs watch`), a `doctor` check failed, a run does not replay (`verify-replay`), or the run's state refuses the operation (e.g. resuming a completed run) |
//! | 2 | usage error or invalid input (nothing was stored) |
//! | 3 | the run or workflow does not exist |
//! | 4 | the store failed or could not be reached, or holds a row this version cannot decode (the error names the run, and for a step row the attempt, its step and the column; `runs show` still prints the run) |
//!
//! Errors are one line on standard error, `error: ...`; results go to standard output.

#[cfg(feature = "http-api")]
mod api;
#[cfg(feature = "http-api")]
pub use api::ApiArgs;
mod commands;
#[cfg(feature = "dashboard")]
mod dashboard;
mod doctor;
mod events;
mod format;
mod queues;
mod runs;
#[cfg(feature = "schedules")]
mod schedules;
mod verify;
mod watch;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::uuid::Uuid;
/// The `clap` this command line is built with, for mounting [`TasksArgs`] into your own
/// parser (its derives still need `clap` among your dependencies).
pub use clap;
use clap::{Args, Parser, Subcommand};
pub use events::{EventsCommand, SendArgs, SignalWithStartArgs};
pub use queues::QueuesCommand;
#[cfg(feature = "schedules")]
pub use schedules::{CreateScheduleArgs, ScheduleName, SchedulesCommand};
pub use verify::VerifyReplayArgs;

use crate::{Client, ConnectError, Cursor, Registry, RunStatus, StoreError};

/// A writer the command line prints to: standard output or error, or a buffer in tests.
pub type Output<'a> = &'a mut (dyn Write + Send);

/// How a command ended; converts into the process's [`ExitCode`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// 0: done.
    Success,
    /// 1: the run failed or was canceled, a check failed, or the run's state refused.
    Failure,
    /// 2: the command line or the input is invalid; nothing was changed.
    Usage,
    /// 3: the run or workflow does not exist.
    NotFound,
    /// 4: the store failed or could not be reached.
    Store,
}

impl Exit {
    /// The process exit code.
    pub const fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::NotFound => 3,
            Exit::Store => 4,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// Parses the process's arguments as [`Cli`], executes the command on standard output and
/// error, and returns the exit code. Help and usage errors are printed by clap (exit codes
/// 0 and 2).
pub async fn run() -> ExitCode {
    match Cli::try_parse() {
        Ok(cli) => {
            let mut out = std::io::stdout();
            let mut err = std::io::stderr();
            cli.execute(&mut out, &mut err).await.into()
        }
        Err(error) => {
            let _ = error.print();
            // clap says 0 for --help and --version, 2 for usage errors.
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(Exit::Usage.code()))
        }
    }
}

/// The command line as a standalone program: `tasks [--database-url URL] COMMAND`.
#[derive(Debug, Parser)]
#[command(
    name = "tasks",
    version,
    about = "Operate durable workflows: workers, runs, schemas and health checks."
)]
pub struct Cli {
    /// The connection and the command.
    #[command(flatten)]
    pub tasks: TasksArgs,
}

impl Cli {
    /// Executes the parsed command, printing results to `out` and errors to `err`.
    pub async fn execute(&self, out: Output<'_>, err: Output<'_>) -> Exit {
        self.tasks.execute(out, err).await
    }
}

/// The command line as arguments to mount in your own clap application, e.g. as
/// `myapp tasks ...` with a `Tasks(tasks::cli::TasksArgs)` variant of your subcommands.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// Database URL: postgres://user@host/db or sqlite://file.sqlite [default: sqlite://tasks.sqlite]
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// The namespace of the runs [default: the store's, "default" when connecting]
    #[arg(long, short = 'n', global = true)]
    pub namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum Command {
    /// Run a worker executing the workflows of this binary until Ctrl-C.
    Worker(WorkerArgs),
    /// Bring the database schema up to date.
    Migrate,
    /// The workflows linked into this binary.
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Start a run; the input is validated against the workflow's JSON Schema first.
    Start(StartArgs),
    /// List, show and watch runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Cancel a run for good.
    Cancel(RunId),
    /// Pause a run: no worker claims it until it is resumed.
    Pause(RunId),
    /// Resume a paused run.
    Resume(RunId),
    /// Run a failed or canceled run again from its first unfinished step.
    Retry(RunId),
    /// Start a new run from a finished one: the steps before `--from-step` replay, the rest
    /// run again.
    Fork(ForkArgs),
    /// Delete finished (completed, failed, canceled) runs older than `--older-than`, with
    /// their steps and events, in batches.
    Purge(PurgeArgs),
    /// Check connectivity, schema, notifications, clock skew and workers.
    Doctor,
    /// Replay the histories of the namespace's runs against this binary's workflows,
    /// executing and writing nothing; exit code 1 when one does not replay.
    VerifyReplay(VerifyReplayArgs),
    /// Send events to runs.
    #[command(subcommand)]
    Events(EventsCommand),
    /// List the configured queues and their limits.
    #[command(subcommand)]
    Queues(QueuesCommand),
    /// List, create, pause, resume and delete cron schedules (feature `schedules`).
    #[cfg(feature = "schedules")]
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// Serve the web dashboard (on 127.0.0.1:8080 unless told otherwise) until Ctrl-C.
    #[cfg(feature = "dashboard")]
    Dashboard(DashboardArgs),
    /// Serve the HTTP JSON API (on 127.0.0.1:8081 unless told otherwise) until Ctrl-C.
    #[cfg(feature = "http-api")]
    Api(ApiArgs),
}

/// Arguments of `dashboard`.
#[cfg(feature = "dashboard")]
#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The address to listen on; anything but loopback exposes the dashboard to the network.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: std::net::SocketAddr,
    /// Require `Authorization: Bearer TOKEN` on every request.
    #[arg(
        long,
        env = "TASKS_DASHBOARD_TOKEN",
        hide_env_values = true,
        conflicts_with = "basic_auth"
    )]
    pub token: Option<String>,
    /// Require HTTP basic authentication, given as USER:PASSWORD.
    #[arg(long, env = "TASKS_DASHBOARD_BASIC_AUTH", hide_env_values = true, value_parser = parse_basic_auth)]
    pub basic_auth: Option<crate::dashboard::Credentials>,
    /// How often the runs page refreshes while live (e.g. 2s).
    #[arg(long, value_parser = format::parse_duration, default_value = "2s")]
    pub refresh: Duration,
}

#[cfg(feature = "dashboard")]
fn parse_basic_auth(pair: &str) -> Result<crate::dashboard::Credentials, String> {
    crate::dashboard::Credentials::basic_from_pair(pair)
        .ok_or_else(|| "expected USER:PASSWORD with a user name".to_owned())
}

/// Arguments of `worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// How many runs execute at once.
    #[arg(long, short = 'c', default_value_t = 16)]
    pub concurrency: usize,
    /// How long Ctrl-C waits for in-flight runs (e.g. 30s).
    #[arg(long, value_parser = format::parse_duration, default_value = "30s")]
    pub shutdown_grace: Duration,
    /// Serve the process's Prometheus metrics at http://ADDR/metrics while the worker runs
    /// (feature `prometheus`). Without credentials: bind it to loopback or a private
    /// network.
    #[cfg(feature = "prometheus")]
    #[arg(long, value_name = "ADDR")]
    pub metrics_bind: Option<std::net::SocketAddr>,
}

/// `workflows` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum WorkflowsCommand {
    /// Name, version and description of every workflow.
    List {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The JSON Schemas of a workflow's input and output.
    Schema {
        /// The workflow name.
        name: String,
        /// The version [default: the latest].
        #[arg(long, short = 'v')]
        version: Option<String>,
    },
}

/// Arguments of `start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The workflow name.
    pub name: String,
    /// The input: JSON text, @file to read it from a file, or @- for standard input.
    #[arg(long, short = 'i', default_value = "null")]
    pub input: String,
    /// The version [default: the latest].
    #[arg(long, short = 'v')]
    pub version: Option<String>,
    /// A second start with the same key returns the first run.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Start after this delay (e.g. 30s, 5m, 1h30m).
    #[arg(long, value_parser = format::parse_duration)]
    pub delay: Option<Duration>,
    /// Print only the run id.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `runs` subcommands.
#[derive(Debug, Subcommand)]
#[non_exhaustive]
pub enum RunsCommand {
    /// A page of runs, newest first.
    List(ListArgs),
    /// A run with its input, output or error, and step timeline.
    Show {
        /// The run id.
        id: Uuid,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The values a run published (`ctx.set_state`): every key, or one.
    State {
        /// The run id.
        id: Uuid,
        /// Only this key (exit code 3, not found, when the run published nothing under it).
        key: Option<String>,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow a run until it ends; the exit code says how it ended.
    Watch {
        /// The run id.
        id: Uuid,
        /// How often to refresh between notifications (e.g. 500ms).
        #[arg(long, value_parser = format::parse_duration, default_value = "500ms")]
        interval: Duration,
    },
}

/// Arguments of `runs list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Keep runs in these statuses, comma-separated or repeated: pending, running, sleeping,
    /// paused, completed, failed, canceled.
    #[arg(long, short = 's', value_delimiter = ',')]
    pub status: Vec<RunStatus>,
    /// Keep runs of this workflow.
    #[arg(long, short = 'w')]
    pub workflow: Option<String>,
    /// Keep the children of this run (started with `ctx.child` / `ctx.spawn_child`).
    #[arg(long)]
    pub parent: Option<Uuid>,
    /// Runs per page.
    #[arg(long, short = 'l', default_value_t = 20)]
    pub limit: u32,
    /// The page after this cursor (printed as "next" by the previous page).
    #[arg(long, conflicts_with = "before")]
    pub after: Option<Cursor>,
    /// The page before this cursor.
    #[arg(long)]
    pub before: Option<Cursor>,
    /// Oldest first instead of newest first.
    #[arg(long)]
    pub oldest_first: bool,
    /// One JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The finished run to fork.
    pub id: Uuid,
    /// The resolved step name to run again from (as `runs show` lists it).
    #[arg(long)]
    pub from_step: String,
}

/// Arguments of `purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Delete runs that finished longer ago than this (`30d`, `12h`, `90m`), by the
    /// database clock.
    #[arg(long, value_parser = format::parse_duration)]
    pub older_than: Duration,
    /// Only runs in these statuses, comma-separated or repeated: completed, failed,
    /// canceled (default: all three). A live status is refused.
    #[arg(long, short = 's', value_delimiter = ',')]
    pub status: Vec<RunStatus>,
    /// Runs deleted per transaction.
    #[arg(long, default_value_t = crate::store::retention::DEFAULT_PURGE_BATCH)]
    pub batch_size: u32,
}

/// A run id argument.
#[derive(Debug, Args)]
pub struct RunId {
    /// The run id.
    pub id: Uuid,
}

impl TasksArgs {
    /// The database URL: `--database-url` (or `DATABASE_URL`) when set and not empty,
    /// otherwise [`DEFAULT_DATABASE_URL`](crate::DEFAULT_DATABASE_URL).
    pub fn url(&self) -> String {
        self.database_url
            .clone()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| crate::DEFAULT_DATABASE_URL.to_owned())
    }

    /// Connects to [`TasksArgs::url`] (migrating it) and executes the command with a client
    /// that knows every workflow linked into this binary.
    pub async fn execute(&self, out: Output<'_>, err: Output<'_>) -> Exit {
        if let Command::Doctor = self.command {
            return doctor::doctor_url(&self.url(), self.namespace.as_deref(), out, err).await;
        }
        // A verification writes nothing, not even a new binary's migrations.
        let connected = match self.command {
            Command::VerifyReplay(_) => crate::connect_unmigrated(&self.url()).await,
            _ => crate::connect(&self.url()).await,
        };
        let store = match connected {
            Ok(store) => store,
            Err(error) => return connect_failed(&error, err),
        };
        let registry = match Registry::from_inventory() {
            Ok(registry) => registry,
            Err(error) => return fail(err, Exit::Failure, &error),
        };
        let client = Client::with_registry(store, Arc::new(registry));
        self.execute_with(&client, out, err).await
    }

    /// Executes the command on `client`'s store (scoped to `--namespace` if given) and
    /// registry. `migrate` still connects to [`TasksArgs::url`]: a store has no migration
    /// method of its own.
    pub async fn execute_with(&self, client: &Client, out: Output<'_>, err: Output<'_>) -> Exit {
        let client = match &self.namespace {
            Some(namespace) => {
                let store = match client.store().scoped(namespace) {
                    Ok(store) => store,
                    Err(error) => return fail(err, Exit::Usage, &error),
                };
                let registry = commands::copy_registry(client.registry());
                Client::with_registry(store, Arc::new(registry))
            }
            None => client.clone(),
        };
        match &self.command {
            Command::Worker(args) => commands::worker(&client, args, out, err).await,
            Command::Migrate => commands::migrate(&self.url(), out, err).await,
            Command::Workflows(WorkflowsCommand::List { json }) => {
                commands::workflows_list(client.registry(), *json, out)
            }
            Command::Workflows(WorkflowsCommand::Schema { name, version }) => {
                commands::workflow_schema(client.registry(), name, version.as_deref(), out, err)
            }
            Command::Start(args) => commands::start(&client, args, out, err).await,
            Command::Runs(RunsCommand::List(args)) => runs::list(&client, args, out, err).await,
            Command::Runs(RunsCommand::Show { id, json }) => {
                runs::show(&client, *id, *json, out, err).await
            }
            Command::Runs(RunsCommand::State { id, key, json }) => {
                runs::state(&client, *id, key.as_deref(), *json, out, err).await
            }
            Command::Runs(RunsCommand::Watch { id, interval }) => {
                watch::watch(&client, *id, *interval, out, err).await
            }
            Command::Cancel(RunId { id }) => {
                commands::operate(client.cancel(*id).await, "canceled", out, err)
            }
            Command::Pause(RunId { id }) => {
                commands::operate(client.pause(*id).await, "paused", out, err)
            }
            Command::Resume(RunId { id }) => {
                commands::operate(client.resume(*id).await, "resumed", out, err)
            }
            Command::Retry(RunId { id }) => {
                commands::operate(client.retry(*id).await, "retried", out, err)
            }
            Command::Fork(ForkArgs { id, from_step }) => {
                commands::fork(client.fork(*id, from_step).await, *id, out, err)
            }
            Command::Purge(args) => commands::purge(&client, args, out, err).await,
            Command::Doctor => doctor::doctor(&client, None, out).await,
            Command::VerifyReplay(args) => verify::verify_replay(&client, args, out, err).await,
            Command::Events(EventsCommand::Send(args)) => {
                events::send(&client, args, out, err).await
            }
            Command::Events(EventsCommand::SignalWithStart(args)) => {
                events::signal_with_start(&client, args, out, err).await
            }
            Command::Queues(QueuesCommand::List { json }) => {
                queues::list(&client, *json, out, err).await
            }
            #[cfg(feature = "schedules")]
            Command::Schedules(command) => match command {
                SchedulesCommand::List { json } => schedules::list(&client, *json, out, err).await,
                SchedulesCommand::Create(args) => schedules::create(&client, args, out, err).await,
                SchedulesCommand::Pause(ScheduleName { name }) => {
                    let paused = client.pause_schedule(name).await;
                    schedules::operated(paused, name, "paused", out, err)
                }
                SchedulesCommand::Resume(ScheduleName { name }) => {
                    let resumed = client.resume_schedule(name).await;
                    schedules::operated(resumed, name, "resumed", out, err)
                }
                SchedulesCommand::Delete(ScheduleName { name }) => {
                    let deleted = client.delete_schedule(name).await;
                    schedules::operated(deleted, name, "deleted", out, err)
                }
            },
            #[cfg(feature = "dashboard")]
            Command::Dashboard(args) => dashboard::serve(&client, args, out, err).await,
            #[cfg(feature = "http-api")]
            Command::Api(args) => api::serve(&client, args, out, err).await,
        }
    }
}

/// An error and every source under it, on one line.
fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source.map(ToString::to_string) {
        // Transparent wrappers repeat their source's message.
        if !line.ends_with(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
        source = source.and_then(|cause| cause.source());
    }
    line
}

/// Prints `error: ...` and returns `exit`.
fn fail(err: Output<'_>, exit: Exit, error: &(dyn std::error::Error + 'static)) -> Exit {
    let _ = writeln!(err, "error: {}", one_line(error));
    exit
}

/// The exit code of a store error.
fn store_exit(error: &StoreError) -> Exit {
    match error {
        StoreError::RunNotFound { .. }
        | StoreError::StepNotFound { .. }
        | StoreError::RunKeyNotFound { .. }
        | StoreError::UnknownStep { .. }
        | StoreError::ScheduleNotFound { .. } => Exit::NotFound,
        StoreError::WrongState { .. }
        | StoreError::LeaseLost { .. }
        | StoreError::ScheduleExists { .. } => Exit::Failure,
        // Input the store refuses by its limits is invalid input, wherever it surfaces.
        StoreError::InvalidCursor { .. }
        | StoreError::InvalidArgument(_)
        | StoreError::Limit(_)
        | StoreError::NotTerminal { .. } => Exit::Usage,
        _ => Exit::Store,
    }
}

/// Prints a store error and returns its exit code.
fn store_failed(error: &StoreError, err: Output<'_>) -> Exit {
    fail(err, store_exit(error), error)
}

/// Prints a connection error and returns its exit code.
fn connect_failed(error: &ConnectError, err: Output<'_>) -> Exit {
    let exit = match error {
        ConnectError::UnsupportedScheme { .. } | ConnectError::NotCompiled { .. } => Exit::Usage,
        _ => Exit::Store,
    };
    fail(err, exit, error)
}
