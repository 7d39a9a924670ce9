//! Published state, on SQLite: the SQL of [`StateStore::set_state`], [`StateStore::get_state`] and
//! [`StateStore::list_state`]. The policy (the lease fence) is `transition.rs`'s [`SET_STATE`].
//!
//! A publication runs under SQLite's write lock (`BEGIN IMMEDIATE`), so publications of one
//! run serialize with each other and with every other write: the version of a key grows by
//! exactly one per publication, and a replayed step finds the attempt its first execution
//! committed.
//!
//! [`StateStore::set_state`]: tasks_core::StateStore::set_state
//! [`StateStore::get_state`]: tasks_core::StateStore::get_state
//! [`StateStore::list_state`]: tasks_core::StateStore::list_state

use crate::rows::{STEP_COLUMNS, StepRow};
use crate::{SqliteStore, fetch_run, rows};
use async_trait::async_trait;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::StepKind;
use tasks_core::state::{
    PublishedState, SetState, StateSet, published_output, state_changed, version_of,
};
use tasks_core::store::{StateStore, check};
use tasks_core::transition::SET_STATE;
use uuid::Uuid;

/// Columns of `tasks_run_state`, in the order of [`StateRow`].
const STATE_COLUMNS: &str = "workflow_run_id, key, value, version, updated_at";

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
struct StateRow {
    workflow_run_id: String,
    key: String,
    value: String,
    version: i64,
    updated_at: String,
}
);

impl StateRow {
    fn into_state(self, operation: Operation) -> StoreResult<PublishedState> {
        Ok(PublishedState {
            run_id: rows::parse_id(&self.workflow_run_id, operation)?,
            key: self.key,
            value: rows::parse_json(&self.value, operation)?,
            version: version_of(self.version),
            updated_at: rows::parse_ts(&self.updated_at, operation)?,
        })
    }
}

impl SqliteStore {
    /// `Ok` when the run exists in this namespace, else [`StoreError::RunNotFound`].
    async fn known_run(&self, run_id: Uuid, operation: Operation) -> StoreResult<()> {
        let exists: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tasks_workflow_runs WHERE namespace = ?1 AND id = ?2)",
        )
        .bind(&*self.namespace)
        .bind(rows::id(run_id))
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
impl StateStore for SqliteStore {
    async fn set_state(&self, params: SetState) -> StoreResult<StateSet> {
        const OPERATION: Operation = Operation::SetState;
        check::set_state(&params)?;
        let worker = Some(&params.holder);
        let mut write = self.begin_write(OPERATION).await?;
        match fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await? {
            Some(run) if SET_STATE.admits(&run, worker) => {}
            current => return Err(SET_STATE.miss(params.run_id, worker, current.as_ref())),
        }
        let recorded = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3 AND kind = ?4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        let recorded = sqlx::query_as::<_, StepRow>(&recorded)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::State.as_str())
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))?;
        if let Some(row) = recorded {
            write.commit().await?;
            return Ok(StateSet {
                attempt: row.into_step(OPERATION)?,
                published: false,
            });
        }
        let now = write.now();
        let version: i64 = sqlx::query_scalar(
            "INSERT INTO tasks_run_state
                 (namespace, workflow_run_id, key, value, version, updated_at)
             VALUES (?1, ?2, ?3, ?4, 1, ?5)
             ON CONFLICT (namespace, workflow_run_id, key) DO UPDATE
                SET value = excluded.value, version = tasks_run_state.version + 1,
                    updated_at = excluded.updated_at
          RETURNING version",
        )
        .bind(&*self.namespace)
        .bind(rows::id(params.run_id))
        .bind(&params.key)
        .bind(rows::json(&params.value))
        .bind(&now)
        .fetch_one(write.conn())
        .await
        .map_err(db(OPERATION))?;
        let version = version_of(version);
        let insert = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output,
                  started_at, finished_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'completed', ?6, ?7, ?8, ?8, ?8, ?8)
          RETURNING {STEP_COLUMNS}"
        );
        let attempt = sqlx::query_as::<_, StepRow>(&insert)
            .bind(&*self.namespace)
            .bind(rows::id(Uuid::now_v7()))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::State.as_str())
            .bind(rows::json(&params.config()))
            .bind(rows::json(&published_output(version)))
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        write.commit().await?;
        self.notify(state_changed(
            &self.namespace,
            params.run_id,
            &params.key,
            version,
        ));
        Ok(StateSet {
            attempt,
            published: true,
        })
    }

    async fn get_state(&self, run_id: Uuid, key: &str) -> StoreResult<Option<PublishedState>> {
        const OPERATION: Operation = Operation::GetState;
        check::get_state(key)?;
        let sql = format!(
            "SELECT {STATE_COLUMNS} FROM tasks_run_state
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND key = ?3"
        );
        let found = sqlx::query_as::<_, StateRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        match found {
            Some(row) => row.into_state(OPERATION).map(Some),
            None => self.known_run(run_id, OPERATION).await.map(|()| None),
        }
    }

    async fn list_state(&self, run_id: Uuid) -> StoreResult<Vec<PublishedState>> {
        const OPERATION: Operation = Operation::GetState;
        let sql = format!(
            "SELECT {STATE_COLUMNS} FROM tasks_run_state
              WHERE namespace = ?1 AND workflow_run_id = ?2
              ORDER BY key"
        );
        let found = sqlx::query_as::<_, StateRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        if found.is_empty() {
            self.known_run(run_id, OPERATION).await?;
        }
        found
            .into_iter()
            .map(|row| row.into_state(OPERATION))
            .collect()
    }
}
