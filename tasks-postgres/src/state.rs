//! Published state, on Postgres: the SQL of [`StateStore::set_state`], [`StateStore::get_state`] and
//! [`StateStore::list_state`]. The policy (the lease fence) is `transition.rs`'s [`SET_STATE`].
//!
//! A publication locks the run row first (`SELECT .. FOR UPDATE`), so publications of one
//! run serialize with each other and with every other write of the run: the version of a
//! key grows by exactly one per publication, and a replayed step finds the attempt its
//! first execution committed.
//!
//! [`StateStore::set_state`]: tasks_core::StateStore::set_state
//! [`StateStore::get_state`]: tasks_core::StateStore::get_state
//! [`StateStore::list_state`]: tasks_core::StateStore::list_state

use crate::PgStore;
use crate::reconnect::{db, retrying};
use crate::rows::{STEP_COLUMNS, StepRow};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::events::EventTarget;
use tasks_core::model::StepKind;
use tasks_core::state::{
    PublishedState, SetState, StateSet, published_output, state_changed, version_of,
};
use tasks_core::store::{StateStore, check};
use tasks_core::transition::SET_STATE;
use uuid::Uuid;

/// Columns of `run_state`, in the order of [`StateRow`].
const STATE_COLUMNS: &str = "workflow_run_id, key, value, version, updated_at";

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
struct StateRow {
    workflow_run_id: Uuid,
    key: String,
    value: Value,
    version: i64,
    updated_at: DateTime<Utc>,
}
);

impl From<StateRow> for PublishedState {
    fn from(row: StateRow) -> Self {
        PublishedState {
            run_id: row.workflow_run_id,
            key: row.key,
            value: row.value,
            version: version_of(row.version),
            updated_at: row.updated_at,
        }
    }
}

impl PgStore {
    /// `Ok` when the run exists in this namespace, else [`StoreError::RunNotFound`].
    async fn known_run(&self, run_id: Uuid, operation: Operation) -> StoreResult<()> {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tasks.workflow_runs WHERE namespace = $1 AND id = $2)",
        )
        .bind(&*self.namespace)
        .bind(run_id)
        .fetch_one(&self.pool)
        .await
        .map_err(db(operation))?;
        if exists {
            Ok(())
        } else {
            Err(StoreError::RunNotFound { id: run_id })
        }
    }
}

#[async_trait]
impl StateStore for PgStore {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        const OPERATION: Operation = Operation::SetState;
        check::set_state(&params)?;
        let worker = Some(&params.holder);
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let target = EventTarget::Run(params.run_id);
        match self.lock_run(&mut tx, &target, OPERATION).await? {
            Some(run) if SET_STATE.admits(&run, worker) => {}
            current => return Err(SET_STATE.miss(params.run_id, worker, current.as_ref())),
        }
        let recorded = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2 AND step_name = $3 AND kind = $4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let recorded = sqlx::query_as::<_, StepRow>(&recorded)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::State.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        if let Some(row) = recorded {
            tx.commit().await.map_err(db(OPERATION))?;
            return Ok(StateSet {
                attempt: row.into_step(OPERATION)?,
                published: false,
            });
        }
        let version: i64 = sqlx::query_scalar(
            "INSERT INTO tasks.run_state
                 (namespace, workflow_run_id, key, value, version, updated_at)
             VALUES ($1, $2, $3, $4, 1, clock_timestamp())
             ON CONFLICT (namespace, workflow_run_id, key) DO UPDATE
                SET value = EXCLUDED.value, version = tasks.run_state.version + 1,
                    updated_at = EXCLUDED.updated_at
          RETURNING version",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .bind(&params.key)
        .bind(&params.value)
        .fetch_one(&mut *tx)
        .await
        .map_err(db(OPERATION))?;
        let version = version_of(version);
        let insert = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output,
                  started_at, finished_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, clock_timestamp(),
                     clock_timestamp(), clock_timestamp(), clock_timestamp())
          RETURNING {STEP_COLUMNS}"
        );
        let attempt = sqlx::query_as::<_, StepRow>(&insert)
            .bind(&*self.namespace)
            .bind(Uuid::now_v7())
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::State.as_str())
            .bind(params.config())
            .bind(published_output(version))
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        tx.commit().await.map_err(db(OPERATION))?;
        self.notify_now(&[state_changed(
            &self.namespace,
            params.run_id,
            &params.key,
            version,
        )])
        .await;
        Ok(StateSet {
            attempt,
            published: true,
        })
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        check::get_state(key)?;
        retrying(Operation::GetState, move || async move {
            const OPERATION: Operation = Operation::GetState;
            let sql = format!(
                "SELECT {STATE_COLUMNS} FROM tasks.run_state
              WHERE namespace = $1 AND workflow_run_id = $2 AND key = $3"
            );
            let found = sqlx::query_as::<_, StateRow>(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            match found {
                Some(row) => Ok(Some(row.into())),
                None => self.known_run(run_id, OPERATION).await.map(|()| None),
            }
        })
        .await
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        retrying(Operation::GetState, move || async move {
            const OPERATION: Operation = Operation::GetState;
            let sql = format!(
                "SELECT {STATE_COLUMNS} FROM tasks.run_state
              WHERE namespace = $1 AND workflow_run_id = $2
              ORDER BY key"
            );
            let found = sqlx::query_as::<_, StateRow>(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            if found.is_empty() {
                self.known_run(run_id, OPERATION).await?;
            }
            Ok(found.into_iter().map(PublishedState::from).collect())
        })
        .await
    }
}
