//! The error types applications actually write: `Box<dyn Error + Send + Sync>`, `anyhow::Error`
//! (the `anyhow` feature), `WorkflowError`, `std::io::Error` and `std::error::Error` types, in
//! steps and workflows (a step's own error type derives `Serialize + Deserialize`, so that its
//! final error replays; a workflow's needs nothing more); and an old, `#[deprecated]` version,
//! whose generated code must not warn.
#![deny(deprecated)]

use std::error::Error;

use tasks::{RecordError, WorkflowContext, WorkflowError, step, workflow};

type BoxError = Box<dyn Error + Send + Sync>;

#[step]
async fn parse_boxed(text: String) -> Result<u32, BoxError> {
    Ok(text.parse::<u32>()?)
}

#[step]
async fn parse_anyhow(text: String) -> Result<u32, anyhow::Error> {
    use anyhow::Context as _;
    text.parse::<u32>().context("not a count")
}

/// A step's own error type: replayed as an equal value.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct NotANumber(String);

impl std::fmt::Display for NotANumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a number: {}", self.0)
    }
}

impl std::error::Error for NotANumber {}

#[step]
async fn parse_std(text: String) -> Result<u32, NotANumber> {
    text.parse().map_err(|_| NotANumber(text))
}

#[step]
async fn parse_io(text: String) -> Result<u32, std::io::Error> {
    text.parse().map_err(std::io::Error::other)
}

/// A workflow's error type needs no serde: it is only recorded.
#[derive(Debug)]
struct Plain;

impl std::fmt::Display for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("plain")
    }
}

impl std::error::Error for Plain {}

#[workflow]
async fn plain(_ctx: WorkflowContext, text: String) -> Result<u32, Plain> {
    parse_io(text).await.map_err(|_| Plain)
}

#[workflow]
async fn boxed(_ctx: WorkflowContext, text: String) -> Result<u32, BoxError> {
    Ok(parse_boxed(text.clone()).await? + parse_std(text).await?)
}

#[workflow]
async fn with_anyhow(_ctx: WorkflowContext, text: String) -> Result<u32, anyhow::Error> {
    Ok(parse_anyhow(text.clone()).await? + parse_std(text).await?)
}

#[workflow]
async fn mixed(_ctx: WorkflowContext, text: String) -> Result<u32, WorkflowError> {
    let boxed = parse_boxed(text.clone())
        .await
        .map_err(WorkflowError::from_boxed)?;
    let anyhow = parse_anyhow(text)
        .await
        .map_err(|error| WorkflowError::from_boxed(error.into()))?;
    Ok(boxed + anyhow)
}

#[deprecated = "version 1 only finishes the runs in flight; start version 2"]
#[workflow(name = "signup", version = "1")]
async fn signup_v1(_ctx: WorkflowContext, email: String) -> Result<String, WorkflowError> {
    Ok(email)
}

#[workflow(name = "signup", version = "2")]
async fn signup_v2(_ctx: WorkflowContext, email: String) -> Result<String, WorkflowError> {
    Ok(email.to_lowercase())
}

fn record<V, E: RecordError<V>>(error: &E) -> tasks::ErrorRecord {
    error.to_record()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Outside a run, steps are plain calls: their errors are the user's own types.
    assert_eq!(parse_boxed("7".into()).await.unwrap(), 7);
    let boxed_error = parse_boxed("x".into()).await.unwrap_err();
    assert_eq!(
        record(&boxed_error).message,
        "invalid digit found in string"
    );

    let anyhow_error = parse_anyhow("x".into()).await.unwrap_err();
    let recorded = record(&anyhow_error);
    assert_eq!(recorded.message, "not a count");
    assert_eq!(recorded.sources, ["invalid digit found in string"]);

    // And through a real run, on SQLite.
    let store = tasks::sqlite::SqliteStore::connect("sqlite::memory:")
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let worker = tasks::Worker::builder(store.clone())
        .build()
        .unwrap()
        .spawn();
    let client = tasks::Client::new(store).unwrap();

    assert_eq!(
        boxed::start(&client, "20".into())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        40
    );
    assert_eq!(
        with_anyhow::start(&client, "1".into())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        plain::start(&client, "2".into())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        mixed::start(&client, "3".into())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        6
    );
    match with_anyhow::start(&client, "x".into())
        .await
        .unwrap()
        .result()
        .await
    {
        Err(tasks::RunError::Failed { error, .. }) => {
            assert!(error.message.contains("not a count"), "{error}");
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
    #[allow(deprecated)]
    let old = signup_v1::start(&client, "A@B".into()).await.unwrap();
    assert_eq!(old.result().await.unwrap(), "A@B");
    assert_eq!(
        signup_v2::start(&client, "A@B".into())
            .await
            .unwrap()
            .result()
            .await
            .unwrap(),
        "a@b"
    );
    worker.shutdown().await;
}
