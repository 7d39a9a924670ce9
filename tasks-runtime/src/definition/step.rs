//! What `#[step]` generates: the static definition of a step function, and where a
//! workflow or step was defined.

use crate::retry::RetryPolicy;

/// Where a workflow or step was defined, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceLocation {
    /// `file!()` of the definition.
    pub file: &'static str,
    /// `line!()` of the definition.
    pub line: u32,
    /// `column!()` of the definition.
    pub column: u32,
    /// `module_path!()` of the definition.
    pub module_path: &'static str,
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{} ({})",
            self.file, self.line, self.column, self.module_path
        )
    }
}

/// Everything the runtime knows about one `#[step]` function.
#[derive(Debug)]
pub struct StepDefinition {
    /// The step's base name (defaults to the function name).
    pub name: &'static str,
    /// The step-level retry policy; `None` uses [`RetryPolicy::DEFAULT_STEP`].
    pub retry_policy: Option<RetryPolicy>,
    /// The limit of each attempt (`#[step(timeout = "30s")]`); `None` waits as long as the
    /// attempt takes.
    pub timeout: Option<std::time::Duration>,
    /// Where the step function is.
    pub location: SourceLocation,
    /// The step function's path (`module::function`), recorded with each attempt and
    /// compared on replay.
    pub path: &'static str,
    /// The step's argument and output types as written (`(&Order, u32) -> Receipt`),
    /// recorded with each attempt and compared on replay: a changed type is a
    /// [`NonDeterminism`](crate::NonDeterminism), not a stored output handed to the wrong
    /// type.
    pub signature: &'static str,
}

/// Link-time registration of a step, collected by `inventory`, so that the registry can
/// refuse two different steps with one name.
#[derive(Debug)]
pub struct StepRegistration(pub &'static StepDefinition);

inventory::collect!(StepRegistration);
