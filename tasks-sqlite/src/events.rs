//! Events sent to a run, on SQLite: the SQL of [`EventStore::send_event`],
//! [`EventStore::wait_for_event`] and [`EventStore::list_events`]. The policy (which statuses, what is
//! announced) is `transition.rs`'s [`SEND_EVENT`], [`WAKE_ON_EVENT`] and [`WAIT_EVENT`].
//!
//! Both writes run under SQLite's write lock (`BEGIN IMMEDIATE`), which serializes a send
//! and a wait of the same run: a wait that parks after a send finds its event, and a send
//! after a park finds the run sleeping on its topic and wakes it.
//!
//! [`EventStore::send_event`]: tasks_core::EventStore::send_event
//! [`EventStore::wait_for_event`]: tasks_core::EventStore::wait_for_event
//! [`EventStore::list_events`]: tasks_core::EventStore::list_events

use crate::continuation::HEAD_SQL;
use crate::rows::{RUN_COLUMNS, RunRow, STEP_COLUMNS, StepRow};
use crate::{SqliteStore, Write, fetch_run, rows};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::SqliteConnection;
use tasks_core::continuation::recipient_lineage;
use tasks_core::error::{Operation, StoreResult, db};
use tasks_core::events::{
    EventTarget, EventWait, RunEvent, SendEvent, SentEvent, SignalWithStart, SignalledRun,
    WaitForEvent, WaitStep, not_found, received_output, timed_out_output, wait_step, wait_until,
};
use tasks_core::model::{StepAttempt, StepKind, StepStatus, WorkflowRun};
use tasks_core::store::{EventStore, Notification, check};
use tasks_core::transition::{
    Column, PARKED_ON_EVENT, SEND_EVENT, WAIT_EVENT, WAKE_ON_EVENT, waits_on_topic_sql,
};
use uuid::Uuid;

/// Columns of `tasks_events`, in the order of [`EventRow`].
const EVENT_COLUMNS: &str = "namespace, id, workflow_run_id, topic, payload, dedup_key, \
    consumed_by, consumed_at, created_at";

tasks_core::row_struct!(
    sqlx::sqlite::SqliteRow =>
struct EventRow {
    namespace: String,
    id: String,
    workflow_run_id: String,
    topic: String,
    payload: String,
    dedup_key: Option<String>,
    consumed_by: Option<String>,
    consumed_at: Option<String>,
    created_at: String,
}
);

impl EventRow {
    fn into_event(self, operation: Operation) -> StoreResult<RunEvent> {
        Ok(RunEvent {
            namespace: self.namespace,
            id: rows::parse_id(&self.id, operation)?,
            workflow_run_id: rows::parse_id(&self.workflow_run_id, operation)?,
            topic: self.topic,
            payload: rows::parse_json(&self.payload, operation)?,
            dedup_key: self.dedup_key,
            consumed_by: self.consumed_by,
            consumed_at: self
                .consumed_at
                .map(|at| rows::parse_ts(&at, operation))
                .transpose()?,
            created_at: rows::parse_ts(&self.created_at, operation)?,
        })
    }
}

impl SqliteStore {
    /// Reads the run an event sent to `target` goes to, under the write lock; `None` when
    /// `target` does not exist in this namespace. A run that continued as new is followed
    /// to the current run of its lineage ([`recipient_lineage`]).
    async fn target_run(
        &self,
        conn: &mut SqliteConnection,
        target: &EventTarget,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        let named = self.named_run(&mut *conn, target, operation).await?;
        let Some(lineage) = recipient_lineage(named.as_ref(), target) else {
            return Ok(named);
        };
        // Under the write lock the lineage cannot move on meanwhile.
        let sql = format!("SELECT {RUN_COLUMNS} {HEAD_SQL}");
        let head = sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(lineage))
            .fetch_optional(conn)
            .await
            .map_err(db(operation))?
            .map(|row| row.into_run(operation))
            .transpose()?;
        Ok(head.or(named))
    }

    /// Reads the run `target` names under the write lock, as it is.
    async fn named_run(
        &self,
        conn: &mut SqliteConnection,
        target: &EventTarget,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        match target {
            EventTarget::Run(run_id) => fetch_run(conn, &self.namespace, *run_id, operation).await,
            EventTarget::Key {
                workflow_name,
                idempotency_key,
            } => {
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks_workflow_runs
                      WHERE namespace = ?1 AND workflow_name = ?2 AND idempotency_key = ?3"
                );
                sqlx::query_as::<_, RunRow>(&sql)
                    .bind(&*self.namespace)
                    .bind(workflow_name)
                    .bind(idempotency_key)
                    .fetch_optional(conn)
                    .await
                    .map_err(db(operation))?
                    .map(|row| row.into_run(operation))
                    .transpose()
            }
        }
    }

    /// The newest attempt of the wait, if any.
    async fn last_wait(
        &self,
        conn: &mut SqliteConnection,
        params: &WaitForEvent,
    ) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks_step_attempts
              WHERE namespace = ?1 AND workflow_run_id = ?2 AND step_name = ?3 AND kind = ?4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::Event.as_str())
            .fetch_optional(conn)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_step(OPERATION))
            .transpose()
    }

    /// Creates the wait's running attempt, with its topic and timeout in its config.
    async fn start_wait(
        &self,
        write: &mut Write<'_>,
        params: &WaitForEvent,
    ) -> StoreResult<StepAttempt> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "INSERT INTO tasks_step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config,
                  started_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?7, ?7)
          RETURNING {STEP_COLUMNS}"
        );
        let now = write.now();
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(Uuid::now_v7()))
            .bind(rows::id(params.run_id))
            .bind(&params.step_name)
            .bind(StepKind::Event.as_str())
            .bind(rows::json(&params.config()))
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)
    }

    /// Parks the run (read under the write lock) until `until`, waiting on the topic.
    async fn park(
        &self,
        write: &mut Write<'_>,
        params: &WaitForEvent,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "UPDATE tasks_workflow_runs
                SET {parked}, updated_at = ?5
              WHERE namespace = ?1 AND id = ?2
          RETURNING {RUN_COLUMNS}",
            parked = PARKED_ON_EVENT.set_sql(
                "?5",
                &[(Column::AvailableAt, "?3"), (Column::WaitTopic, "?4")]
            ),
        );
        let now = write.now();
        sqlx::query_as::<_, RunRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(rows::ts(until)?)
            .bind(&params.topic)
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_run(OPERATION)
    }

    /// Stores an event for the run `run_id` under the write lock (unless its deduplication
    /// key was used: the first event then) and wakes the run when it is parked on the
    /// topic: the send, once the run is known to take it. Returns the send and the woken
    /// run, to announce after the commit.
    async fn deliver(
        &self,
        write: &mut Write<'_>,
        run_id: Uuid,
        topic: &str,
        payload: &serde_json::Value,
        dedup_key: &Option<String>,
        operation: Operation,
    ) -> StoreResult<(SentEvent, Option<WorkflowRun>)> {
        let now = write.now();
        let insert = format!(
            "INSERT INTO tasks_events
                 (namespace, id, workflow_run_id, topic, payload, dedup_key, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (namespace, workflow_run_id, topic, dedup_key)
                 WHERE dedup_key IS NOT NULL DO NOTHING
          RETURNING {EVENT_COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, EventRow>(&insert)
            .bind(&*self.namespace)
            .bind(rows::id(Uuid::now_v7()))
            .bind(rows::id(run_id))
            .bind(topic)
            .bind(rows::json(payload))
            .bind(dedup_key)
            .bind(&now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(operation))?;
        let (event, duplicate) = match inserted {
            Some(row) => (row.into_event(operation)?, false),
            None => {
                let first = format!(
                    "SELECT {EVENT_COLUMNS} FROM tasks_events
                      WHERE namespace = ?1 AND workflow_run_id = ?2 AND topic = ?3
                        AND dedup_key = ?4"
                );
                let row = sqlx::query_as::<_, EventRow>(&first)
                    .bind(&*self.namespace)
                    .bind(rows::id(run_id))
                    .bind(topic)
                    .bind(dedup_key)
                    .fetch_one(write.conn())
                    .await
                    .map_err(db(operation))?;
                (row.into_event(operation)?, true)
            }
        };
        let woken = if duplicate {
            None
        } else {
            let wake = format!(
                "UPDATE tasks_workflow_runs SET available_at = ?3, updated_at = ?3
                  WHERE namespace = ?1 AND id = ?2 AND {fence} AND {waits}
              RETURNING {RUN_COLUMNS}",
                fence = WAKE_ON_EVENT.fence("", "NULL", "NULL"),
                waits = waits_on_topic_sql("?4"),
            );
            sqlx::query_as::<_, RunRow>(&wake)
                .bind(&*self.namespace)
                .bind(rows::id(run_id))
                .bind(&now)
                .bind(topic)
                .fetch_optional(write.conn())
                .await
                .map_err(db(operation))?
                .map(|row| row.into_run(operation))
                .transpose()?
        };
        let sent = SentEvent {
            event,
            duplicate,
            woke: woken.is_some(),
        };
        Ok((sent, woken))
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        const OPERATION: Operation = Operation::SendEvent;
        check::send_event(&self.namespace, &params)?;
        let mut write = self.begin_write(OPERATION).await?;
        let run = match self
            .target_run(write.conn(), &params.target, OPERATION)
            .await?
        {
            Some(run) if SEND_EVENT.admits(&run, None) => run,
            Some(run) => return Err(SEND_EVENT.miss(run.id, None, Some(&run))),
            None => return Err(not_found(&params.target)),
        };
        let (sent, woken) = self
            .deliver(
                &mut write,
                run.id,
                &params.topic,
                &params.payload,
                &params.dedup_key,
                OPERATION,
            )
            .await?;
        write.commit().await?;
        for notification in woken
            .iter()
            .flat_map(|run| WAKE_ON_EVENT.announcements(run))
        {
            self.notify(notification);
        }
        Ok(sent)
    }

    async fn signal_with_start(&self, params: SignalWithStart) -> StoreResult<SignalledRun> {
        const OPERATION: Operation = Operation::SignalWithStart;
        check::signal_with_start(&self.namespace, &params)?;
        let target = params.target()?;
        // One write transaction: the insert, or the read of the key's holder, and the send.
        // A refusal rolls back (the `Write` is dropped uncommitted), a lapsed holder's
        // release included.
        let mut write = self.begin_write(OPERATION).await?;
        let (run, created) = match self.insert_run(&mut write, &params.start).await? {
            Some(row) => (row.into_run(OPERATION)?, true),
            None => match self.target_run(write.conn(), &target, OPERATION).await? {
                Some(run) if SEND_EVENT.admits(&run, None) => (run, false),
                Some(run) => return Err(SEND_EVENT.miss(run.id, None, Some(&run))),
                // Under the write lock the holder the insert found is still there.
                None => return Err(not_found(&target)),
            },
        };
        let (sent, woken) = self
            .deliver(
                &mut write,
                run.id,
                &params.topic,
                &params.payload,
                &params.dedup_key,
                OPERATION,
            )
            .await?;
        write.commit().await?;
        if created {
            self.notify(Notification::RunAvailable {
                namespace: run.namespace.clone(),
            });
        }
        for notification in woken
            .iter()
            .flat_map(|run| WAKE_ON_EVENT.announcements(run))
        {
            self.notify(notification);
        }
        Ok(SignalledRun {
            run: woken.unwrap_or(run),
            created,
            sent,
        })
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        const OPERATION: Operation = Operation::WaitForEvent;
        check::wait_for_event(&params)?;
        let worker = Some(&params.holder);
        let mut write = self.begin_write(OPERATION).await?;
        match fetch_run(write.conn(), &self.namespace, params.run_id, OPERATION).await? {
            Some(run) if WAIT_EVENT.admits(&run, worker) => {}
            current => return Err(WAIT_EVENT.miss(params.run_id, worker, current.as_ref())),
        }
        let attempt = match self.last_wait(write.conn(), &params).await? {
            Some(attempt) if attempt.status == StepStatus::Completed => {
                write.commit().await?;
                return Ok(EventWait::Done(attempt));
            }
            Some(attempt) if attempt.status == StepStatus::Running => attempt,
            _ => self.start_wait(&mut write, &params).await?,
        };
        let now = write.now();
        let consume = format!(
            "UPDATE tasks_events SET consumed_by = ?4, consumed_at = ?5
              WHERE namespace = ?1 AND id = (
                    SELECT id FROM tasks_events
                     WHERE namespace = ?1 AND workflow_run_id = ?2 AND topic = ?3
                       AND consumed_at IS NULL
                     ORDER BY created_at, id
                     LIMIT 1)
          RETURNING {EVENT_COLUMNS}"
        );
        let consumed = sqlx::query_as::<_, EventRow>(&consume)
            .bind(&*self.namespace)
            .bind(rows::id(params.run_id))
            .bind(&params.topic)
            .bind(&params.step_name)
            .bind(&now)
            .fetch_optional(write.conn())
            .await
            .map_err(db(OPERATION))?;
        let output = match consumed {
            Some(row) => received_output(&row.into_event(OPERATION)?),
            None => {
                let until = wait_until(&attempt);
                if wait_step(false, until, write.now) == WaitStep::Park {
                    let run = self.park(&mut write, &params, until).await?;
                    write.commit().await?;
                    for notification in WAIT_EVENT.announcements(&run) {
                        self.notify(notification);
                    }
                    return Ok(EventWait::Parked(run));
                }
                timed_out_output()
            }
        };
        let finish = format!(
            "UPDATE tasks_step_attempts
                SET status = 'completed', output = ?3, finished_at = ?4, updated_at = ?4
              WHERE namespace = ?1 AND id = ?2
          RETURNING {STEP_COLUMNS}"
        );
        let done = sqlx::query_as::<_, StepRow>(&finish)
            .bind(&*self.namespace)
            .bind(rows::id(attempt.id))
            .bind(rows::json(&output))
            .bind(&now)
            .fetch_one(write.conn())
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        sqlx::query(
            "UPDATE tasks_workflow_runs SET wait_topic = NULL
              WHERE namespace = ?1 AND id = ?2 AND wait_topic IS NOT NULL",
        )
        .bind(&*self.namespace)
        .bind(rows::id(params.run_id))
        .execute(write.conn())
        .await
        .map_err(db(OPERATION))?;
        write.commit().await?;
        Ok(EventWait::Done(done))
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        const OPERATION: Operation = Operation::ListEvents;
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM tasks_events
              WHERE namespace = ?1 AND workflow_run_id = ?2
              ORDER BY created_at, id"
        );
        let found = sqlx::query_as::<_, EventRow>(&sql)
            .bind(&*self.namespace)
            .bind(rows::id(run_id))
            .fetch_all(&self.pool)
            .await
            .map_err(db(OPERATION))?;
        found
            .into_iter()
            .map(|row| row.into_event(OPERATION))
            .collect()
    }
}
