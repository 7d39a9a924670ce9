//! Why a run stops before its workflow function returns ([`Halt`]), decided from the
//! store's answer to one of its writes ([`Halt::after`]), and the retries of a write that
//! failed on a database error ([`retrying`]): refusals are answers and are never retried.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{StoreError, StoreResult};
use crate::failure::ErrorRecord;
use crate::model::RunStatus;

/// Why a run stopped executing before its workflow function returned.
#[derive(Debug)]
pub(crate) enum Halt {
    /// Park the run until this instant (durable sleep or a long step backoff).
    Sleep(DateTime<Utc>),
    /// The run was paused or canceled by an operator.
    Interrupted(RunStatus),
    /// Another worker holds the run now.
    LeaseLost,
    /// The run cannot continue: fail it for good.
    Fail(ErrorRecord),
    /// The workflow continues as new (`ctx.continue_as_new`) with this input: finish the run
    /// and create its successor.
    Continue(serde_json::Value),
    /// The store kept failing (past the session's retries); leave the run to other workers.
    Store(StoreError),
    /// A replay verification reached the call named here, which the run's history does
    /// not hold: executing it would write (see [`RunSession::verifying`](super::RunSession::verifying)).
    /// Never set while a worker executes a run.
    Unrecorded(String),
    /// The store already parked the run (an event wait with no event yet): it sleeps until
    /// `until` (the wait's timeout, or `limits::LATEST`), as of `parked_at` by the store's
    /// clock. Nothing is left to write.
    Parked {
        /// When the run is claimable again without a send.
        until: DateTime<Utc>,
        /// The store's clock when it parked the run.
        parked_at: DateTime<Utc>,
    },
}

impl Halt {
    /// Why a run stops after the store refused or failed one of its writes.
    ///
    /// A [`StoreError::Limit`] is a refusal of the value written, which the next execution
    /// would write again: the run fails for good at once ([`limit_failure`]) instead of
    /// being left to its lease, to be refused again after every one. So is a
    /// [`StoreError::Unsupported`]: the store lacks a capability the workflow uses.
    pub(crate) fn after(error: StoreError) -> Halt {
        match error {
            StoreError::WrongState { status, .. }
                if matches!(status, RunStatus::Paused | RunStatus::Canceled) =>
            {
                Halt::Interrupted(status)
            }
            StoreError::WrongState { .. } | StoreError::LeaseLost { .. } => Halt::LeaseLost,
            StoreError::Limit(limit) => Halt::Fail(limit_failure(&limit)),
            // Another execution would ask the same store for the same capability.
            unsupported @ StoreError::Unsupported { .. } => Halt::Fail(
                ErrorRecord::from_error(&unsupported)
                    .with_kind("unsupported")
                    .non_retryable(),
            ),
            other => Halt::Store(other),
        }
    }
}

/// The error that fails a run for good when the store refused one of its writes for a value
/// past the [`limits`](crate::limits): kind `limit`, non-retryable, its message naming the
/// field and the limit.
pub(crate) fn limit_failure(limit: &crate::limits::LimitError) -> ErrorRecord {
    ErrorRecord::from_error(limit)
        .with_kind("limit")
        .non_retryable()
}

/// First pause before a write that failed on a database error is tried again.
const FIRST_RETRY: Duration = Duration::from_millis(50);

/// Longest pause between two tries of a write.
const LONGEST_RETRY: Duration = Duration::from_secs(2);

/// Runs `write` until it succeeds or fails with anything but a transient database error
/// ([`StoreError::is_transient`]), pausing between tries from [`FIRST_RETRY`], doubling up
/// to [`LONGEST_RETRY`], for up to `budget` in all; then returns the last error.
pub(crate) async fn retrying<T, F, Fut>(budget: Duration, mut write: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = FIRST_RETRY;
    loop {
        match write().await {
            Err(error) if error.is_transient() && started.elapsed() + pause < budget => {
                tracing::warn!(%error, retry_in = ?pause, "a write of the run failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_RETRY);
            }
            outcome => return outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use uuid::Uuid;

    use super::*;

    fn database_error() -> StoreError {
        StoreError::database(crate::error::Operation::CompleteRun, "connection reset")
    }

    #[test]
    fn a_limit_refusal_fails_the_run_for_good_and_other_errors_do_not() {
        use crate::limits::{Field, LimitError, MAX_PAYLOAD_BYTES};
        let limit = LimitError::TooLarge {
            field: Field::StepOutput,
            bytes: MAX_PAYLOAD_BYTES + 1,
            limit: MAX_PAYLOAD_BYTES,
        };
        match Halt::after(StoreError::Limit(limit.clone())) {
            Halt::Fail(record) => {
                assert_eq!(record.kind.as_deref(), Some("limit"));
                assert!(!record.retryable);
                assert_eq!(record.message, limit.to_string());
                assert!(record.message.contains("the step output"), "{record}");
                assert!(
                    record.message.contains(&MAX_PAYLOAD_BYTES.to_string()),
                    "{record}"
                );
            }
            other => panic!("expected the run to fail for good, got {other:?}"),
        }
        assert!(matches!(Halt::after(database_error()), Halt::Store(_)));
        let lost = StoreError::LeaseLost {
            id: Uuid::nil(),
            worker_id: "w".into(),
            claim_epoch: 1,
        };
        assert!(matches!(Halt::after(lost), Halt::LeaseLost));
    }

    #[tokio::test]
    async fn database_errors_are_retried_until_the_write_goes_through() {
        let tries = AtomicU32::new(0);
        let outcome = retrying(Duration::from_secs(30), || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0..3 => Err(database_error()),
                _ => Ok("written"),
            }
        })
        .await;
        assert_eq!(outcome.ok(), Some("written"));
        assert_eq!(tries.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn refusals_are_not_retried() {
        let tries = AtomicU32::new(0);
        let outcome: StoreResult<()> = retrying(Duration::from_secs(30), || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::LeaseLost {
                id: Uuid::nil(),
                worker_id: "w".into(),
                claim_epoch: 1,
            })
        })
        .await;
        assert!(matches!(outcome, Err(StoreError::LeaseLost { .. })));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn retries_stop_at_the_budget() {
        let started = tokio::time::Instant::now();
        let tries = AtomicU32::new(0);
        let outcome: StoreResult<()> = retrying(Duration::from_millis(300), || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(database_error())
        })
        .await;
        assert!(matches!(outcome, Err(StoreError::Database { .. })));
        assert!(started.elapsed() < Duration::from_millis(300));
        // Tried at 0, 50 and 150 ms; the next pause would end past the budget.
        assert_eq!(tries.load(Ordering::SeqCst), 3);
    }
}
