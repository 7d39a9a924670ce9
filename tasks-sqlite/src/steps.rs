//! Step attempts on SQLite: creation, reads, listings, and finishing an attempt (with the
//! `Interrupted` outcome when its run was paused or canceled meanwhile).
//!
//! Every write reads the run under the write lock and checks the step transition's fence
//! on it ([`Transition::admits`]), so a fence holds for the whole transaction.

use crate::rows::{STEP_COLUMNS, StepRow};
use crate::{SqliteStore, Write, fetch_run, rows};
use async_trait::async_trait;
use serde_json::Value;
use sqlx::{QueryBuilder, Sqlite};
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreError, StoreResult, db};
use tasks_core::model::{StepAttempt, StepStatus, WorkflowRun};
use tasks_core::store::{
    CreateStepAttempt, Cursor, ListStepAttempts, Page, PageQuery, RecordStepAttempt, StepStore,
    StepUpdate, check,
};
use tasks_core::transition::{
    COMPLETE_STEP, CREATE_STEP, MARKABLE_STEP, RECORD_STEP, Transition, explain_step_miss,
    interrupted, step_status_in, stored_again,
};
use uuid::Uuid;

/// How a step write found the run, read under the write lock.
pub(crate) enum RunState {
    /// Running under the writer's claim: the write applies.
    Owned(WorkflowRun),
    /// Paused or canceled meanwhile: the attempt is kept, marked with this status.
    Interrupted(WorkflowRun, StepStatus),
    /// Anything else: the write is refused with this run (or none).
    Refused(Option<WorkflowRun>),
}

impl SqliteStore {
    /// Reads the run of a step write in `write` and classifies it for `transition`.
    pub(crate) async fn run_state(
        &self,
        write: &mut Write<'_>,
        transition: &Transition,
        run_id: Uuid,
        holder: &Holder,
    ) -> StoreResult<RunState> {
        let run = fetch_run(write.conn(), &self.namespace, run_id, transition.operation).await?;
        Ok(match run {
            Some(run) if transition.admits(&run, Some(holder)) => RunState::Owned(run),
            Some(run) => match interrupted(run.status) {
                Some(mark) => RunState::Interrupted(run, mark),
                None => RunState::Refused(Some(run)),
            },
            None => RunState::Refused(None),
        })
    }

    /// The attempt stored under `params.id` when inserting it found the id taken: a finished
    /// attempt of the run (a retry whose first try was stored), else the reason it is not.
    pub(crate) async fn stored_record(
        &self,
        write: &mut Write<'_>,
        params: &RecordStepAttempt,
    ) -> StoreResult<StepAttempt> {
        let operation = RECORD_STEP.operation;
        let stored = fetch_step(write.conn(), &self.namespace, params.id, operation).await?;
        let status = stored.as_ref().map(|step| step.status);
        stored_again(params.run_id, stored, true)?.ok_or_else(|| {
            StoreError::InvalidArgument(format!(
                "step attempt id {} is stored already, as {}",
                params.id,
                status.map_or("gone", |status| status.as_str())
            ))
        })
    }

    /// Inserts a finished attempt of `params.run_id` under `params.id`, created now and
    /// started `elapsed` before: with its result, or, when `interrupted_as` is given, marked
    /// so without it. `None`: the id is stored already, and nothing was written.
    async fn insert_finished(
        &self,
        write: &mut Write<'_>,
        params: &RecordStepAttempt,
        interrupted_as: Option<StepStatus>,
    ) -> StoreResult<Option<StepRow>> {
        self.insert_finished_nth(write, params, interrupted_as, 0)
            .await
    }

    /// [`Self::insert_finished`] for the `nth` attempt (from 0) written by one transaction:
    /// created `nth` microseconds after the transaction's time, so that the attempts of one
    /// write keep the order they were given in (their ids are the caller's).
    pub(crate) async fn insert_finished_nth(
        &self,
        write: &mut Write<'_>,
        params: &RecordStepAttempt,
        interrupted_as: Option<StepStatus>,
        nth: usize,
    ) -> StoreResult<Option<StepRow>> {
        let sql = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, output, error,
                  started_at, finished_at, created_at, updated_at, args)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?12, ?11, ?11, ?13)
             ON CONFLICT (namespace, id) DO NOTHING
          RETURNING {STEP_COLUMNS}"
        );
        let now = write.instant() + chrono::TimeDelta::microseconds(nth as i64);
        let (now, started) = (rows::ts_bound(now), write.now_minus(params.elapsed)?);
        let (status, output, error, finished_at) = match interrupted_as {
            None => (
                params.status,
                params.output.as_ref().map(rows::json),
                params.error.as_ref().map(rows::json),
                Some(now.clone()),
            ),
            Some(mark) => (mark, None, None, None),
        };
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.id))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(status.as_str())
            .bind(rows::json(&params.config))
            .bind(output)
            .bind(error)
            .bind(started)
            .bind(now)
            .bind(finished_at)
            .bind(params.args.as_ref().map(rows::json))
            .fetch_optional(write.conn())
            .await
            .map_err(db(RECORD_STEP.operation))
    }
}

/// Reads a step attempt on `conn` (a pooled connection or a write transaction).
async fn fetch_step(
    conn: &mut sqlx::SqliteConnection,
    namespace: &str,
    step_attempt_id: Uuid,
    operation: Operation,
) -> StoreResult<Option<StepAttempt>> {
    let sql =
        format!("SELECT {STEP_COLUMNS} FROM tasks_step_attempts WHERE namespace = ?1 AND id = ?2");
    sqlx::query_as::<_, StepRow>(&sql)
        .bind(namespace)
        .bind(rows::id(step_attempt_id))
        .fetch_optional(conn)
        .await
        .map_err(db(operation))?
        .map(|row| row.into_step(operation))
        .transpose()
}

#[async_trait]
impl StepStore for SqliteStore {
    async fn create_step_attempt(&self, params: CreateStepAttempt) -> StoreResult<StepAttempt> {
        check::create_step_attempt(&params)?;
        let operation = CREATE_STEP.operation;
        let mut write = self.begin_write(operation).await?;
        let stored = fetch_step(write.conn(), &self.namespace, params.id, operation).await?;
        if let Some(step) = stored_again(params.run_id, stored, false)? {
            return Ok(step);
        }
        let run = fetch_run(write.conn(), &self.namespace, params.run_id, operation).await?;
        if !run
            .as_ref()
            .is_some_and(|run| CREATE_STEP.admits(run, Some(&params.holder)))
        {
            return Err(CREATE_STEP.miss(params.run_id, Some(&params.holder), run.as_ref()));
        }
        // Every attempt gets the time of its own write transaction, taken under the write
        // lock, so attempts of a run have increasing `created_at`; `id` (UUIDv7) breaks any
        // remaining tie.
        let sql = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config, context,
                  started_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?8, ?8)
          RETURNING {STEP_COLUMNS}"
        );
        let now = write.now();
        let row = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.id))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(params.kind.as_str())
            .bind(rows::json(&params.config))
            .bind(rows::json_opt(params.context.as_ref()))
            .bind(now)
            .fetch_one(write.conn())
            .await
            .map_err(db(operation))?;
        write.commit().await?;
        row.into_step(operation)
    }

    async fn get_step_attempt(&self, step_attempt_id: Uuid) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: Operation = Operation::GetStepAttempt;
        let mut conn = self.pool.acquire().await.map_err(db(OPERATION))?;
        fetch_step(&mut conn, &self.namespace, step_attempt_id, OPERATION).await
    }

    async fn list_step_attempts(&self, params: ListStepAttempts) -> StoreResult<Page<StepAttempt>> {
        check::list_step_attempts(&self.namespace, &params)?;
        const OPERATION: Operation = Operation::ListStepAttempts;
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts WHERE namespace = "
        ));
        query.push_bind(self.namespace.to_string());
        query
            .push(" AND workflow_run_id = ")
            .push_bind(rows::id(params.workflow_run_id));
        if let Some(cursor) = page.cursor {
            query.push(format_args!(
                " AND (created_at, id) {} (",
                page.cursor_operator()
            ));
            query
                .push_bind(rows::ts_bound(cursor.created_at()))
                .push(", ")
                .push_bind(rows::id(cursor.id()))
                .push(")");
        }
        let direction = page.sql_direction();
        query.push(format_args!(
            " ORDER BY created_at {direction}, id {direction} LIMIT "
        ));
        query.push_bind(i64::from(page.limit) + 1);
        let rows = query
            .build_query_as::<StepRow>()
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        let steps = rows::steps(rows, OPERATION)?;
        Ok(page.finish(steps, |step| Cursor::new(step.created_at, step.id)))
    }

    async fn step_history(&self, run_id: Uuid) -> StoreResult<Vec<StepAttempt>> {
        const OPERATION: Operation = Operation::StepHistory;
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2
              ORDER BY created_at, id"
        );
        let rows = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        rows::steps(rows, OPERATION)
    }

    /// Completes a running attempt (a durable sleep) with `output`, fenced on its run
    /// running under `holder`'s claim, all in one write transaction.
    async fn complete_step_attempt(
        &self,
        run_id: Uuid,
        step_attempt_id: Uuid,
        holder: &Holder,
        output: Value,
    ) -> StoreResult<StepUpdate> {
        check::complete_step_attempt(holder, &output)?;
        let operation = COMPLETE_STEP.operation;
        let mut write = self.begin_write(operation).await?;
        let now = write.now();
        let state = self
            .run_state(&mut write, &COMPLETE_STEP, run_id, holder)
            .await?;
        let (status, output, from) = match &state {
            RunState::Owned(_) => (
                StepStatus::Completed,
                Some(rows::json(&output)),
                &[StepStatus::Running][..],
            ),
            RunState::Interrupted(_, mark) => (*mark, None, MARKABLE_STEP),
            RunState::Refused(run) => {
                return Err(COMPLETE_STEP.miss(run_id, Some(holder), run.as_ref()));
            }
        };
        let sql = format!(
            "UPDATE tasks_step_attempts
                SET status = ?4, output = ?5, finished_at = ?6, updated_at = ?7
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND id = ?3 AND {from}
          RETURNING {STEP_COLUMNS}",
            from = step_status_in("", from),
        );
        let finished_at = output.is_some().then(|| now.clone());
        let updated = sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .bind(rows::id(step_attempt_id))
            .bind(status.as_str())
            .bind(output)
            .bind(finished_at)
            .bind(&now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
        let outcome = match (updated, state) {
            (Some(row), RunState::Owned(_)) => StepUpdate::Recorded(row.into_step(operation)?),
            (Some(_), RunState::Interrupted(run, _)) => StepUpdate::Interrupted {
                run_status: run.status,
            },
            (_, RunState::Owned(run) | RunState::Interrupted(run, _)) => {
                let step =
                    fetch_step(write.conn(), &self.namespace, step_attempt_id, operation).await?;
                return Err(explain_step_miss(
                    &COMPLETE_STEP,
                    run_id,
                    step_attempt_id,
                    holder,
                    Some(&run),
                    step.as_ref(),
                ));
            }
            (_, RunState::Refused(_)) => unreachable!("refused before the update"),
        };
        write.commit().await?;
        Ok(outcome)
    }

    /// Records a finished attempt in one write transaction, fenced on its run running
    /// under the claim; an interrupted attempt is kept, marked like its run.
    async fn record_step_attempt(&self, params: RecordStepAttempt) -> StoreResult<StepUpdate> {
        let operation = RECORD_STEP.operation;
        check::record_step_attempt(&params)?;
        let mut write = self.begin_write(operation).await?;
        let state = self
            .run_state(&mut write, &RECORD_STEP, params.run_id, &params.holder)
            .await?;
        if !matches!(state, RunState::Owned(_)) {
            // A retry whose first try was stored is answered with what was stored.
            let stored = fetch_step(write.conn(), &self.namespace, params.id, operation).await?;
            if let Some(step) = stored_again(params.run_id, stored, true)? {
                return Ok(StepUpdate::Recorded(step));
            }
        }
        let update = match state {
            RunState::Owned(_) => match self.insert_finished(&mut write, &params, None).await? {
                Some(row) => StepUpdate::Recorded(row.into_step(operation)?),
                None => StepUpdate::Recorded(self.stored_record(&mut write, &params).await?),
            },
            RunState::Interrupted(run, mark) => {
                self.insert_finished(&mut write, &params, Some(mark))
                    .await?;
                StepUpdate::Interrupted {
                    run_status: run.status,
                }
            }
            RunState::Refused(run) => {
                return Err(RECORD_STEP.miss(params.run_id, Some(&params.holder), run.as_ref()));
            }
        };
        write.commit().await?;
        Ok(update)
    }
}
