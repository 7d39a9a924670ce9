//! Listings: filters, sort order, cursors and pages of [`RunStore::list_runs`] and
//! [`StepStore::list_step_attempts`], and the page arithmetic every store shares.

#[cfg(doc)]
use crate::{RunStore, StepStore};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{StoreError, StoreResult};
use crate::limits::{self, Field, LimitError};
use crate::model::RunStatus;

#[cfg(doc)]
use super::Store;
#[cfg(doc)]
use crate::model::WorkflowRun;

/// The page size used when a listing sets no limit.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// Sort order of a listing, by `(created_at, id)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// Parameters of [`RunStore::list_runs`].
#[derive(Debug, Clone, Default)]
pub struct ListRuns {
    /// Keep runs in any of these statuses (empty: all).
    pub statuses: Vec<RunStatus>,
    /// Keep runs of this workflow.
    pub workflow_name: Option<String>,
    /// Keep runs created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Keep runs created at or before this instant.
    pub created_before: Option<DateTime<Utc>>,
    /// Keep the children of this run ([`WorkflowRun::parent_run_id`]).
    pub parent_run_id: Option<Uuid>,
    /// Keep runs of this workflow version ([`WorkflowRun::version`]).
    pub version: Option<String>,
    /// Keep runs of this queue ([`WorkflowRun::queue`]).
    pub queue: Option<String>,
    /// Keep runs of this concurrency key.
    pub concurrency_key: Option<String>,
    /// Keep the run whose id this is, and the runs started with this idempotency key (of
    /// any workflow): an operator's search box. Matched exactly, through the primary key
    /// and the index of idempotency keys.
    pub search: Option<String>,
    /// Page order.
    pub order: Order,
    /// Page size (default [`DEFAULT_PAGE_SIZE`]).
    pub limit: Option<u32>,
    /// Return the page after this cursor.
    pub after: Option<Cursor>,
    /// Return the page before this cursor.
    pub before: Option<Cursor>,
}

impl ListRuns {
    /// Checks the namespace, the filters and the cursors against the [`limits`]. A store reaches it
    /// through its operation's function in [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_namespace(namespace)?;
        if let Some(name) = &self.workflow_name {
            limits::check_text(
                Field::WorkflowNameFilter,
                name,
                limits::MAX_WORKFLOW_NAME_BYTES,
            )?;
        }
        if let Some(version) = &self.version {
            limits::check_text(Field::Version, version, limits::MAX_VERSION_BYTES)?;
        }
        if let Some(queue) = &self.queue {
            limits::check_text(Field::Queue, queue, limits::MAX_QUEUE_NAME_BYTES)?;
        }
        if let Some(key) = &self.concurrency_key {
            limits::check_text(
                Field::ConcurrencyKey,
                key,
                limits::MAX_CONCURRENCY_KEY_BYTES,
            )?;
        }
        if let Some(search) = &self.search {
            limits::check_text(
                Field::IdempotencyKey,
                search,
                limits::MAX_IDEMPOTENCY_KEY_BYTES,
            )?;
        }
        if let Some(at) = self.created_after {
            limits::check_time(Field::CreatedAfter, at)?;
        }
        if let Some(at) = self.created_before {
            limits::check_time(Field::CreatedBefore, at)?;
        }
        check_cursors(self.after, self.before)
    }
}

impl ListRuns {
    /// [`ListRuns::search`] read as a run id, when it is one.
    pub fn search_id(&self) -> Option<Uuid> {
        self.search
            .as_deref()
            .and_then(|text| text.trim().parse().ok())
    }
}

/// Checks the instants of listing cursors.
fn check_cursors(after: Option<Cursor>, before: Option<Cursor>) -> Result<(), LimitError> {
    for cursor in after.iter().chain(before.iter()) {
        limits::check_time(Field::Cursor, cursor.created_at)?;
    }
    Ok(())
}

/// Parameters of [`StepStore::list_step_attempts`].
#[derive(Debug, Clone)]
pub struct ListStepAttempts {
    /// The run whose attempts are listed.
    pub workflow_run_id: Uuid,
    /// Page order.
    pub order: Order,
    /// Page size (default [`DEFAULT_PAGE_SIZE`]).
    pub limit: Option<u32>,
    /// Return the page after this cursor.
    pub after: Option<Cursor>,
    /// Return the page before this cursor.
    pub before: Option<Cursor>,
}

impl ListStepAttempts {
    /// Checks the namespace and the cursors against the [`limits`]. A store reaches it through its
    /// operation's function in [`store::check`](crate::store::check).
    pub fn check(&self, namespace: &str) -> Result<(), LimitError> {
        limits::check_namespace(namespace)?;
        check_cursors(self.after, self.before)
    }

    /// The first page of attempts of `workflow_run_id`, oldest first.
    pub fn new(workflow_run_id: Uuid) -> Self {
        ListStepAttempts {
            workflow_run_id,
            order: Order::Asc,
            limit: None,
            after: None,
            before: None,
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items, in the requested order.
    pub data: Vec<T>,
    /// Pass as `after` to get the next page; `None` on the last page.
    pub next: Option<Cursor>,
    /// Pass as `before` to get the previous page; `None` on the first page.
    pub prev: Option<Cursor>,
}

/// An opaque position in a listing: a `(created_at, id)` pair, exact to the microsecond.
///
/// Cursors print as URL-safe strings and parse back with [`str::parse`]; a string that is
/// not a cursor is a [`StoreError::InvalidCursor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    created_at: DateTime<Utc>,
    id: Uuid,
}

impl Cursor {
    /// The cursor pointing at an item created at `created_at` with `id`.
    pub fn new(created_at: DateTime<Utc>, id: Uuid) -> Self {
        Cursor { created_at, id }
    }

    /// The creation time the cursor points at.
    pub fn created_at(&self) -> DateTime<Utc> {
        self.created_at
    }

    /// The id the cursor points at.
    pub fn id(&self) -> Uuid {
        self.id
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raw = format!("{}|{}", self.created_at.timestamp_micros(), self.id);
        f.write_str(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw))
    }
}

impl std::str::FromStr for Cursor {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| StoreError::InvalidCursor {
            reason: format!("{reason} in {s:?}"),
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| invalid("not base64"))?;
        let raw = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8"))?;
        let (micros, id) = raw.split_once('|').ok_or_else(|| invalid("no separator"))?;
        let micros: i64 = micros.parse().map_err(|_| invalid("bad timestamp"))?;
        let created_at = DateTime::from_timestamp_micros(micros)
            .filter(|at| limits::check_time(Field::Cursor, *at).is_ok())
            .ok_or_else(|| invalid("timestamp out of range"))?;
        let id = Uuid::parse_str(id).map_err(|_| invalid("bad id"))?;
        Ok(Cursor { created_at, id })
    }
}

/// Resolved paging parameters shared by every store's listings.
#[derive(Debug, Clone, Copy)]
pub struct PageQuery {
    /// Items per page.
    pub limit: u32,
    /// The cursor to start from, if any.
    pub cursor: Option<Cursor>,
    /// The cursor came from `before` (walking backwards).
    pub backwards: bool,
    /// The order the caller asked for.
    pub order: Order,
}

impl PageQuery {
    /// The page a listing asked for: at most `limit` items (the default page size when
    /// `None`), after or before a cursor, in `order`. Errors: [`StoreError::InvalidArgument`]
    /// for a limit of 0, or both cursors at once.
    pub fn new(
        limit: Option<u32>,
        after: Option<Cursor>,
        before: Option<Cursor>,
        order: Order,
    ) -> StoreResult<Self> {
        let limit = limit.unwrap_or(DEFAULT_PAGE_SIZE);
        if limit == 0 {
            return Err(StoreError::InvalidArgument(
                "limit must be at least 1".into(),
            ));
        }
        if after.is_some() && before.is_some() {
            return Err(StoreError::InvalidArgument(
                "pass either `after` or `before`, not both".into(),
            ));
        }
        Ok(PageQuery {
            limit,
            cursor: after.or(before),
            backwards: before.is_some(),
            order,
        })
    }

    /// Whether rows are fetched in ascending `(created_at, id)` order.
    pub fn scan_ascending(&self) -> bool {
        (self.order == Order::Asc) != self.backwards
    }

    /// The comparison against the cursor: rows strictly after it in scan order.
    pub fn cursor_operator(&self) -> &'static str {
        if self.scan_ascending() { ">" } else { "<" }
    }

    /// `ASC` or `DESC` for the scan.
    pub fn sql_direction(&self) -> &'static str {
        if self.scan_ascending() { "ASC" } else { "DESC" }
    }

    /// Turns the `limit + 1` rows fetched in scan order into a page.
    pub fn finish<T>(&self, mut rows: Vec<T>, key: impl Fn(&T) -> Cursor) -> Page<T> {
        let limit = self.limit as usize;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let (has_next, has_prev) = if self.backwards {
            rows.reverse();
            (true, more)
        } else {
            (more, self.cursor.is_some())
        };
        let next = if has_next {
            rows.last().map(&key)
        } else {
            None
        };
        let prev = if has_prev {
            rows.first().map(&key)
        } else {
            None
        };
        Page {
            data: rows,
            next,
            prev,
        }
    }
}

/// `statuses` in order, once each, with the count a store's `GROUP BY status` rows have for
/// it (zero when absent): what [`RunStore::count_runs`] returns.
pub fn counts_in_order(statuses: &[RunStatus], rows: Vec<(String, i64)>) -> Vec<(RunStatus, u64)> {
    let counted: Vec<(RunStatus, u64)> = rows
        .into_iter()
        .filter_map(|(status, count)| Some((status.parse().ok()?, u64::try_from(count).ok()?)))
        .collect();
    let mut counts: Vec<(RunStatus, u64)> = Vec::with_capacity(statuses.len());
    for &status in statuses {
        if counts.iter().any(|(seen, _)| *seen == status) {
            continue;
        }
        let count = counted
            .iter()
            .find(|(found, _)| *found == status)
            .map_or(0, |(_, count)| *count);
        counts.push((status, count));
    }
    counts
}
