//! The fenced transition every run transition goes through ([`PgStore::transition`]),
//! what it announces, and what a store does with a run it cannot decode (quarantine) or a
//! step write its fence refused.

use crate::reconnect::db;
use crate::rows::{RUN_COLUMNS, decode_run};
use crate::{PgStore, RunQuery, children, notify};
use tasks_core::Holder;
use tasks_core::error::{Operation, StoreError, StoreResult};
use tasks_core::model::{StepStatus, WorkflowRun};
use tasks_core::store::{Notification, StepStore, StepUpdate};
use tasks_core::transition::{
    Column, EXPIRE, JSON_COLUMNS, QUARANTINE, QUARANTINED, Transition, explain_step_miss,
    interrupted, quarantine_error,
};
use uuid::Uuid;

impl PgStore {
    /// Applies `transition` to a run in one fenced statement:
    /// `UPDATE .. SET {set}, updated_at = now() WHERE <run> AND <fence> RETURNING <run>`,
    /// with `$1` the namespace, `$2` the run, `$3` and `$4` the holder's worker id and claim
    /// epoch (referenced by the fence of a leased transition only); `bind` binds the `SET`
    /// list's values from `$5` on. A miss is settled by the transition (already done, or why
    /// not); a change is announced.
    pub(crate) async fn transition(
        &self,
        transition: &Transition,
        set: &str,
        run_id: Uuid,
        holder: Option<&Holder>,
        bind: impl for<'q> FnOnce(RunQuery<'q>) -> RunQuery<'q>,
    ) -> StoreResult<WorkflowRun> {
        // A transition that may finish the run wakes its parent in the same statement, and
        // locks the parent first; a cancel also cancels the descendants that cascade (see
        // `children.rs`).
        let finishing = transition.wakes_parent();
        let cascade = transition.operation == Operation::CancelRun;
        let update = format!(
            "UPDATE tasks.workflow_runs SET {set}, updated_at = now()
              WHERE namespace = $1 AND id = $2 AND {fence}{parent_first}
          RETURNING {RUN_COLUMNS}",
            fence = transition.fence("", "$3", "$4"),
            parent_first = if finishing {
                format!(" AND {}", children::PARENT_FIRST)
            } else {
                String::new()
            },
        );
        let sql = match (finishing, cascade) {
            (false, _) => update,
            (true, false) => format!(
                "WITH {parent_lock}, done AS ({update}), {woken}
                 SELECT done.*, ARRAY[]::uuid[] AS cascaded FROM done",
                parent_lock = children::PARENT_LOCK,
                woken = children::wake_parent_cte(),
            ),
            (true, true) => format!(
                "WITH RECURSIVE {parent_lock}, done AS ({update}), {woken}, {cascade}
                 SELECT done.*, ARRAY(SELECT id FROM cascaded) AS cascaded FROM done",
                parent_lock = children::PARENT_LOCK,
                woken = children::wake_parent_cte(),
                cascade = children::cascade_ctes(),
            ),
        };
        let query = sqlx::query(&sql)
            .bind(&*self.namespace)
            .bind(run_id)
            .bind(holder.map(|holder| holder.worker_id.clone()))
            .bind(holder.map(|holder| holder.claim_epoch));
        let updated = bind(query)
            .fetch_optional(&self.pool)
            .await
            .map_err(db(transition.operation))?;
        match updated {
            Some(row) => {
                let run = decode_run(&row, transition.operation)?;
                self.announce_now(transition, &run).await;
                if finishing {
                    let cascaded: Vec<Uuid> =
                        sqlx::Row::try_get(&row, "cascaded").map_err(db(transition.operation))?;
                    self.announce_family(&run, &cascaded).await;
                }
                Ok(run)
            }
            None => {
                tracing::debug!(%run_id, holder = ?holder, operation = %transition.operation, "fenced update matched no run");
                let current = self.fetch_run(run_id, transition.operation).await?;
                transition.settle(run_id, holder, current)
            }
        }
    }

    /// Sends what `transition` announces about `run` (after its write committed), and
    /// returns the run. The batched path: this process's subscribers have it at once
    /// ([`Hub::deliver_here`](crate::notify::Hub::deliver_here)), and the `NOTIFY` for
    /// every other process joins the next batch of the store's wake-up sender.
    pub(crate) fn announce(&self, transition: &Transition, run: WorkflowRun) -> WorkflowRun {
        let notifications: Vec<Notification> = transition.announcements(&run).collect();
        for payload in self.outgoing(&notifications) {
            self.batcher.send(payload);
        }
        run
    }

    /// Hands `notifications` to this process's subscribers
    /// ([`Hub::deliver_here`](crate::notify::Hub::deliver_here)), and returns the
    /// payloads of their `NOTIFY` for every other process.
    pub(crate) fn outgoing(&self, notifications: &[Notification]) -> Vec<String> {
        let origin = self.hub.deliver_here(notifications);
        notifications
            .iter()
            .map(|notification| notify::payload(notification, origin))
            .collect()
    }

    /// Sends what `transition` announces about `run` after the transition committed (see
    /// [`PgStore::notify_now`]): the path of single writes (an operator's cancel, pause or
    /// resume, a failure), which starts no background task. A wake-up that cannot be sent
    /// is logged: the run changed, and pollers find it.
    pub(crate) async fn announce_now(&self, transition: &Transition, run: &WorkflowRun) {
        let notifications: Vec<Notification> = transition.announcements(run).collect();
        self.notify_now(&notifications).await;
    }

    /// Sends `notifications` now: to this process's subscribers at once
    /// ([`Hub::deliver_here`](crate::notify::Hub::deliver_here)), and to every other process
    /// through the store's wake-up sender when a worker already runs it, else in one
    /// statement of their own.
    pub(crate) async fn notify_now(&self, notifications: &[Notification]) {
        if notifications.is_empty() {
            return;
        }
        let payloads = self.outgoing(notifications);
        if self.batcher.try_send(&payloads) {
            return;
        }
        let sent = sqlx::query(notify::NOTIFY_ALL)
            .bind(notify::CHANNEL)
            .bind(payloads)
            .execute(&self.pool)
            .await;
        if let Err(error) = sent {
            tracing::warn!(%error, "could not send a wake-up; workers and waiters will find the run by polling");
        }
    }

    /// Fails for good run `run_id`, just claimed by `holder`, whose row did not decode
    /// ([`QUARANTINE`]): its undecodable JSON `columns` are moved into the error record as
    /// text and reset, so the row reads again. Like every finishing transition, it wakes the
    /// run's parent when the run is a child. A failure is logged, not returned: the claim
    /// goes on with the other runs, and the run's lease brings it back.
    pub(crate) async fn quarantine(
        &self,
        run_id: Uuid,
        holder: &Holder,
        reason: &str,
        columns: &[&str],
    ) {
        tracing::error!(run.id = %run_id, reason, "a claimed run's stored row cannot be decoded; failing it");
        // Every right-hand side reads the row as it was; `error` is replaced in any case.
        let mut moved = Vec::new();
        let mut resets = String::new();
        for (column, empty) in JSON_COLUMNS {
            if columns.contains(column) {
                moved.push(format!("'{column}', {column}::text"));
                if *column != "error" {
                    resets.push_str(&format!(", {column} = {empty}"));
                }
            }
        }
        let error = format!(
            "$5::jsonb || jsonb_build_object('quarantined', jsonb_build_object({}))",
            moved.join(", ")
        );
        let set = QUARANTINED.set_sql("now()", &[(Column::Error, &error)]) + &resets;
        let error = quarantine_error(run_id, reason);
        let failed = self
            .transition(&QUARANTINE, &set, run_id, Some(holder), |q| q.bind(error))
            .await;
        match failed {
            Ok(_) => {}
            Err(StoreError::LeaseLost { .. } | StoreError::WrongState { .. }) => {
                tracing::warn!(run.id = %run_id, "the corrupt run changed before it could be failed")
            }
            Err(error) => {
                tracing::warn!(run.id = %run_id, %error, "could not fail a corrupt run; its lease will bring it back")
            }
        }
    }

    /// Announces run `row`, failed by the claim's deadline sweep ([`EXPIRE`]): its finish,
    /// and its parent's wake-up when it is a child. A row that does not decode is still
    /// announced finished, by its id.
    pub(crate) async fn announce_expired(&self, row: &sqlx::postgres::PgRow) {
        match decode_run(row, Operation::ClaimRuns) {
            Ok(run) => {
                self.announce_now(&EXPIRE, &run).await;
                self.announce_family(&run, &[]).await;
            }
            Err(error) => {
                tracing::warn!(%error, "a run failed by its deadline does not decode");
                if let Ok(run_id) = sqlx::Row::try_get::<Uuid, _>(row, "id") {
                    let parent: Option<Uuid> =
                        sqlx::Row::try_get(row, "parent_run_id").unwrap_or(None);
                    let mut notifications = vec![Notification::RunFinished {
                        namespace: self.namespace.to_string(),
                        run_id,
                    }];
                    if parent.is_some() {
                        notifications.push(Notification::RunAvailable {
                            namespace: self.namespace.to_string(),
                        });
                    }
                    self.notify_now(&notifications).await;
                }
            }
        }
    }

    /// A step attempt of `run_id` could not be written because the run is not running under
    /// `holder`'s claim. When it was paused or canceled meanwhile, `interrupt` writes the attempt
    /// marked like the run (returning whether it could) and the outcome is an interruption;
    /// otherwise the miss is explained.
    pub(crate) async fn step_refused<'a, F>(
        &'a self,
        transition: &Transition,
        run_id: Uuid,
        step_id: Option<Uuid>,
        holder: &Holder,
        interrupt: impl FnOnce(StepStatus) -> F,
    ) -> StoreResult<StepUpdate>
    where
        F: std::future::Future<Output = StoreResult<bool>> + 'a,
    {
        let operation = transition.operation;
        let run = self.fetch_run(run_id, operation).await?;
        if let Some(run) = &run
            && let Some(mark) = interrupted(run.status)
            && interrupt(mark).await?
        {
            return Ok(StepUpdate::Interrupted {
                run_status: run.status,
            });
        }
        let Some(step_id) = step_id else {
            return Err(transition.miss(run_id, Some(holder), run.as_ref()));
        };
        let step = self.get_step_attempt(step_id).await?;
        Err(explain_step_miss(
            transition,
            run_id,
            step_id,
            holder,
            run.as_ref(),
            step.as_ref(),
        ))
    }
}
