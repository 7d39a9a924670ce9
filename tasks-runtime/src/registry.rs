//! The registry of workflows a binary can execute, built from link-time registrations.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::definition::{
    SourceLocation, StepDefinition, StepRegistration, Workflow, WorkflowDefinition,
    WorkflowRegistration,
};

/// Why the registry of workflows and steps could not be built. Nothing is executed with a
/// registry that has one of these problems.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Two workflow definitions with the same name and version.
    #[error(
        "workflow {name:?} version {version:?} is defined twice: at {first} and at {second}",
        version = version.unwrap_or("(none)")
    )]
    DuplicateWorkflow {
        /// The workflow name.
        name: &'static str,
        /// The version.
        version: Option<&'static str>,
        /// Where the first definition is.
        first: &'static SourceLocation,
        /// Where the second definition is.
        second: &'static SourceLocation,
    },
    /// Two different `#[step]` functions with the same name. A run records a step's
    /// attempts under its name (`name`, `name:1`, ... in call order), so two steps sharing
    /// one would share one sequence of records, and a replay whose calls came in another
    /// order would hand one step's stored output to the other.
    #[error(
        "step {name:?} is defined twice: at {first} and at {second}; give one of them another `name = \"...\"`"
    )]
    DuplicateStep {
        /// The step name.
        name: &'static str,
        /// Where the first definition is.
        first: &'static SourceLocation,
        /// Where the second definition is.
        second: &'static SourceLocation,
    },
    /// A workflow name, version, queue or step name with a character outside letters,
    /// digits, `_`, `-`, `.` and `/` (see [`is_valid_name`]), or longer than the stores'
    /// limit for it ([`MAX_WORKFLOW_NAME_BYTES`](crate::limits::MAX_WORKFLOW_NAME_BYTES) and
    /// the like); `#[workflow]` and `#[step]` refuse such literals at compile time, this
    /// catches definitions built by hand.
    #[error("{what} {name:?} at {location} is not a valid name: {reason}")]
    InvalidName {
        /// `"workflow name"`, `"workflow version"`, `"queue"` or `"step name"`.
        what: &'static str,
        /// The name as given.
        name: &'static str,
        /// Where the definition is.
        location: &'static SourceLocation,
        /// What is wrong with it.
        reason: String,
    },
}

/// The former name of [`RegistryError`], whose only problem was a duplicate workflow.
#[deprecated(
    note = "renamed to `RegistryError`, which also reports duplicate steps and invalid names"
)]
pub type DuplicateWorkflow = RegistryError;

pub use crate::limits::is_valid_name;

/// Why `name`, a `what` of a definition, could never be stored: a character outside
/// [`is_valid_name`]'s, or more bytes than the store's limit for it. `#[workflow]` and
/// `#[step]` check their literals at compile time; this catches the rest (a definition built
/// by hand, a default name taken from a long function name).
fn valid_name(what: &str, name: &str) -> Result<(), String> {
    is_valid_name(name)?;
    let limit = match what {
        "workflow version" => crate::limits::MAX_VERSION_BYTES,
        "queue" => crate::limits::MAX_QUEUE_NAME_BYTES,
        "step name" => crate::limits::MAX_STEP_NAME_BYTES,
        _ => crate::limits::MAX_WORKFLOW_NAME_BYTES,
    };
    if name.len() > limit {
        return Err(format!(
            "it is {} bytes; the limit is {limit}, so no store could hold it",
            name.len()
        ));
    }
    Ok(())
}

/// One JSON Schema violation in a workflow input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer to the offending value (`""` is the whole input).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "at {path}: {}", self.message)
    }
}

/// Input that does not match a workflow's input schema. Nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input for workflow {workflow}: {}", violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct InvalidInput {
    /// `name` or `name@version`.
    pub workflow: String,
    /// Every violation, each with its JSON path.
    pub violations: Vec<Violation>,
}

struct Entry {
    definition: &'static WorkflowDefinition,
    validator: OnceLock<Result<Arc<jsonschema::Validator>, String>>,
}

/// The workflows known to a worker or client, keyed by `(name, version)`.
///
/// [`Registry::from_inventory`] collects every `#[workflow]` linked into the binary. Where
/// link-time registration is unavailable, or a workflow lives in a crate the binary never
/// references (so the linker drops it), register definitions by hand with
/// [`Registry::register`] or [`Registry::add`].
#[derive(Default)]
pub struct Registry {
    entries: BTreeMap<(String, Option<String>), Entry>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.values().map(|e| e.definition.display_name()))
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Every workflow registered through `#[workflow]` in this binary. Duplicate
    /// `(name, version)` pairs, two `#[step]` functions with one name, and invalid names are
    /// errors naming the source locations.
    pub fn from_inventory() -> Result<Self, RegistryError> {
        check_steps(
            inventory::iter::<StepRegistration>
                .into_iter()
                .map(|registration| registration.0),
        )?;
        let mut registry = Registry::new();
        for registration in inventory::iter::<WorkflowRegistration> {
            registry.add(registration.0)?;
        }
        tracing::info!(
            workflows = registry.len(),
            "workflow registry built from link-time registrations"
        );
        Ok(registry)
    }

    /// Registers the workflow `W` by hand.
    pub fn register<W: Workflow>(&mut self) -> Result<&mut Self, RegistryError> {
        self.add(W::definition())?;
        Ok(self)
    }

    /// Registers a definition by hand. Re-adding the very same definition is a no-op.
    pub fn add(
        &mut self,
        definition: &'static WorkflowDefinition,
    ) -> Result<&mut Self, RegistryError> {
        let names = [
            ("workflow name", Some(definition.name)),
            ("workflow version", definition.version),
            ("queue", definition.queue),
        ];
        for (what, name) in names {
            if let Some(name) = name {
                valid_name(what, name).map_err(|reason| RegistryError::InvalidName {
                    what,
                    name,
                    location: &definition.location,
                    reason,
                })?;
            }
        }
        let key = (
            definition.name.to_owned(),
            definition.version.map(str::to_owned),
        );
        if let Some(existing) = self.entries.get(&key) {
            if std::ptr::eq(existing.definition, definition) {
                return Ok(self);
            }
            return Err(RegistryError::DuplicateWorkflow {
                name: definition.name,
                version: definition.version,
                first: &existing.definition.location,
                second: &definition.location,
            });
        }
        self.entries.insert(
            key,
            Entry {
                definition,
                validator: OnceLock::new(),
            },
        );
        Ok(self)
    }

    /// The definition of `name` at exactly `version`.
    pub fn get(&self, name: &str, version: Option<&str>) -> Option<&'static WorkflowDefinition> {
        self.entry(name, version).map(|entry| entry.definition)
    }

    /// The newest version of `name`: versions compare numerically where they are numbers
    /// (`"10" > "9"`, `"1.10" > "1.9"`), and an unversioned definition is the oldest.
    pub fn latest(&self, name: &str) -> Option<&'static WorkflowDefinition> {
        self.entries
            .values()
            .filter(|entry| entry.definition.name == name)
            .max_by(|a, b| compare_versions(a.definition.version, b.definition.version))
            .map(|entry| entry.definition)
    }

    /// Every registered definition, by name then version.
    pub fn iter(&self) -> impl Iterator<Item = &'static WorkflowDefinition> + '_ {
        self.entries.values().map(|entry| entry.definition)
    }

    /// How many definitions are registered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no definition is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn entry(&self, name: &str, version: Option<&str>) -> Option<&Entry> {
        self.entries
            .get(&(name.to_owned(), version.map(str::to_owned)))
    }

    /// Checks `input` against the input schema of `name` at `version`. Every violation is
    /// reported with its JSON path.
    ///
    /// # Panics
    ///
    /// Never; an unknown workflow reports a single violation.
    pub fn validate_input(
        &self,
        name: &str,
        version: Option<&str>,
        input: &Value,
    ) -> Result<(), InvalidInput> {
        let Some(entry) = self.entry(name, version) else {
            return Err(InvalidInput {
                workflow: name.to_owned(),
                violations: vec![Violation {
                    path: String::new(),
                    message: "workflow is not registered".into(),
                }],
            });
        };
        validate(entry, input)
    }
}

/// Checks the `#[step]` definitions linked into the binary: valid names, and no name used by
/// two different steps. (The same definition seen twice is fine.)
pub(crate) fn check_steps(
    steps: impl IntoIterator<Item = &'static StepDefinition>,
) -> Result<(), RegistryError> {
    let mut seen: BTreeMap<&'static str, &'static StepDefinition> = BTreeMap::new();
    for step in steps {
        valid_name("step name", step.name).map_err(|reason| RegistryError::InvalidName {
            what: "step name",
            name: step.name,
            location: &step.location,
            reason,
        })?;
        if let Some(first) = seen.insert(step.name, step)
            && !std::ptr::eq(first, step)
        {
            return Err(RegistryError::DuplicateStep {
                name: step.name,
                first: &first.location,
                second: &step.location,
            });
        }
    }
    Ok(())
}

fn validate(entry: &Entry, input: &Value) -> Result<(), InvalidInput> {
    let workflow = entry.definition.display_name();
    let validator = entry.validator.get_or_init(|| {
        jsonschema::validator_for(&(entry.definition.input_schema)())
            .map(Arc::new)
            .map_err(|error| error.to_string())
    });
    let validator = match validator {
        Ok(validator) => validator,
        Err(error) => {
            return Err(InvalidInput {
                workflow,
                violations: vec![Violation {
                    path: String::new(),
                    message: format!("the workflow's input schema is invalid: {error}"),
                }],
            });
        }
    };
    let violations: Vec<Violation> = validator
        .iter_errors(input)
        .map(|error| Violation {
            path: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        })
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(InvalidInput {
            workflow,
            violations,
        })
    }
}

fn compare_versions(a: Option<&str>, b: Option<&str>) -> std::cmp::Ordering {
    match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(a), Some(b)) => {
            let parts = |v: &str| -> Vec<(u64, String)> {
                v.split(['.', '-'])
                    .map(|part| (part.parse::<u64>().unwrap_or(0), part.to_owned()))
                    .collect()
            };
            parts(a).cmp(&parts(b))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::compare_versions;
    use std::cmp::Ordering;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(compare_versions(Some("10"), Some("9")), Ordering::Greater);
        assert_eq!(
            compare_versions(Some("1.10"), Some("1.9")),
            Ordering::Greater
        );
        assert_eq!(compare_versions(None, Some("1")), Ordering::Less);
        assert_eq!(compare_versions(Some("2"), Some("2")), Ordering::Equal);
    }
}
