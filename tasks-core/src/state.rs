//! Published state of a run: values a running workflow publishes under a key
//! (`ctx.set_state("progress", &value)`) and clients read or wait on
//! (`client.get_state`, `client.wait_for_state`), and the parameters and outcomes of the store
//! operations [`StateStore::set_state`],
//! [`StateStore::get_state`] and
//! [`StateStore::list_state`].
//!
//! Each (run, key) holds its latest value and a version that grows by one with every
//! publication, from 1. A publication is a step attempt of kind
//! [`StepKind::State`], named `state/{key}` (then `state/{key}:1`,
//! ... in call order), recorded completed in the same transaction as the new value and
//! fenced on the run's lease: a replay finds the attempt and publishes nothing, so a value
//! published earlier in the workflow never overwrites a later one.

#[cfg(doc)]
use crate::{StepKind, StoreError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::StoreResult;
use crate::holder::Holder;
use crate::limits::{self, Field, LimitError};
use crate::model::StepAttempt;
use crate::store::notify::Notification;

/// A published value of a run, as stored: `T` is [`Value`] at the store, the value's own
/// type through the typed client API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedState<T = Value> {
    /// The run that published it.
    pub run_id: Uuid,
    /// Its key.
    pub key: String,
    /// The latest value.
    pub value: T,
    /// How many times the key was published: 1 for the first value, growing by one with
    /// every publication. A client waits for a version greater than the one it has seen.
    pub version: u64,
    /// When the latest value was published, by the store's clock.
    pub updated_at: DateTime<Utc>,
}

impl PublishedState<Value> {
    /// The same state with its value decoded into `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(
        self,
    ) -> Result<PublishedState<T>, serde_json::Error> {
        Ok(PublishedState {
            value: serde_json::from_value(self.value)?,
            run_id: self.run_id,
            key: self.key,
            version: self.version,
            updated_at: self.updated_at,
        })
    }
}

/// Parameters of [`StateStore::set_state`].
#[derive(Debug, Clone)]
pub struct SetState {
    /// The run, which must be running under `holder`'s claim.
    pub run_id: Uuid,
    /// The claim that must hold the run's lease.
    pub holder: Holder,
    /// The resolved step name of the publication (`state/{key}`, `state/{key}:1`, ...).
    pub step_name: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// The publication's place in the run (`{"position": ..}`), recorded in its attempt's
    /// config under `call` and compared on replay; `None` records none.
    pub call: Option<Value>,
}

impl SetState {
    /// Checks the holder's worker id, the step name, the key and the value against the [`limits`]. A store
    /// reaches it through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self) -> Result<(), LimitError> {
        limits::check_worker_id(&self.holder.worker_id)?;
        limits::check_step_name(&self.step_name)?;
        limits::check_state_key(&self.key)?;
        limits::check_json(Field::StateValue, &self.value)?;
        Ok(())
    }

    /// The config of the publication's step attempt: its key.
    pub fn config(&self) -> Value {
        let mut config = json!({ "key": self.key });
        if let Some(call) = &self.call {
            config["call"] = call.clone();
        }
        config
    }
}

/// The outcome of [`StateStore::set_state`].
#[derive(Debug, Clone, PartialEq)]
pub struct StateSet {
    /// The publication's step attempt, completed; its output is `{"version": n}`.
    pub attempt: StepAttempt,
    /// The value was published by this call. `false`: the step had been recorded before (a
    /// replay, or a retried write that had gone through), and nothing was written.
    pub published: bool,
}

/// The output of the step attempt of a publication that gave the key version `version`.
pub fn published_output(version: u64) -> Value {
    json!({ "version": version })
}

/// What [`StateStore::set_state`] announces once the publication
/// committed: [`Notification::StateChanged`].
pub fn state_changed(namespace: &str, run_id: Uuid, key: &str, version: u64) -> Notification {
    Notification::StateChanged {
        namespace: namespace.to_owned(),
        run_id,
        key: key.to_owned(),
        version,
    }
}

/// A stored version (a SQL integer) as the API's `u64`.
pub fn version_of(stored: i64) -> u64 {
    u64::try_from(stored).unwrap_or(0)
}

/// Published state (see the module docs). A capability: reached through
/// [`Store::published_state`](crate::Store::published_state).
#[async_trait::async_trait]
pub trait StateStore: Send + Sync {
    /// The publication `params.step_name` of a value under `params.key` by a run that
    /// `params.holder` holds, in one transaction that first locks the run, fenced
    /// on that lease: records the step attempt (kind [`StepKind::State`], completed, with
    /// the key in its config and `{"version": n}` as output) and makes `params.value` the
    /// latest value of (run, key), with version `n` one more than the key's last (1 for
    /// the first), and the store's clock as `updated_at`; once committed it announces
    /// [`Notification::StateChanged`]. When the run already has an attempt named
    /// `params.step_name`, nothing is written and that attempt is returned (`published`
    /// false): a replay never publishes a value again.
    ///
    /// Errors: the limit errors of [`SetState::check`]; worker-side errors. Nothing is
    /// written then.
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet>;

    /// The latest value the run published under `key`, or `None` when it published none.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run; a [`StoreError::Limit`] for
    /// a key the limits refuse.
    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>>;

    /// The latest value of every key the run published, by key.
    ///
    /// Errors: [`StoreError::RunNotFound`] for an unknown run.
    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>>;
}

/// The version a publication gives a key whose last version is `last` (`None`: never
/// published): one more, from 1.
pub fn next_version(last: Option<u64>) -> u64 {
    last.map_or(1, |last| last.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_refuse_before_any_sql() {
        let set = SetState {
            call: None,
            run_id: Uuid::now_v7(),
            holder: crate::Holder::new("w", 1),
            step_name: "state/k".into(),
            key: "k".repeat(limits::MAX_TOPIC_BYTES + 1),
            value: json!(1),
        };
        assert_eq!(set.check().unwrap_err().field(), Field::StateKey);
        let set = SetState {
            call: None,
            key: "k".into(),
            value: json!("\0"),
            ..set
        };
        assert_eq!(set.check().unwrap_err().field(), Field::StateValue);
    }

    #[test]
    fn decodes_the_value() {
        let state = PublishedState {
            run_id: Uuid::now_v7(),
            key: "progress".into(),
            value: json!({ "done": 3 }),
            version: 2,
            updated_at: Utc::now(),
        };
        #[derive(Deserialize, Debug, PartialEq)]
        struct Progress {
            done: u32,
        }
        let typed = state.clone().decode::<Progress>().unwrap();
        assert_eq!(typed.value, Progress { done: 3 });
        assert_eq!(typed.version, 2);
        assert!(state.decode::<String>().is_err());
    }

    #[test]
    fn versions_grow_by_one_from_one() {
        assert_eq!(next_version(None), 1);
        assert_eq!(next_version(Some(1)), 2);
        assert_eq!(next_version(Some(u64::MAX)), u64::MAX);
    }
}
