//! Compensation: undo what a workflow's earlier steps did when a later one fails (the saga
//! pattern).
//!
//! A [`Saga`] holds the compensations registered after each step that took effect. When a
//! later step fails, [`Saga::compensate`] (or [`Saga::or_compensate`], which does it for a
//! failed result) runs them in reverse order of registration.
//!
//! A compensation is a closure that calls `#[step]` functions, so each one is recorded like
//! any other step: a replay (after a crash, a durable sleep or an event wait in the middle
//! of compensating) returns the compensations that completed without running them again,
//! and runs only those that had not. Nothing here is stored by itself: the saga is rebuilt
//! by the replay, because the workflow registers the same compensations in the same order
//! on every execution. A compensation that does its work outside a step runs again on
//! every replay, as any code outside a step does.
//!
//! Every compensation runs even when an earlier one fails (after its own retries): one
//! failure does not leave the others undone. The failures are returned together as a
//! [`CompensationError`].
//!
//! An example, compiled with the `tasks` facade (the guide's semantics chapter holds it):
//!
//! ```ignore
//! use tasks::{Saga, WorkflowContext, WorkflowError, step, workflow};
//!
//! #[step]
//! async fn book_flight(trip: String) -> Result<String, WorkflowError> {
//!     Ok(format!("flight for {trip}"))
//! }
//!
//! #[step]
//! async fn cancel_flight(booking: String) -> Result<(), WorkflowError> {
//!     let _ = booking;
//!     Ok(())
//! }
//!
//! #[step]
//! async fn book_hotel(trip: String) -> Result<String, WorkflowError> {
//!     Err(WorkflowError::msg(format!("no room for {trip}")))
//! }
//!
//! #[workflow]
//! async fn trip(_ctx: WorkflowContext, trip: String) -> Result<(String, String), WorkflowError> {
//!     let mut saga = Saga::new();
//!     let flight = book_flight(trip.clone()).await?;
//!     let booked = flight.clone();
//!     saga.add(move || cancel_flight(booked));
//!     // On an error, the flight is cancelled before the error is returned.
//!     let hotel = saga.or_compensate(book_hotel(trip).await).await?;
//!     Ok((flight, hotel))
//! }
//! ```

use std::fmt;
use std::future::Future;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use crate::WorkflowError;

/// One registered compensation, ready to run.
type Compensation = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), WorkflowError>> + Send>;

/// The compensations of a workflow's steps that took effect, run in reverse order when a
/// later step fails. See [the module](self).
#[derive(Default)]
pub struct Saga {
    compensations: Vec<Compensation>,
}

impl fmt::Debug for Saga {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saga")
            .field("compensations", &self.compensations.len())
            .finish()
    }
}

impl Saga {
    /// A saga with nothing to compensate yet.
    pub fn new() -> Self {
        Saga::default()
    }

    /// Registers `compensation`, which undoes the step that has just taken effect: it runs,
    /// in reverse order of registration, when the saga compensates. It should call
    /// `#[step]` functions (so that it is recorded and runs once across replays), and its
    /// output is discarded.
    pub fn add<F, Fut, T, E>(&mut self, compensation: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        WorkflowError: From<E>,
    {
        self.compensations.push(Box::new(move || {
            compensation()
                .map(|result| result.map(drop).map_err(WorkflowError::from))
                .boxed()
        }));
    }

    /// How many compensations are registered and not yet run.
    pub fn len(&self) -> usize {
        self.compensations.len()
    }

    /// Whether no compensation is registered (or all have run).
    pub fn is_empty(&self) -> bool {
        self.compensations.is_empty()
    }

    /// Runs every registered compensation, the last registered first, each to its end, and
    /// empties the saga. Every one runs even if an earlier one fails.
    ///
    /// Errors: a [`CompensationError`] with every compensation that failed (after its
    /// steps' retries), in the order they ran.
    pub async fn compensate(&mut self) -> Result<(), CompensationError> {
        let mut failures = Vec::new();
        while let Some(compensation) = self.compensations.pop() {
            let position = self.compensations.len();
            if let Err(error) = compensation().await {
                failures.push(CompensationFailure { position, error });
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CompensationError {
                cause: None,
                failures,
            })
        }
    }

    /// Passes an `Ok` value through; on an error, [compensates](Saga::compensate) first and
    /// then returns the error as a [`WorkflowError`]. When a compensation failed too, the
    /// returned error is the [`CompensationError`] (its message begins with the original
    /// error's, which [`CompensationError::cause`] holds; reach it with
    /// [`WorkflowError::downcast_ref`]).
    pub async fn or_compensate<T, E>(&mut self, result: Result<T, E>) -> Result<T, WorkflowError>
    where
        WorkflowError: From<E>,
    {
        match result {
            Ok(value) => Ok(value),
            Err(error) => {
                let error = WorkflowError::from(error);
                match self.compensate().await {
                    Ok(()) => Err(error),
                    Err(mut failed) => {
                        failed.cause = Some(error);
                        Err(<WorkflowError as From<CompensationError>>::from(failed))
                    }
                }
            }
        }
    }
}

/// One compensation that failed.
#[derive(Debug)]
pub struct CompensationFailure {
    /// Its position in the order of registration (0: the first registered, which runs
    /// last).
    pub position: usize,
    /// Why it failed.
    pub error: WorkflowError,
}

/// Compensations that failed while a [`Saga`] compensated; every other compensation ran.
#[derive(Debug)]
pub struct CompensationError {
    cause: Option<WorkflowError>,
    failures: Vec<CompensationFailure>,
}

impl CompensationError {
    /// The compensations that failed, in the order they ran (the last registered first).
    pub fn failures(&self) -> &[CompensationFailure] {
        &self.failures
    }

    /// The error the saga compensated for, when [`Saga::or_compensate`] was given one.
    pub fn cause(&self) -> Option<&WorkflowError> {
        self.cause.as_ref()
    }
}

impl fmt::Display for CompensationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(cause) = &self.cause {
            write!(f, "{cause}; then ")?;
        }
        let failed = self.failures.len();
        write!(
            f,
            "{failed} compensation{} failed:",
            if failed == 1 { "" } else { "s" }
        )?;
        for (n, failure) in self.failures.iter().enumerate() {
            let separator = if n == 0 { " " } else { "; " };
            write!(
                f,
                "{separator}compensation {} ({})",
                failure.position, failure.error
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for CompensationError {}
