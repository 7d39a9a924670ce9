//! Published state: the latest value of each (run, key) and its version, published by a
//! step attempt of kind state in the same write ([`SET_STATE`]); a replay finds the
//! attempt and publishes nothing.

use crate::MemoryStore;
use crate::tables::Space;
use async_trait::async_trait;
use tasks_core::error::{StoreError, StoreResult};
use tasks_core::model::{StepAttempt, StepKind, StepStatus};
use tasks_core::state::{
    PublishedState, SetState, StateSet, next_version, published_output, state_changed,
};
use tasks_core::store::{StateStore, check};
use tasks_core::transition::SET_STATE;
use uuid::Uuid;

/// `Ok` when the run exists in the namespace, else [`StoreError::RunNotFound`].
fn known_run(space: &Space, run_id: Uuid) -> StoreResult<()> {
    if space.runs.contains_key(&run_id) {
        Ok(())
    } else {
        Err(StoreError::RunNotFound { id: run_id })
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        check::set_state(&params)?;
        let worker = Some(&params.holder);
        self.write(|tx| {
            match tx.space.runs.get(&params.run_id) {
                Some(row) if SET_STATE.admits(&row.run, worker) => {}
                current => {
                    let current = current.map(|row| &row.run);
                    return Err(SET_STATE.miss(params.run_id, worker, current));
                }
            }
            if let Some(attempt) =
                tx.space
                    .last_step(params.run_id, &params.step_name, StepKind::State)
            {
                return Ok(StateSet {
                    attempt: attempt.clone(),
                    published: false,
                });
            }
            let now = tx.now;
            let slot = (params.run_id, params.key.clone());
            let version = next_version(tx.space.state.get(&slot).map(|state| state.version));
            tx.space.state.insert(
                slot,
                PublishedState {
                    run_id: params.run_id,
                    key: params.key.clone(),
                    value: params.value.clone(),
                    version,
                    updated_at: now,
                },
            );
            let attempt = StepAttempt {
                namespace: tx.namespace.to_owned(),
                id: Uuid::now_v7(),
                workflow_run_id: params.run_id,
                step_name: params.step_name.clone(),
                kind: StepKind::State,
                status: StepStatus::Completed,
                config: params.config(),
                context: None,
                output: Some(published_output(version)),
                error: None,
                args: None,
                child_workflow_run_namespace: None,
                child_workflow_run_id: None,
                started_at: Some(now),
                finished_at: Some(now),
                created_at: now,
                updated_at: now,
            };
            tx.space.steps.insert(attempt.id, attempt.clone());
            let namespace = tx.namespace;
            tx.notes.push(state_changed(
                namespace,
                params.run_id,
                &params.key,
                version,
            ));
            Ok(StateSet {
                attempt,
                published: true,
            })
        })
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        check::get_state(key)?;
        self.read(|space| match space.state.get(&(run_id, key.to_owned())) {
            Some(state) => Ok(Some(state.clone())),
            None => known_run(space, run_id).map(|()| None),
        })
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        self.read(|space| {
            // By key: the map is ordered by (run, key).
            let found: Vec<PublishedState> = space
                .state
                .range((run_id, String::new())..)
                .take_while(|((run, _), _)| *run == run_id)
                .map(|(_, state)| state.clone())
                .collect();
            if found.is_empty() {
                known_run(space, run_id)?;
            }
            Ok(found)
        })
    }
}
