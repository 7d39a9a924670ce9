//! The commands that act once: worker, migrate, workflows, start, cancel/pause/resume/retry,
//! fork, purge.

use std::io::Read as _;

use crate::uuid::Uuid;
use serde_json::{Value, json};

use super::{Exit, Output, StartArgs, WorkerArgs, connect_failed, fail, format, store_failed};
use crate::{Client, ClientError, Registry, StartOptions, StoreError, Worker, WorkflowRun};

/// The same definitions in a new registry (a registry is not `Clone`).
pub(super) fn copy_registry(registry: &Registry) -> Registry {
    let mut copy = Registry::new();
    for definition in registry.iter() {
        // The definitions come from a registry, so they cannot be duplicates.
        let _ = copy.add(definition);
    }
    copy
}

pub(super) async fn worker(
    client: &Client,
    args: &WorkerArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let worker = Worker::builder(client.store().clone())
        .registry(copy_registry(client.registry()))
        .concurrency(args.concurrency)
        .shutdown_grace(args.shutdown_grace)
        .build();
    let worker = match worker {
        Ok(worker) => worker,
        Err(error) => return fail(err, Exit::Usage, &error),
    };
    #[cfg(feature = "prometheus")]
    let _metrics = match args.metrics_bind {
        Some(bind) => match serve_metrics(client, bind, out, err).await {
            Ok(serving) => Some(serving),
            Err(exit) => return exit,
        },
        None => None,
    };
    let names: Vec<String> = worker
        .registry()
        .iter()
        .map(|definition| definition.display_name())
        .collect();
    let _ = writeln!(
        out,
        "worker {} executing {} workflow(s) [{}] in namespace {:?}, concurrency {}; Ctrl-C stops it",
        worker.id(),
        names.len(),
        names.join(", "),
        client.store().namespace(),
        args.concurrency
    );
    let _ = out.flush();
    match worker.run_until_ctrl_c().await {
        Ok(()) => {
            let _ = writeln!(out, "worker {} stopped", worker.id());
            Exit::Success
        }
        Err(error) => fail(err, Exit::Failure, &error),
    }
}

/// The metrics endpoint of `worker --metrics-bind`; stops when dropped.
#[cfg(feature = "prometheus")]
struct MetricsServer(tokio::task::JoinHandle<()>);

#[cfg(feature = "prometheus")]
impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Installs the Prometheus recorder and serves it at `http://bind/metrics` for the client's
/// namespace. A recorder that cannot be installed is exit 1, an address that cannot be
/// bound exit 2.
#[cfg(feature = "prometheus")]
async fn serve_metrics(
    client: &Client,
    bind: std::net::SocketAddr,
    out: Output<'_>,
    err: Output<'_>,
) -> Result<MetricsServer, Exit> {
    let prometheus = match crate::metrics::Prometheus::install() {
        Ok(prometheus) => prometheus,
        Err(error) => return Err(fail(err, Exit::Failure, &error)),
    };
    let listener = match tokio::net::TcpListener::bind(bind).await {
        Ok(listener) => listener,
        Err(error) => {
            let _ = writeln!(err, "error: cannot listen on {bind}: {error}");
            return Err(Exit::Usage);
        }
    };
    let address = listener.local_addr().unwrap_or(bind);
    let router = prometheus.router(client.store().clone());
    let task = tokio::spawn(async move {
        if let Err(error) = crate::metrics::axum::serve(listener, router).await {
            tracing::error!(%error, "the metrics endpoint stopped");
        }
    });
    let _ = writeln!(out, "metrics on http://{address}/metrics");
    Ok(MetricsServer(task))
}

pub(super) async fn migrate(url: &str, out: Output<'_>, err: Output<'_>) -> Exit {
    match crate::connect(url).await {
        Ok(_) => {
            let _ = writeln!(out, "the database schema is up to date");
            Exit::Success
        }
        Err(error) => connect_failed(&error, err),
    }
}

pub(super) fn workflows_list(registry: &Registry, json: bool, out: Output<'_>) -> Exit {
    if json {
        let workflows: Vec<Value> = registry
            .iter()
            .map(|definition| {
                json!({
                    "name": definition.name,
                    "version": definition.version,
                    "description": definition.description,
                })
            })
            .collect();
        let _ = writeln!(out, "{}", Value::Array(workflows));
        return Exit::Success;
    }
    let rows: Vec<Vec<String>> = registry
        .iter()
        .map(|definition| {
            vec![
                definition.name.to_owned(),
                definition.version.unwrap_or("-").to_owned(),
                definition
                    .description
                    .and_then(|text| text.lines().map(str::trim).find(|l| !l.is_empty()))
                    .unwrap_or("")
                    .to_owned(),
            ]
        })
        .collect();
    if rows.is_empty() {
        let _ = writeln!(out, "no workflows are linked into this binary");
    } else {
        let _ = write!(
            out,
            "{}",
            format::table(&["NAME", "VERSION", "DESCRIPTION"], &rows)
        );
    }
    Exit::Success
}

pub(super) fn workflow_schema(
    registry: &Registry,
    name: &str,
    version: Option<&str>,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let definition = match version {
        Some(version) => registry.get(name, Some(version)),
        None => registry.latest(name),
    };
    let Some(definition) = definition else {
        let error = ClientError::UnknownWorkflow {
            name: name.to_owned(),
            version: version.map(str::to_owned),
        };
        return fail(err, Exit::NotFound, &error);
    };
    let document = json!({
        "name": definition.name,
        "version": definition.version,
        "input": (definition.input_schema)(),
        "output": (definition.output_schema)(),
    });
    let text = serde_json::to_string_pretty(&document).unwrap_or_else(|_| document.to_string());
    let _ = writeln!(out, "{text}");
    Exit::Success
}

/// The `--input` argument as JSON text: literal, `@file` or `@-` (standard input).
pub(super) fn input_text(input: &str) -> std::io::Result<String> {
    match input.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text)?;
            Ok(text)
        }
        Some(path) => std::fs::read_to_string(path),
        None => Ok(input.to_owned()),
    }
}

pub(super) async fn start(
    client: &Client,
    args: &StartArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let input = match input_json(&args.input, err) {
        Ok(input) => input,
        Err(exit) => return exit,
    };
    let mut options = StartOptions::new();
    if let Some(version) = &args.version {
        options = options.version(version);
    }
    if let Some(key) = &args.idempotency_key {
        options = options.idempotency_key(key);
    }
    if let Some(delay) = args.delay {
        options = options.delay(delay);
    }
    match client
        .start_by_name(&args.name, input)
        .options(options)
        .await
    {
        Ok(handle) => {
            if args.quiet {
                let _ = writeln!(out, "{}", handle.id());
            } else {
                let workflow = match &args.version {
                    Some(version) => format!("{}@{version}", args.name),
                    None => client
                        .registry()
                        .latest(&args.name)
                        .map_or_else(|| args.name.clone(), |d| d.display_name()),
                };
                let _ = writeln!(out, "started run {} of {workflow}", handle.id());
            }
            Exit::Success
        }
        Err(error) => start_failed(error, err),
    }
}

/// Prints why a start (or a schedule's check of its input) was refused, and returns the
/// exit code: every violation of an invalid input on a line of its own.
pub(super) fn start_failed(error: ClientError, err: Output<'_>) -> Exit {
    match error {
        ClientError::InvalidInput(invalid) => {
            let _ = writeln!(
                err,
                "error: invalid input for workflow {} ({} violation{}); nothing was stored",
                invalid.workflow,
                invalid.violations.len(),
                if invalid.violations.len() == 1 {
                    ""
                } else {
                    "s"
                }
            );
            for violation in &invalid.violations {
                let _ = writeln!(err, "  {violation}");
            }
            Exit::Usage
        }
        error @ ClientError::UnknownWorkflow { .. } => fail(err, Exit::NotFound, &error),
        ClientError::Store(error) => store_failed(&error, err),
        error @ (ClientError::Json(_) | ClientError::Limit(_)) => fail(err, Exit::Usage, &error),
        error => fail(err, Exit::Failure, &error),
    }
}

/// The JSON of an `--input`-style argument (literal, `@file` or `@-`); a usage error, printed,
/// when it cannot be read or is not JSON.
pub(super) fn input_json(arg: &str, err: Output<'_>) -> Result<Value, Exit> {
    json_arg("input", arg, err)
}

/// [`input_json`] for any argument of that form, named `what` ("input", "payload") in the
/// errors.
pub(super) fn json_arg(what: &str, arg: &str, err: Output<'_>) -> Result<Value, Exit> {
    let text = match input_text(arg) {
        Ok(text) => text,
        Err(error) => {
            let _ = writeln!(err, "error: cannot read the {what} {arg}: {error}");
            return Err(Exit::Usage);
        }
    };
    serde_json::from_str(&text).map_err(|error| {
        let _ = writeln!(err, "error: the {what} is not valid JSON: {error}");
        Exit::Usage
    })
}

/// Reports the outcome of fork: the new run.
pub(super) fn fork(
    result: Result<WorkflowRun, StoreError>,
    source: Uuid,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    match result {
        Ok(run) => {
            let step = run.forked_from_step.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "run {} forked from {source} at step {step}: now {}",
                run.id, run.status
            );
            Exit::Success
        }
        Err(error) => store_failed(&error, err),
    }
}

/// Deletes the finished runs `args` selects and prints how many.
pub(super) async fn purge(
    client: &Client,
    args: &super::PurgeArgs,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    let params = crate::PurgeRuns::older_than(args.older_than)
        .statuses(args.status.iter().copied())
        .batch_size(args.batch_size);
    match client.purge(params).await {
        Ok(purged) => {
            let _ = writeln!(out, "purged {purged} finished runs");
            Exit::Success
        }
        Err(error) => store_failed(&error, err),
    }
}

/// Reports the outcome of cancel, pause, resume or retry.
pub(super) fn operate(
    result: Result<WorkflowRun, StoreError>,
    done: &str,
    out: Output<'_>,
    err: Output<'_>,
) -> Exit {
    match result {
        Ok(run) => {
            let _ = writeln!(out, "run {} {done}: now {}", run.id, run.status);
            Exit::Success
        }
        Err(error) => store_failed(&error, err),
    }
}
