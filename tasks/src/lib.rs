//! Durable workflows for Rust.
pub use tasks_macros::{step, workflow};
pub use tasks_runtime::*;

#[doc(hidden)]
pub mod __private {
    pub use tasks_runtime::private::*;
}
