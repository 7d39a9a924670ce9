//! Names chosen at run time never collide with the call-order suffix, on both stores.
//!
//! Calls of one name resolve in call order as `name`, `name:1`, `name:2`, ... A name a
//! workflow or a client chooses at run time (a sleep's name, an event topic, a published
//! state's key, a child step's name) with a `:` could be another call's suffixed name: a
//! wait on topic `ping:1` after two waits on `ping` would be `event/ping:1` twice. Such a
//! name is refused with a typed limit error before anything is written.

use crate::support;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::{Backend, client, worker};
use tasks::limits::{Field, LimitError};
use tasks::{
    ChildOptions, ClientError, RunError, StepKind, WorkflowContext, WorkflowError, workflow,
};

/// Which kind of call repeats a name, then takes the suffixed name itself.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
enum Repeat {
    Sleep,
    Event,
    State,
    Child,
}

#[workflow(name = "call-names-child")]
async fn named_child(_ctx: WorkflowContext, _input: ()) -> Result<(), WorkflowError> {
    Ok(())
}

/// Two calls of a plain name, then one of the name the second call resolved to.
#[workflow(name = "call-names-repeat")]
async fn repeat(ctx: WorkflowContext, kind: Repeat) -> Result<(), WorkflowError> {
    let names = ["nap", "nap", "nap:1"];
    for name in names {
        match kind {
            Repeat::Sleep => ctx.sleep(name, Duration::from_millis(1)).await?,
            Repeat::Event => {
                ctx.wait_for_event_json(name, Some(Duration::from_millis(1)))
                    .await?;
            }
            Repeat::State => ctx.set_state(name, &1).await?,
            Repeat::Child => {
                let options = ChildOptions::new().name(format!("child/{name}"));
                let child = ctx
                    .spawn_child_with::<named_child>((), options)
                    .await
                    .map_err(|error| WorkflowError::msg(error.to_string()))?;
                ctx.join(&child)
                    .await
                    .map_err(|error| WorkflowError::msg(error.to_string()))?;
            }
        }
    }
    Ok(())
}

async fn a_chosen_name_with_the_suffix_separator_fails_the_run_before_it_is_written(
    backend: Backend,
) {
    let store = backend.store().await;
    let client = client(&store);
    let worker = worker(&store).build().unwrap().spawn();
    for (kind, step_kind) in [
        (Repeat::Sleep, StepKind::Sleep),
        (Repeat::Event, StepKind::Event),
        (Repeat::State, StepKind::State),
        (Repeat::Child, StepKind::Child),
    ] {
        let run = repeat::start(&client, kind).await.unwrap();
        match run.result_within(Duration::from_secs(30)).await {
            Err(RunError::Failed { error, .. }) => {
                assert_eq!(error.kind.as_deref(), Some("limit"), "{kind:?}: {error}");
                assert!(error.message.contains("reserved"), "{kind:?}: {error}");
                assert!(!error.retryable, "{kind:?}: {error}");
            }
            other => panic!("{kind:?}: expected a failed run, got {other:?}"),
        }
        // The two plain calls were recorded, under `name` and `name:1`; the third, whose
        // name would have been the second's, wrote nothing.
        let steps: Vec<String> = run
            .steps()
            .await
            .unwrap()
            .into_iter()
            .filter(|step| step.kind == step_kind)
            .map(|step| step.step_name)
            .collect();
        assert_eq!(steps.len(), 2, "{kind:?}: {steps:?}");
        assert!(
            steps
                .iter()
                .all(|name| name.ends_with("nap") || name.ends_with("nap:1")),
            "{kind:?}: {steps:?}"
        );
        assert_ne!(steps[0], steps[1], "{kind:?}: {steps:?}");
    }
    worker.shutdown().await;
}

async fn a_client_refuses_a_topic_or_key_with_the_suffix_separator(backend: Backend) {
    let store = backend.store().await;
    let client = client(&store);
    let run = repeat::start(&client, Repeat::State).await.unwrap();
    let sent = client
        .send_event_by_topic(run.id(), "ping:1", serde_json::json!(1))
        .await;
    assert!(
        matches!(
            sent,
            Err(ClientError::Limit(LimitError::InvalidName {
                field: Field::Topic,
                ..
            }))
        ),
        "{sent:?}"
    );
    let read = client.get_state_json(run.id(), "x:1").await;
    assert!(
        matches!(
            read,
            Err(ClientError::Limit(LimitError::InvalidName {
                field: Field::StateKey,
                ..
            }))
        ),
        "{read:?}"
    );
    assert!(
        run.steps().await.unwrap().is_empty(),
        "nothing ran or was written"
    );
}

every_store!(
    a_chosen_name_with_the_suffix_separator_fails_the_run_before_it_is_written,
    a_client_refuses_a_topic_or_key_with_the_suffix_separator,
);
