//! A stored step row that does not decode, written behind the store's back with SQL, is a
//! typed error naming the run, the attempt, its step and the column at every read: the
//! step history, a page of attempts, one attempt, the command line and the dashboard.
//!
//! SQL stores only (`sql:` in `every_store!`): the in-memory store keeps every attempt as a
//! decoded `StepAttempt` value, written only through its own methods, so it holds no row it
//! cannot read and there is nothing behind it to corrupt.

use crate::browser::http;
use crate::support;

use std::time::Duration;

use support::{Backend, Pool, TestStore, client, worker};
use tasks::cli::clap::Parser as _;
use tasks::cli::{Cli, Exit};
use tasks::dashboard::Dashboard;
use tasks::{ListStepAttempts, StoreError, WorkflowContext, WorkflowError, step, workflow};
use uuid::Uuid;

#[step]
async fn corruptible(n: u32) -> Result<u32, std::io::Error> {
    Ok(n * 2)
}

/// One step, whose row the test then corrupts.
#[workflow(name = "corrupt-probe")]
async fn probe(_ctx: WorkflowContext, n: u32) -> Result<u32, WorkflowError> {
    Ok(corruptible(n).await?)
}

/// One way to corrupt a step row, and the column it leaves undecodable.
#[derive(Debug, Clone, Copy)]
enum Corruption {
    /// JSON nested deeper than the decoder reads (valid `jsonb` on Postgres), or text that
    /// is not JSON (SQLite).
    Output,
    /// Postgres: the arguments nested too deep. SQLite: a blob where the text of the
    /// JSON config belongs (SQLite keeps any type in any column).
    ConfigOrArgs,
    /// SQLite: a creation time that is not a timestamp.
    CreatedAt,
    /// SQLite: a status this version does not know (as a newer version could write), past
    /// the CHECK constraint.
    Status,
}

impl Corruption {
    fn of(backend: Backend) -> &'static [Corruption] {
        match backend {
            Backend::Postgres => &[Corruption::Output, Corruption::ConfigOrArgs],
            Backend::Sqlite => &[
                Corruption::Output,
                Corruption::ConfigOrArgs,
                Corruption::CreatedAt,
                Corruption::Status,
            ],
            Backend::Memory => unreachable!("the in-memory store holds no stored rows"),
        }
    }

    fn column(self, backend: Backend) -> &'static str {
        match (self, backend) {
            (Corruption::Output, _) => "output",
            (Corruption::ConfigOrArgs, Backend::Postgres) => "args",
            (Corruption::ConfigOrArgs, _) => "config",
            (Corruption::CreatedAt, _) => "created_at",
            (Corruption::Status, _) => "status",
        }
    }

    /// Writes the corruption into step attempt `step_id`.
    async fn apply(self, store: &TestStore, step_id: Uuid) {
        let namespace = store.namespace().to_owned();
        let updated = match store.pool() {
            Pool::Postgres(pool) => {
                let sql = match self {
                    Corruption::Output => {
                        "UPDATE tasks.step_attempts
                            SET output = (repeat('[', 200) || repeat(']', 200))::jsonb
                          WHERE namespace = $1 AND id = $2"
                    }
                    Corruption::ConfigOrArgs => {
                        "UPDATE tasks.step_attempts
                            SET args = (repeat('[', 200) || repeat(']', 200))::jsonb
                          WHERE namespace = $1 AND id = $2"
                    }
                    other => unreachable!("{other:?} is not written on Postgres"),
                };
                sqlx::query(sql)
                    .bind(namespace)
                    .bind(step_id)
                    .execute(pool)
                    .await
                    .unwrap()
                    .rows_affected()
            }
            Pool::Sqlite(pool) => {
                let sql = match self {
                    Corruption::Output => {
                        "UPDATE tasks_step_attempts SET output = '{not json'
                          WHERE namespace = ?1 AND id = ?2"
                    }
                    Corruption::ConfigOrArgs => {
                        "UPDATE tasks_step_attempts SET config = x'00ff'
                          WHERE namespace = ?1 AND id = ?2"
                    }
                    Corruption::CreatedAt => {
                        "UPDATE tasks_step_attempts SET created_at = 'yesterday'
                          WHERE namespace = ?1 AND id = ?2"
                    }
                    Corruption::Status => {
                        "UPDATE tasks_step_attempts SET status = 'exploded'
                          WHERE namespace = ?1 AND id = ?2"
                    }
                };
                let mut connection = pool.acquire().await.unwrap();
                sqlx::query("PRAGMA ignore_check_constraints = ON")
                    .execute(&mut *connection)
                    .await
                    .unwrap();
                let updated = sqlx::query(sql)
                    .bind(namespace)
                    .bind(step_id.hyphenated().to_string())
                    .execute(&mut *connection)
                    .await
                    .unwrap()
                    .rows_affected();
                sqlx::query("PRAGMA ignore_check_constraints = OFF")
                    .execute(&mut *connection)
                    .await
                    .unwrap();
                updated
            }
        };
        assert_eq!(updated, 1, "step attempt {step_id} not found to corrupt");
    }
}

/// The error must be the typed one, naming this run, attempt, step and column.
fn assert_names_the_row(
    result: Result<impl std::fmt::Debug, StoreError>,
    run: Uuid,
    step: Uuid,
    column: &str,
    read: &str,
) {
    match result {
        Err(StoreError::CorruptStep {
            run_id,
            step_id,
            step_name,
            column: named,
            ..
        }) => {
            assert_eq!(run_id, run, "{read}");
            assert_eq!(step_id, step, "{read}");
            assert_eq!(step_name, "corruptible", "{read}");
            assert_eq!(named, column, "{read}");
        }
        other => panic!("{read}: expected a corrupt step naming column {column}, got {other:?}"),
    }
}

async fn cli(client: &tasks::Client, args: &[&str]) -> (Exit, String, String) {
    let args = std::iter::once("tasks").chain(args.iter().copied());
    let cli = Cli::try_parse_from(args).unwrap_or_else(|error| panic!("{error}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cli.tasks.execute_with(client, &mut out, &mut err).await;
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Every read of a corrupted step row, through the client, the store, the command line and
/// the dashboard, gives the typed error of that row; what else the run holds still shows.
async fn every_read_of_a_corrupt_step_row_names_it(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    let corruptions = Corruption::of(backend);
    let mut handles = Vec::new();
    for n in 0..corruptions.len() {
        handles.push(probe::start(&client, n as u32).await.unwrap());
    }
    for handle in &handles {
        handle.result_within(Duration::from_secs(20)).await.unwrap();
    }
    worker.shutdown().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Dashboard::new(client.clone()).router();
    tokio::spawn(async move { tasks::dashboard::axum::serve(listener, router).await });

    for (handle, corruption) in handles.iter().zip(corruptions) {
        let run = handle.id();
        let steps = handle.steps().await.unwrap();
        assert_eq!(steps.len(), 1, "{steps:?}");
        let step = steps[0].id;
        corruption.apply(&store, step).await;
        let column = corruption.column(backend);
        let case = format!("{backend:?} {corruption:?}");

        assert_names_the_row(
            handle.steps().await,
            run,
            step,
            column,
            &format!("{case}: step history"),
        );
        assert_names_the_row(
            client.list_steps(ListStepAttempts::new(run)).await,
            run,
            step,
            column,
            &format!("{case}: page of attempts"),
        );
        assert_names_the_row(
            store.get_step_attempt(step).await,
            run,
            step,
            column,
            &format!("{case}: one attempt"),
        );
        // The run's own row still reads.
        assert!(client.get_run(run).await.unwrap().is_some());

        let (exit, out, err) = cli(&client, &["runs", "show", &run.to_string()]).await;
        assert_eq!(exit, Exit::Store, "{case}: {out}{err}");
        assert!(
            out.contains(&run.to_string()),
            "{case}: the run is shown: {out}"
        );
        assert!(out.contains("completed"), "{case}: the run is shown: {out}");
        assert!(out.contains("steps cannot be shown"), "{case}: {out}");
        for named in [
            &run.to_string(),
            &step.to_string(),
            "corruptible",
            &format!("column `{column}`"),
        ] {
            assert!(err.contains(named), "{case}: {named} not in {err}");
        }
        let (exit, out, err) = cli(&client, &["runs", "show", &run.to_string(), "--json"]).await;
        assert_eq!(exit, Exit::Store, "{case}: {out}{err}");
        let document: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(document["run"]["id"], run.to_string(), "{case}: {out}");
        assert!(document["steps"].is_null(), "{case}: {out}");
        assert!(err.contains(&format!("column `{column}`")), "{case}: {err}");

        let (status, _, page) = http(addr, &format!("GET /run?id={run} HTTP/1.1\r\n"), "").await;
        assert_eq!(status, 200, "{case}: {page}");
        assert!(page.contains("id=\"steps-unreadable\""), "{case}: {page}");
        for named in [
            &step.to_string(),
            "corruptible",
            &format!("column `{column}`"),
        ] {
            assert!(page.contains(named), "{case}: {named} not in the page");
        }
    }
}

every_store! { ; sql: every_read_of_a_corrupt_step_row_names_it }
