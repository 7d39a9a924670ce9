//! Runs: creation (with idempotency keys and their scopes), reads, listings and counts.

use crate::MemoryStore;
use crate::tables::{Row, Tx, absent_if_null, storable, stored};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tasks_core::error::StoreResult;
use tasks_core::idempotency::{IdempotencyScope, KeyHold};
use tasks_core::model::{RunStatus, WorkflowRun};
use tasks_core::store::{
    CreateRun, CreatedRun, Cursor, ListRuns, Notification, Page, PageQuery, RunStore, check,
    counts_in_order,
};
use tasks_core::transition::CREATED;
use uuid::Uuid;

/// A run checked and computed, ready to insert: nothing about it can fail any more.
pub(crate) struct NewRun {
    row: Row,
}

impl NewRun {
    /// A pending run of `params` with id `id`, created now, with every fallible value
    /// computed (its config, its start, its deadline, when its key lapses).
    pub(crate) fn prepare(tx: &Tx<'_>, params: &CreateRun, id: Uuid) -> StoreResult<Self> {
        let config = params.stored_config()?;
        let available_at = match (params.available_at, params.delay) {
            (Some(at), _) => storable(at)?,
            (None, Some(delay)) => tx.plus(delay)?,
            (None, None) => tx.now,
        };
        let deadline_at = params.deadline_at.map(storable).transpose()?;
        let key_scope = match (&params.idempotency_key, params.idempotency_scope) {
            (None, _) | (Some(_), IdempotencyScope::ForEver) => KeyHold::ForEver,
            (Some(_), IdempotencyScope::WhileActive) => KeyHold::WhileActive,
            (Some(_), IdempotencyScope::Ttl(ttl)) => KeyHold::Until(tx.plus(ttl)?),
            // A scope this store does not know holds its key for ever, the safe side.
            (Some(_), _) => KeyHold::ForEver,
        };
        let run = WorkflowRun {
            namespace: tx.namespace.to_owned(),
            id,
            workflow_name: params.workflow_name.clone(),
            version: params.version.clone(),
            status: CREATED,
            idempotency_key: params.idempotency_key.clone(),
            config,
            context: absent_if_null(params.context.clone()),
            input: absent_if_null(params.input.clone()),
            output: None,
            error: None,
            attempts: 0,
            parent_step_attempt_namespace: None,
            parent_step_attempt_id: None,
            worker_id: None,
            claim_epoch: 0,
            available_at: Some(available_at),
            deadline_at,
            started_at: None,
            finished_at: None,
            created_at: tx.now,
            updated_at: tx.now,
            retried_at: None,
            forked_from_run_id: None,
            forked_from_step: None,
            parent_run_id: None,
            cancel_with_parent: true,
            trace_context: params.trace_context.clone(),
            queue: params.stored_queue().to_owned(),
            lineage_root_id: None,
            continued_from_run_id: None,
            continued_as_run_id: None,
        };
        Ok(NewRun {
            row: Row {
                priority: params.priority,
                concurrency: params.concurrency.clone(),
                key_scope,
                ..Row::new(run)
            },
        })
    }

    /// The run, to adjust before it is inserted (a child's parent links).
    pub(crate) fn run_mut(&mut self) -> &mut WorkflowRun {
        &mut self.row.run
    }

    /// Inserts the run, unless its workflow and idempotency key are held by another run
    /// (once a holder whose scope lapsed has released the key): then that run is returned
    /// as it is. Announces nothing.
    pub(crate) fn insert(self, tx: &mut Tx<'_>) -> Inserted {
        let run = &self.row.run;
        if let Some(key) = &run.idempotency_key {
            let now = tx.now;
            if let Some(holder) = tx.space.runs.values_mut().find(|row| {
                row.run.workflow_name == run.workflow_name
                    && row.run.idempotency_key.as_ref() == Some(key)
            }) {
                if !holder.key_scope.lapsed(holder.run.status, now) {
                    return Inserted::Held(holder.run.clone());
                }
                holder.released_key = holder.run.idempotency_key.take();
            }
        }
        let run = self.row.run.clone();
        tx.space.runs.insert(run.id, self.row);
        Inserted::Created(run)
    }
}

/// What [`NewRun::insert`] did.
pub(crate) enum Inserted {
    /// It created the run.
    Created(WorkflowRun),
    /// The key is held by this run; nothing was created.
    Held(WorkflowRun),
}

/// Whether an item at `position` is strictly past `cursor` in the page's scan order.
pub(crate) fn beyond(
    page: &PageQuery,
    cursor: Option<Cursor>,
    position: (DateTime<Utc>, Uuid),
) -> bool {
    let Some(cursor) = cursor else {
        return true;
    };
    let cursor = (stored(cursor.created_at()), cursor.id());
    if page.scan_ascending() {
        position > cursor
    } else {
        position < cursor
    }
}

/// Sorts `items` in the page's scan order and keeps the `limit + 1` rows
/// [`PageQuery::finish`] expects.
pub(crate) fn scan<T>(
    page: &PageQuery,
    items: &mut Vec<T>,
    key: impl Fn(&T) -> (DateTime<Utc>, Uuid),
) {
    items.sort_by_key(key);
    if !page.scan_ascending() {
        items.reverse();
    }
    items.truncate(page.limit as usize + 1);
}

#[async_trait]
impl RunStore for MemoryStore {
    async fn create_or_get_run(&self, params: CreateRun) -> StoreResult<CreatedRun> {
        check::create_run(&self.namespace, &params)?;
        self.write(|tx| {
            let new = NewRun::prepare(tx, &params, Uuid::now_v7())?;
            match new.insert(tx) {
                Inserted::Created(run) => {
                    tx.notes.push(Notification::RunAvailable {
                        namespace: run.namespace.clone(),
                    });
                    Ok(CreatedRun { run, created: true })
                }
                // A repeat of an idempotent create: the first run.
                Inserted::Held(first) => Ok(CreatedRun {
                    run: first,
                    created: false,
                }),
            }
        })
    }

    async fn get_run(&self, run_id: Uuid) -> StoreResult<Option<WorkflowRun>> {
        Ok(self.read(|space| space.run(run_id)))
    }

    async fn list_runs(&self, params: ListRuns) -> StoreResult<Page<WorkflowRun>> {
        check::list_runs(&self.namespace, &params)?;
        let page = PageQuery::new(params.limit, params.after, params.before, params.order)?;
        let after = params.created_after.map(stored);
        let before = params.created_before.map(stored);
        let search_id = params.search_id();
        let mut runs: Vec<WorkflowRun> = self.read(|space| {
            space
                .runs
                .values()
                .filter(|row| {
                    params
                        .concurrency_key
                        .as_deref()
                        .is_none_or(|key| row.key() == Some(key))
                })
                .map(|row| &row.run)
                .filter(|run| {
                    params.search.as_ref().is_none_or(|search| {
                        run.idempotency_key.as_ref() == Some(search) || search_id == Some(run.id)
                    })
                })
                .filter(|run| params.statuses.is_empty() || params.statuses.contains(&run.status))
                .filter(|run| {
                    params
                        .workflow_name
                        .as_ref()
                        .is_none_or(|name| run.workflow_name == *name)
                })
                .filter(|run| {
                    params
                        .parent_run_id
                        .is_none_or(|parent| run.parent_run_id == Some(parent))
                })
                .filter(|run| {
                    params
                        .version
                        .as_ref()
                        .is_none_or(|version| run.version.as_ref() == Some(version))
                })
                .filter(|run| {
                    params
                        .queue
                        .as_ref()
                        .is_none_or(|queue| run.queue == *queue)
                })
                .filter(|run| after.is_none_or(|after| run.created_at >= after))
                .filter(|run| before.is_none_or(|before| run.created_at <= before))
                .filter(|run| beyond(&page, page.cursor, (run.created_at, run.id)))
                .cloned()
                .collect()
        });
        scan(&page, &mut runs, |run| (run.created_at, run.id));
        Ok(page.finish(runs, |run| Cursor::new(run.created_at, run.id)))
    }

    async fn count_runs(&self, statuses: &[RunStatus]) -> StoreResult<Vec<(RunStatus, u64)>> {
        if statuses.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.read(|space| {
            statuses
                .iter()
                .map(|status| {
                    let count = space.runs.values().filter(|row| row.run.status == *status);
                    (status.as_str().to_owned(), count.count() as i64)
                })
                .collect()
        });
        Ok(counts_in_order(statuses, rows))
    }
}
