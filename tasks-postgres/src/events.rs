//! Events sent to a run, on Postgres: the SQL of [`EventStore::send_event`],
//! [`EventStore::wait_for_event`] and [`EventStore::list_events`]. The policy (which statuses, what is
//! announced) is `transition.rs`'s [`SEND_EVENT`], [`WAKE_ON_EVENT`] and [`WAIT_EVENT`].
//!
//! Both writes lock the run row first (`SELECT .. FOR UPDATE`), so a send and a wait of the
//! same run serialize. Under Read Committed each later statement of the second transaction
//! sees what the first committed: a wait that parks after a send finds its event, and a send
//! after a park finds the run sleeping on its topic and wakes it. No wake-up is lost.
//!
//! [`EventStore::send_event`]: tasks_core::EventStore::send_event
//! [`EventStore::wait_for_event`]: tasks_core::EventStore::wait_for_event
//! [`EventStore::list_events`]: tasks_core::EventStore::list_events

use crate::PgStore;
use crate::db::Conn;
use crate::reconnect::{db, retrying};
use crate::rows::{RUN_COLUMNS, STEP_COLUMNS, StepRow, decode_run};
use crate::runs::insert_run;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row as _;
use tasks_core::continuation::{MAX_FORWARDS, recipient_lineage};
use tasks_core::error::{Operation, StoreResult};
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

/// Columns of `events`, in the order of [`EventRow`].
const EVENT_COLUMNS: &str = "namespace, id, workflow_run_id, topic, payload, dedup_key, \
    consumed_by, consumed_at, created_at";

tasks_core::row_struct!(
    sqlx::postgres::PgRow =>
struct EventRow {
    namespace: String,
    id: Uuid,
    workflow_run_id: Uuid,
    topic: String,
    payload: Value,
    dedup_key: Option<String>,
    consumed_by: Option<String>,
    consumed_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}
);

impl From<EventRow> for RunEvent {
    fn from(row: EventRow) -> Self {
        RunEvent {
            namespace: row.namespace,
            id: row.id,
            workflow_run_id: row.workflow_run_id,
            topic: row.topic,
            payload: row.payload,
            dedup_key: row.dedup_key,
            consumed_by: row.consumed_by,
            consumed_at: row.consumed_at,
            created_at: row.created_at,
        }
    }
}

impl PgStore {
    /// Locks the run an event sent to `target` goes to in `conn`'s transaction and reads it;
    /// `None` when `target` does not exist in this namespace. A run that continued as new
    /// is followed to the current run of its lineage ([`recipient_lineage`]), which is
    /// locked and read instead.
    async fn lock_recipient(
        &self,
        conn: &mut Conn,
        target: &EventTarget,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        let mut run = self.lock_run(conn, target, operation).await?;
        let Some(lineage) = recipient_lineage(run.as_ref(), target) else {
            return Ok(run);
        };
        for _ in 0..MAX_FORWARDS {
            // A head that continued between this statement's snapshot and its lock is
            // skipped; the next statement sees its successor.
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                  WHERE namespace = $1 AND (id = $2 OR lineage_root_id = $2)
                    AND continued_as_run_id IS NULL
                  ORDER BY created_at DESC, id DESC LIMIT 1 FOR UPDATE"
            );
            let head = sqlx::query(&sql)
                .bind(&*self.namespace)
                .bind(lineage)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db(operation))?;
            match head {
                Some(head) => return decode_run(&head, operation).map(Some),
                // No lineage behind an unknown id.
                None if run.is_none() => return Ok(None),
                None => {}
            }
        }
        match run.take() {
            Some(run) => Err(SEND_EVENT.miss(run.id, None, Some(&run))),
            None => Ok(None),
        }
    }

    /// Locks the run `target` names in `conn`'s transaction and reads it; `None` when it
    /// does not exist in this namespace.
    pub(super) async fn lock_run(
        &self,
        conn: &mut Conn,
        target: &EventTarget,
        operation: Operation,
    ) -> StoreResult<Option<WorkflowRun>> {
        let row = match target {
            EventTarget::Run(run_id) => {
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                      WHERE namespace = $1 AND id = $2 FOR UPDATE"
                );
                sqlx::query(&sql)
                    .bind(&*self.namespace)
                    .bind(run_id)
                    .fetch_optional(conn)
                    .await
            }
            EventTarget::Key {
                workflow_name,
                idempotency_key,
            } => {
                let sql = format!(
                    "SELECT {RUN_COLUMNS} FROM tasks.workflow_runs
                      WHERE namespace = $1 AND workflow_name = $2 AND idempotency_key = $3
                        FOR UPDATE"
                );
                sqlx::query(&sql)
                    .bind(&*self.namespace)
                    .bind(workflow_name)
                    .bind(idempotency_key)
                    .fetch_optional(conn)
                    .await
            }
        }
        .map_err(db(operation))?;
        row.map(|row| decode_run(&row, operation)).transpose()
    }

    /// One try of [`EventStore::send_event`] (of checked `params`).
    ///
    /// [`EventStore::send_event`]: tasks_core::EventStore::send_event
    async fn send_event_once(&self, params: &SendEvent) -> StoreResult<SentEvent> {
        const OPERATION: Operation = Operation::SendEvent;
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let run = match self
            .lock_recipient(&mut tx, &params.target, OPERATION)
            .await?
        {
            Some(run) if SEND_EVENT.admits(&run, None) => run,
            Some(run) => return Err(SEND_EVENT.miss(run.id, None, Some(&run))),
            None => return Err(not_found(&params.target)),
        };
        let (sent, woken) = self
            .deliver(
                &mut tx,
                run.id,
                &params.topic,
                &params.payload,
                &params.dedup_key,
                OPERATION,
            )
            .await?;
        tx.commit().await.map_err(db(OPERATION))?;
        if let Some(run) = &woken {
            self.announce_now(&WAKE_ON_EVENT, run).await;
        }
        Ok(sent)
    }

    /// Stores an event for the run `run_id`, locked in `conn`'s transaction (unless its
    /// deduplication key was used: the first event then), and wakes the run when it is
    /// parked on the topic: the send, once the run is known to take it. Returns the send
    /// and the woken run, to announce after the commit.
    async fn deliver(
        &self,
        conn: &mut Conn,
        run_id: Uuid,
        topic: &str,
        payload: &Value,
        dedup_key: &Option<String>,
        operation: Operation,
    ) -> StoreResult<(SentEvent, Option<WorkflowRun>)> {
        let insert = format!(
            "INSERT INTO tasks.events
                 (namespace, id, workflow_run_id, topic, payload, dedup_key, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, clock_timestamp())
             ON CONFLICT (namespace, workflow_run_id, topic, dedup_key)
                 WHERE dedup_key IS NOT NULL DO NOTHING
          RETURNING {EVENT_COLUMNS}"
        );
        let inserted = sqlx::query_as::<_, EventRow>(&insert)
            .bind(&*self.namespace)
            .bind(Uuid::now_v7())
            .bind(run_id)
            .bind(topic)
            .bind(payload)
            .bind(dedup_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db(operation))?;
        let (event, duplicate) = match inserted {
            Some(row) => (RunEvent::from(row), false),
            None => {
                // The run is locked, so the first event with this key is there to read.
                let first = format!(
                    "SELECT {EVENT_COLUMNS} FROM tasks.events
                      WHERE namespace = $1 AND workflow_run_id = $2 AND topic = $3
                        AND dedup_key = $4"
                );
                let row = sqlx::query_as::<_, EventRow>(&first)
                    .bind(&*self.namespace)
                    .bind(run_id)
                    .bind(topic)
                    .bind(dedup_key)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(db(operation))?;
                (RunEvent::from(row), true)
            }
        };
        let woken = if duplicate {
            None
        } else {
            let wake = format!(
                "UPDATE tasks.workflow_runs SET available_at = clock_timestamp(), updated_at = now()
                  WHERE namespace = $1 AND id = $2 AND {fence} AND {waits}
              RETURNING {RUN_COLUMNS}",
                fence = WAKE_ON_EVENT.fence("", "NULL", "NULL"),
                waits = waits_on_topic_sql("$3"),
            );
            sqlx::query(&wake)
                .bind(&*self.namespace)
                .bind(run_id)
                .bind(topic)
                .fetch_optional(&mut *conn)
                .await
                .map_err(db(operation))?
                .map(|row| decode_run(&row, operation))
                .transpose()?
        };
        let sent = SentEvent {
            event,
            duplicate,
            woke: woken.is_some(),
        };
        Ok((sent, woken))
    }

    /// One try of [`EventStore::signal_with_start`] (of checked `params`).
    ///
    /// [`EventStore::signal_with_start`]: tasks_core::EventStore::signal_with_start
    async fn signal_with_start_once(&self, params: &SignalWithStart) -> StoreResult<SignalledRun> {
        const OPERATION: Operation = Operation::SignalWithStart;
        let target = params.target()?;
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        // Racing calls for one key: the unique index lets one insert through and makes the
        // others wait for its commit; they find its run and lock it. The holder a refused
        // insert saw can lose the key before it is locked (its scope lapsed and another
        // start released it): then the insert is tried again.
        let mut tries = 0;
        let (run, created) = loop {
            tries += 1;
            if let Some(row) = insert_run(&mut *tx, &self.namespace, &params.start).await? {
                break (row.into_run(OPERATION)?, true);
            }
            match self.lock_recipient(&mut tx, &target, OPERATION).await? {
                Some(run) if SEND_EVENT.admits(&run, None) => break (run, false),
                Some(run) => return Err(SEND_EVENT.miss(run.id, None, Some(&run))),
                None if tries < 3 => continue,
                // Three lapses in a row during one call: give up as a database error.
                None => return Err(db(OPERATION)(sqlx::Error::RowNotFound)),
            }
        };
        let (sent, woken) = self
            .deliver(
                &mut tx,
                run.id,
                &params.topic,
                &params.payload,
                &params.dedup_key,
                OPERATION,
            )
            .await?;
        tx.commit().await.map_err(db(OPERATION))?;
        // After the commit, as a start and a send announce.
        if created {
            self.notify_now(&[Notification::RunAvailable {
                namespace: run.namespace.clone(),
            }])
            .await;
        }
        if let Some(woken) = &woken {
            self.announce_now(&WAKE_ON_EVENT, woken).await;
        }
        Ok(SignalledRun {
            run: woken.unwrap_or(run),
            created,
            sent,
        })
    }

    /// The newest attempt of the wait, if any.
    async fn last_wait(
        &self,
        conn: &mut Conn,
        params: &WaitForEvent,
    ) -> StoreResult<Option<StepAttempt>> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "SELECT {STEP_COLUMNS} FROM tasks.step_attempts
              WHERE namespace = $1 AND workflow_run_id = $2 AND step_name = $3 AND kind = $4
              ORDER BY created_at DESC, id DESC
              LIMIT 1"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::Event.as_str())
            .fetch_optional(conn)
            .await
            .map_err(db(OPERATION))?
            .map(|row| row.into_step(OPERATION))
            .transpose()
    }

    /// Creates the wait's running attempt, with its topic and timeout in its config.
    async fn start_wait(&self, conn: &mut Conn, params: &WaitForEvent) -> StoreResult<StepAttempt> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "INSERT INTO tasks.step_attempts
                 (namespace, id, workflow_run_id, step_name, kind, status, config,
                  started_at, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'running', $6, clock_timestamp(), clock_timestamp(),
                     clock_timestamp())
          RETURNING {STEP_COLUMNS}"
        );
        sqlx::query_as::<_, StepRow>(&sql)
            .bind(&*self.namespace)
            .bind(Uuid::now_v7())
            .bind(params.run_id)
            .bind(&params.step_name)
            .bind(StepKind::Event.as_str())
            .bind(params.config())
            .fetch_one(conn)
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)
    }

    /// Parks the locked run until `until` (from [`wait_until`], inside the store's range),
    /// waiting on the wait's topic.
    async fn park(
        &self,
        conn: &mut Conn,
        params: &WaitForEvent,
        until: DateTime<Utc>,
    ) -> StoreResult<WorkflowRun> {
        const OPERATION: Operation = Operation::WaitForEvent;
        let sql = format!(
            "UPDATE tasks.workflow_runs
                SET {parked}, updated_at = now()
              WHERE namespace = $1 AND id = $2
          RETURNING {RUN_COLUMNS}",
            parked = PARKED_ON_EVENT.set_sql(
                "now()",
                &[(Column::AvailableAt, "$3"), (Column::WaitTopic, "$4")]
            ),
        );
        let row = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(until)
            .bind(&params.topic)
            .fetch_one(conn)
            .await
            .map_err(db(OPERATION))?;
        decode_run(&row, OPERATION)
    }
}

#[async_trait]
impl EventStore for PgStore {
    async fn send_event(&self, params: SendEvent) -> StoreResult<SentEvent> {
        check::send_event(&self.namespace, &params)?;
        if params.dedup_key.is_some() {
            // A second try finds the first's event by its key, if the first committed, and
            // answers it as a repeat.
            retrying(Operation::SendEvent, || self.send_event_once(&params)).await
        } else {
            // A second try would send the event twice when the first committed before its
            // answer was lost.
            self.send_event_once(&params).await
        }
    }

    async fn signal_with_start(&self, params: SignalWithStart) -> StoreResult<SignalledRun> {
        check::signal_with_start(&self.namespace, &params)?;
        if params.dedup_key.is_some() {
            // A second try finds the first's run by its key and the first's event by its
            // deduplication key, if the first committed.
            retrying(Operation::SignalWithStart, || {
                self.signal_with_start_once(&params)
            })
            .await
        } else {
            // A second try would send the event twice when the first committed before its
            // answer was lost.
            self.signal_with_start_once(&params).await
        }
    }

    async fn wait_for_event(&self, params: WaitForEvent) -> StoreResult<EventWait> {
        const OPERATION: Operation = Operation::WaitForEvent;
        check::wait_for_event(&params)?;
        let worker = Some(&params.holder);
        let mut tx = self.pool.begin().await.map_err(db(OPERATION))?;
        let target = EventTarget::Run(params.run_id);
        match self.lock_run(&mut tx, &target, OPERATION).await? {
            Some(run) if WAIT_EVENT.admits(&run, worker) => {}
            current => return Err(WAIT_EVENT.miss(params.run_id, worker, current.as_ref())),
        }
        let attempt = match self.last_wait(&mut tx, &params).await? {
            Some(attempt) if attempt.status == StepStatus::Completed => {
                tx.commit().await.map_err(db(OPERATION))?;
                return Ok(EventWait::Done(attempt));
            }
            Some(attempt) if attempt.status == StepStatus::Running => attempt,
            _ => self.start_wait(&mut tx, &params).await?,
        };
        let consume = format!(
            "UPDATE tasks.events SET consumed_by = $4, consumed_at = clock_timestamp()
              WHERE namespace = $1 AND id = (
                    SELECT id FROM tasks.events
                     WHERE namespace = $1 AND workflow_run_id = $2 AND topic = $3
                       AND consumed_at IS NULL
                     ORDER BY created_at, id
                     LIMIT 1)
          RETURNING {EVENT_COLUMNS}"
        );
        let consumed = sqlx::query_as::<_, EventRow>(&consume)
            .bind(&*self.namespace)
            .bind(params.run_id)
            .bind(&params.topic)
            .bind(&params.step_name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db(OPERATION))?;
        let output = match consumed {
            Some(row) => received_output(&RunEvent::from(row)),
            None => {
                let until = wait_until(&attempt);
                let now: DateTime<Utc> = sqlx::query("SELECT clock_timestamp()")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db(OPERATION))?
                    .try_get(0)
                    .map_err(db(OPERATION))?;
                if wait_step(false, until, now) == WaitStep::Park {
                    let run = self.park(&mut tx, &params, until).await?;
                    tx.commit().await.map_err(db(OPERATION))?;
                    self.announce_now(&WAIT_EVENT, &run).await;
                    return Ok(EventWait::Parked(run));
                }
                timed_out_output()
            }
        };
        let finish = format!(
            "UPDATE tasks.step_attempts
                SET status = 'completed', output = $3, finished_at = clock_timestamp(),
                    updated_at = clock_timestamp()
              WHERE namespace = $1 AND id = $2
          RETURNING {STEP_COLUMNS}"
        );
        let done = sqlx::query_as::<_, StepRow>(&finish)
            .bind(&*self.namespace)
            .bind(attempt.id)
            .bind(&output)
            .fetch_one(&mut *tx)
            .await
            .map_err(db(OPERATION))?
            .into_step(OPERATION)?;
        sqlx::query(
            "UPDATE tasks.workflow_runs SET wait_topic = NULL
              WHERE namespace = $1 AND id = $2 AND wait_topic IS NOT NULL",
        )
        .bind(&*self.namespace)
        .bind(params.run_id)
        .execute(&mut *tx)
        .await
        .map_err(db(OPERATION))?;
        tx.commit().await.map_err(db(OPERATION))?;
        Ok(EventWait::Done(done))
    }

    async fn list_events(&self, run_id: Uuid) -> StoreResult<Vec<RunEvent>> {
        retrying(Operation::ListEvents, move || async move {
            const OPERATION: Operation = Operation::ListEvents;
            let sql = format!(
                "SELECT {EVENT_COLUMNS} FROM tasks.events
              WHERE namespace = $1 AND workflow_run_id = $2
              ORDER BY created_at, id"
            );
            let rows = sqlx::query_as::<_, EventRow>(&sql)
                .bind(&*self.namespace)
                .bind(run_id)
                .fetch_all(&self.pool)
                .await
                .map_err(db(OPERATION))?;
            Ok(rows.into_iter().map(RunEvent::from).collect())
        })
        .await
    }
}
