//! Runtime of `tasks`: store, worker, replay executor and client. Users depend on the
//! `tasks` facade crate, which re-exports everything here.
#![warn(missing_docs)]

pub mod context;
pub mod definition;
pub mod error;
pub mod failure;
pub mod model;
pub mod postgres;
pub mod retry;
pub mod store;

#[doc(hidden)]
pub mod private;

pub use context::WorkflowContext;
pub use definition::{SourceLocation, StepDefinition, Workflow, WorkflowDefinition};
pub use error::{StoreError, StoreResult};
pub use failure::{ErrorRecord, RecordError, WorkflowError};
pub use model::{RunStatus, StepAttempt, StepKind, StepStatus, WorkflowRun};
pub use retry::RetryPolicy;
pub use store::{
    CreateRun, CreateStepAttempt, Cursor, FailRun, ListRuns, ListStepAttempts, Notification,
    NotificationStream, Order, Page, StepUpdate, Store, DEFAULT_NAMESPACE,
};
